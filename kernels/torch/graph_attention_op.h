// LibTorch layer over the graph-attention kernels: the prepared graph, the op, and the dense baseline.
// The op is declared once (TORCH_LIBRARY(sparsebench), torch.ops.sparsebench.*), implemented per device
// (TORCH_LIBRARY_IMPL CPU here, CUDA in graph_attention_cuda.cpp) over the kernel backend registry
// (kernels/gsa_backend.h), with an Autograd registration; the functions below call it.
#pragma once

#include <torch/custom_class.h>
#include <torch/torch.h>

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

// Graph self-attention (BPT eqs. 4-7, 13): for node u and each source v of u,
// s_uv = q_u . (k_v + rel_emb[rel(uv)]) / sqrt(D), o_u = sum_v softmax_v(s_u)_v v_v.
// q, k, v: [B, N, H, D] (N = graph nodes); rel_emb: [R, D] or an undefined tensor; returns o: [B, N, H, D].
// Differentiable in q, k, v and rel_emb. No call prepares the graph again (GsaHostGraph::preparations()).
torch::Tensor graph_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                              const torch::Tensor& rel_emb, const TorchGraph& graph);

// The op's two halves without autograd (what the autograd function calls): forward returns o and
// lse [B, N, H] (fp32; fp64 for fp64 inputs); backward returns dq, dk, dv and d_rel_emb (undefined
// when rel_emb is). Same checks as graph_attention.
std::tuple<torch::Tensor, torch::Tensor> graph_attention_forward(const torch::Tensor& q, const torch::Tensor& k,
                                                                 const torch::Tensor& v, const torch::Tensor& rel_emb,
                                                                 const TorchGraph& graph);
std::vector<torch::Tensor> graph_attention_backward(const torch::Tensor& d_o, const torch::Tensor& q,
                                                    const torch::Tensor& k, const torch::Tensor& v,
                                                    const torch::Tensor& rel_emb, const torch::Tensor& o,
                                                    const torch::Tensor& lse, const TorchGraph& graph);

// A dtype as Python spells it: float32, bfloat16, int64, ...
std::string dtype_name(c10::ScalarType s);

// Name of the kernel backend calls on `device` in `dtype` use (e.g. "cpu:AVX2", "cuda", "cpu:AVX2 (bfloat16 staged
// to float32)"); throws sb::Error when none.
std::string graph_attention_backend(torch::Device device, c10::ScalarType dtype = torch::kFloat32);

// Dense baselines, causal or not; q, k, v: [B, T, H, D]; return [B, T, H, D].
// dense_attention is the best dense attention LibTorch has: at::scaled_dot_product_attention on LibTorch >= 2.0
// (its fused FlashAttention, memory-efficient, cuDNN or CPU flash kernels; no mask is materialised), and the
// materialised path on LibTorch 1.13, which has no fused kernel.
torch::Tensor dense_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, bool causal);
// dense_naive_attention materialises every score (matmul, mask, softmax, matmul): the paper's own baseline.
torch::Tensor dense_naive_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                    bool causal);
// The dense baseline a model or scenario names: dense_naive_attention when `naive`, else dense_attention.
inline torch::Tensor dense_baseline(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                    bool causal, bool naive) {
  return naive ? dense_naive_attention(q, k, v, causal) : dense_attention(q, k, v, causal);
}
// The kernel a dense call on these inputs runs, as records name it: "sdpa:flash_attention",
// "sdpa:efficient_attention", "sdpa:cudnn_attention", "sdpa:math" or "materialised" (naive: dense_naive_attention).
std::string dense_attention_backend(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                    bool causal, bool naive);

}  // namespace sb
