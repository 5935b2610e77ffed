// GsaHostGraph: a graph prepared for the kernels on the host, once per graph: its CSR in the kernels'
// integer widths, checked, with the transpose and the relation grouping. Device copies are made from it
// (once per device); no kernel call prepares a graph.
#pragma once

#include <vector>

#include "kernels/gsa_params.h"
#include "kernels/gsa_split_plan.h"
#include "patterns/graph.h"

namespace sb {

struct GsaHostGraph {
  int64_t n_nodes = 0;
  int64_t n_relations = 0;
  std::vector<int64_t> row_ptr, t_row_ptr, rel_ptr;         // [N + 1], [N + 1], [R + 1]
  std::vector<int32_t> col, rel, t_col, t_edge;             // [E] each
  std::vector<int32_t> rel_edge, rel_dst;                   // [E] each: edges grouped by relation
  // Device-backend schedules (gsa_device_split_threshold) by destination and by source.
  GsaPackedSchedule row_schedule, src_schedule;
  // The CPU kernels' block orders by destination and by source (gsa_block_order).
  std::vector<int32_t> row_blocks, src_blocks;
  // The CPU kernels' split plans (gsa_cpu_plans).
  GsaCpuPlans cpu_plans;

  // From a pattern graph (already consistent; only its edge count is checked).
  explicit GsaHostGraph(const Graph& g);
  // From destination CSR arrays alone (e.g. tensors handed to the op): row_ptr [N + 1] from 0 to E,
  // col [E] in [0, N), rel [E] >= 0; throws sb::Error naming the first bad entry ("graph: col[3] = 9
  // outside [0, 5)"). n_relations becomes max(n_relations, max(rel) + 1); the transpose is built here.
  GsaHostGraph(std::vector<int64_t> row_ptr, std::vector<int32_t> col, std::vector<int32_t> rel,
               int64_t n_relations);

  int64_t n_edges() const { return static_cast<int64_t>(col.size()); }
  // Pointers into this object's arrays (host memory).
  GsaGraphView view() const;

  // Host preparations (each one O(E) pass over a graph) made by this process so far.
  static int64_t preparations();

 private:
  void plan_schedules();  // fills row_schedule, src_schedule, row_blocks, src_blocks and cpu_plans
};

}  // namespace sb
