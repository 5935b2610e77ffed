// GsaHostGraph: checks and widens a graph's CSR, transposes it when needed, groups edges by relation.
#include "kernels/gsa_host_graph.h"

#include <atomic>
#include <fmt/format.h>

#include "common/error.h"
#include "kernels/gsa_cpu.h"

namespace sb {

namespace {

std::atomic<int64_t> g_preparations{0};

constexpr int64_t kMaxRelations = 65535;  // relation ids fit a Graph's uint16 (see GraphBuilder::relation)

}  // namespace

GsaHostGraph::GsaHostGraph(const Graph& g)
    : n_nodes(g.n_nodes()),
      n_relations(g.n_relations()),
      row_ptr(g.row_ptr),
      t_row_ptr(g.t_row_ptr),
      col(g.col),
      rel(g.rel.begin(), g.rel.end()),
      t_col(g.t_col),
      t_edge(g.t_edge) {
  check_edge_count(g.n_edges());
  group_edges(row_ptr, rel, n_relations, rel_ptr, rel_dst, rel_edge);
  plan_schedules();
  g_preparations.fetch_add(1, std::memory_order_relaxed);
}

GsaHostGraph::GsaHostGraph(std::vector<int64_t> row_ptr_in, std::vector<int32_t> col_in,
                           std::vector<int32_t> rel_in, int64_t n_relations_in)
    : row_ptr(std::move(row_ptr_in)), col(std::move(col_in)), rel(std::move(rel_in)) {
  if (row_ptr.empty()) throw Error("graph: row_ptr must have n_nodes + 1 >= 1 entries");
  n_nodes = static_cast<int64_t>(row_ptr.size()) - 1;
  const int64_t ne = n_edges();
  check_edge_count(ne);
  if (static_cast<int64_t>(rel.size()) != ne) {
    throw Error(fmt::format("graph: rel must have one entry per edge ({}), got {}", ne, rel.size()));
  }
  if (row_ptr.front() != 0 || row_ptr.back() != ne) {
    throw Error(fmt::format("graph: row_ptr must run from 0 to E = {}", ne));
  }
  for (int64_t u = 0; u < n_nodes; ++u) {
    if (row_ptr[u + 1] < row_ptr[u]) throw Error(fmt::format("graph: row_ptr decreases at node {}", u));
  }
  if (n_relations_in > kMaxRelations) {
    throw Error(fmt::format("graph: n_relations = {} exceeds {}", n_relations_in, kMaxRelations));
  }
  n_relations = std::max<int64_t>(0, n_relations_in);
  for (int64_t e = 0; e < ne; ++e) {
    if (col[e] < 0 || col[e] >= n_nodes) {
      throw Error(fmt::format("graph: col[{}] = {} outside [0, {})", e, col[e], n_nodes));
    }
    if (rel[e] < 0 || rel[e] >= kMaxRelations) {
      throw Error(fmt::format("graph: rel[{}] = {} outside [0, {})", e, rel[e], kMaxRelations));
    }
    n_relations = std::max<int64_t>(n_relations, int64_t{rel[e]} + 1);
  }
  group_edges(row_ptr, col, n_nodes, t_row_ptr, t_col, t_edge);  // the transpose
  group_edges(row_ptr, rel, n_relations, rel_ptr, rel_dst, rel_edge);
  plan_schedules();
  g_preparations.fetch_add(1, std::memory_order_relaxed);
}

void GsaHostGraph::plan_schedules() {
  const int64_t threshold = gsa_device_split_threshold(n_nodes, n_edges());
  row_schedule = gsa_pack_schedule(row_ptr.data(), n_nodes, threshold);
  src_schedule = gsa_pack_schedule(t_row_ptr.data(), n_nodes, threshold);
  row_blocks = gsa_block_order(row_ptr.data(), col.data(), n_nodes);
  src_blocks = gsa_block_order(t_row_ptr.data(), t_col.data(), n_nodes);
  cpu_plans = gsa_cpu_plans(view());
}

GsaGraphView GsaHostGraph::view() const {
  GsaGraphView v;
  v.row_ptr = row_ptr.data();
  v.col = col.data();
  v.rel = rel.data();
  v.t_row_ptr = t_row_ptr.data();
  v.t_col = t_col.data();
  v.t_edge = t_edge.data();
  v.rel_ptr = rel_ptr.data();
  v.rel_edge = rel_edge.data();
  v.rel_dst = rel_dst.data();
  v.row_blocks = row_blocks.data();
  v.src_blocks = src_blocks.data();
  v.rows = gsa_schedule_view(row_schedule.data.data(), n_nodes, row_schedule.n_pieces, row_schedule.n_split);
  v.srcs = gsa_schedule_view(src_schedule.data.data(), n_nodes, src_schedule.n_pieces, src_schedule.n_split);
  v.n_nodes = n_nodes;
  v.n_edges = n_edges();
  v.cpu_plans = &cpu_plans;
  return v;
}

int64_t GsaHostGraph::preparations() { return g_preparations.load(std::memory_order_relaxed); }

}  // namespace sb
