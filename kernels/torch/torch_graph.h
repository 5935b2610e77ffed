// TorchGraph: a pattern graph prepared for the graph-attention op on one device (LibTorch tensors).
#pragma once

#include <torch/custom_class.h>
#include <torch/torch.h>

#include <memory>

#include "kernels/gsa_split_plan.h"
#include "patterns/graph.h"

namespace sb {

struct GsaHostGraph;
struct GsaPackedTiles;

// A pattern graph prepared for the op on one device: checked, transposed and grouped by relation on the
// host once (GsaHostGraph), uploaded once, then reused by every call (copies share the device arrays).
// Python sees it as torch.classes.sparsebench.Graph, made by torch.ops.sparsebench.prepare_graph.
struct TorchGraph : torch::CustomClassHolder {
  int64_t n_tokens = 0;
  int64_t n_nodes = 0;
  int64_t n_relations = 0;
  bool causal = false;
  torch::Tensor row_ptr;    // [N + 1] int64, CSR by destination
  torch::Tensor col;        // [E] int32, source node per edge
  torch::Tensor rel;        // [E] int32, relation id per edge
  torch::Tensor t_row_ptr;  // [N + 1] int64, CSR by source
  torch::Tensor t_col;      // [E] int32, destination per transposed edge
  torch::Tensor t_edge;     // [E] int32, edge index of each transposed edge
  // Edges grouped by relation: rel_edge[rel_ptr[r]..rel_ptr[r+1]) ascending, rel_dst their destinations.
  torch::Tensor rel_ptr;    // [R + 1] int64
  torch::Tensor rel_edge;   // [E] int32
  torch::Tensor rel_dst;    // [E] int32
  // Load-balancing schedules for device backends (GsaPackedSchedule: split rows' pieces, the rest heaviest
  // first), by destination and by source, int64, with their sizes.
  torch::Tensor row_schedule, src_schedule;
  int64_t row_pieces = 0, row_split = 0, src_pieces = 0, src_split = 0;
  // The CPU kernels' block orders by destination and by source (gsa_block_order), int32.
  torch::Tensor row_blocks, src_blocks;
  // The CPU kernels' split plans (host memory, shared by copies).
  std::shared_ptr<const GsaCpuPlans> cpu_plans;
  // CUDA graphs: dense 16-row tiles for the tensor-core kernels (gsa_pack_tiles) by destination and by source, int64,
  // and their layouts (data left empty); undefined and null on other devices.
  torch::Tensor tile_data, src_tile_data;
  std::shared_ptr<const GsaPackedTiles> tile_layout, src_tile_layout;
  // With SB_CUDA_TC_ROWS=64 (read when the graph is prepared): 64-row tiles by destination for the forward; else
  // undefined and null.
  torch::Tensor wide_tile_data;
  std::shared_ptr<const GsaPackedTiles> wide_tile_layout;

  static TorchGraph from_graph(const Graph& g, torch::Device device = torch::kCPU);
  // From the destination CSR as tensors on one device (what prepare_graph takes): row_ptr [N + 1] int64,
  // col [E] int32, rel [E] int32, each checked; n_relations = max(n_relations, max(rel) + 1), n_tokens = N.
  static TorchGraph from_tensors(const torch::Tensor& row_ptr, const torch::Tensor& col, const torch::Tensor& rel,
                                 int64_t n_relations = 0);
  // The one upload of a host-prepared graph to `device`.
  static TorchGraph from_host(const GsaHostGraph& h, torch::Device device);
  torch::Device device() const { return row_ptr.device(); }
  int64_t n_edges() const { return col.numel(); }
};

}  // namespace sb
