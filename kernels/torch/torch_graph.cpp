// TorchGraph: a pattern graph prepared once on the host (GsaHostGraph) and uploaded once to the op's device.
#include "kernels/torch/torch_graph.h"

#include <fmt/format.h>

#include <memory>
#include <string>
#include <vector>

#include "kernels/gsa_host_graph.h"
#include "kernels/gsa_tile_plan.h"
#include "kernels/torch/tensor_text.h"
#include "common/error.h"

namespace sb {

namespace {

torch::Tensor upload(const void* data, int64_t n, torch::Dtype dtype, torch::Device device) {
  return torch::from_blob(const_cast<void*>(data), {n}, dtype).to(device, /*non_blocking=*/false, /*copy=*/true);
}

template <typename T>
std::vector<T> to_vector(const torch::Tensor& t) {
  const torch::Tensor c = t.to(torch::kCPU).contiguous();
  return std::vector<T>(c.data_ptr<T>(), c.data_ptr<T>() + c.numel());
}

}  // namespace

TorchGraph TorchGraph::from_host(const GsaHostGraph& h, torch::Device device) {
  TorchGraph t;
  t.n_tokens = h.n_nodes;
  t.n_nodes = h.n_nodes;
  t.n_relations = h.n_relations;
  const int64_t ne = h.n_edges();
  t.row_ptr = upload(h.row_ptr.data(), h.n_nodes + 1, torch::kInt64, device);
  t.col = upload(h.col.data(), ne, torch::kInt32, device);
  t.rel = upload(h.rel.data(), ne, torch::kInt32, device);
  t.t_row_ptr = upload(h.t_row_ptr.data(), h.n_nodes + 1, torch::kInt64, device);
  t.t_col = upload(h.t_col.data(), ne, torch::kInt32, device);
  t.t_edge = upload(h.t_edge.data(), ne, torch::kInt32, device);
  t.rel_ptr = upload(h.rel_ptr.data(), h.n_relations + 1, torch::kInt64, device);
  t.rel_edge = upload(h.rel_edge.data(), ne, torch::kInt32, device);
  t.rel_dst = upload(h.rel_dst.data(), ne, torch::kInt32, device);
  const auto schedule = [&](const GsaPackedSchedule& s) {
    return upload(s.data.data(), static_cast<int64_t>(s.data.size()), torch::kInt64, device);
  };
  t.row_schedule = schedule(h.row_schedule);
  t.src_schedule = schedule(h.src_schedule);
  t.row_pieces = h.row_schedule.n_pieces;
  t.row_split = h.row_schedule.n_split;
  t.src_pieces = h.src_schedule.n_pieces;
  t.src_split = h.src_schedule.n_split;
  const auto blocks = [&](const std::vector<int32_t>& order) {
    return upload(order.data(), static_cast<int64_t>(order.size()), torch::kInt32, device);
  };
  t.row_blocks = blocks(h.row_blocks);
  t.src_blocks = blocks(h.src_blocks);
  t.cpu_plans = std::make_shared<const GsaCpuPlans>(h.cpu_plans);
  if (device.is_cuda()) {  // planned once here, so no tensor-core call plans again
    const auto tiles = [&](const std::vector<int64_t>& ptr, const std::vector<int32_t>& col, const GsaPackedSchedule& s,
                           torch::Tensor& data, std::shared_ptr<const GsaPackedTiles>& layout, int64_t rows) {
      GsaTileOptions options;
      options.rows = rows;
      GsaPackedTiles packed = gsa_pack_tiles(gsa_tile_plan(ptr.data(), col.data(), h.n_nodes, options), s.data,
                                             s.n_pieces, s.n_split);
      data = upload(packed.data.data(), static_cast<int64_t>(packed.data.size()), torch::kInt64, device);
      packed.data.clear();
      layout = std::make_shared<const GsaPackedTiles>(std::move(packed));
    };
    tiles(h.row_ptr, h.col, h.row_schedule, t.tile_data, t.tile_layout, kGsaTileRows);
    tiles(h.t_row_ptr, h.t_col, h.src_schedule, t.src_tile_data, t.src_tile_layout, kGsaTileRows);
    // SB_CUDA_TC_ROWS=64: 64-row tiles for the forward as well (the backward keeps the 16-row ones).
    if (gsa_tile_rows_from_env() == kGsaWideTileRows) {
      tiles(h.row_ptr, h.col, h.row_schedule, t.wide_tile_data, t.wide_tile_layout, kGsaWideTileRows);
    }
  }
  return t;
}

TorchGraph TorchGraph::from_graph(const Graph& g, torch::Device device) {
  TorchGraph t = from_host(GsaHostGraph(g), device);
  t.n_tokens = g.n_tokens;
  t.causal = g.causal;
  return t;
}

TorchGraph TorchGraph::from_tensors(const torch::Tensor& row_ptr, const torch::Tensor& col, const torch::Tensor& rel,
                                    int64_t n_relations) {
  auto check = [](const torch::Tensor& t, const char* name, torch::Dtype dtype, int64_t n) {
    if (!t.defined() || t.dim() != 1 || t.scalar_type() != dtype || (n >= 0 && t.numel() != n)) {
      throw Error(fmt::format("graph: {} must be a 1-d {} tensor{}, got {} {}", name, dtype_name(dtype),
                              n >= 0 ? fmt::format(" of {} entries", n) : std::string(),
                              t.defined() ? dtype_str(t) : "undefined", t.defined() ? shape_str(t) : ""));
    }
  };
  check(row_ptr, "row_ptr", torch::kInt64, -1);
  check(col, "col", torch::kInt32, -1);
  check(rel, "rel", torch::kInt32, col.numel());
  for (const torch::Tensor* t : {&col, &rel}) {
    if (t->device() != row_ptr.device()) throw Error("graph: row_ptr, col and rel must be on one device");
  }
  // The one host copy of the graph: checked, transposed and grouped there, then uploaded back.
  const GsaHostGraph host(to_vector<int64_t>(row_ptr), to_vector<int32_t>(col), to_vector<int32_t>(rel), n_relations);
  return from_host(host, row_ptr.device());
}

}  // namespace sb
