// LibTorch layer over the graph-attention kernels: the autograd op, its graph tensors, and the dense baseline.
#pragma once

#include <torch/torch.h>

#include "patterns/graph.h"

namespace sb {

// A pattern graph as int tensors on one device (built once, shared by a batch and by every layer).
struct TorchGraph {
  int64_t n_tokens = 0;
  int64_t n_nodes = 0;
  int64_t n_relations = 0;
  bool causal = false;
  torch::Tensor row_ptr;    // [N + 1] int64, CSR by destination
  torch::Tensor col;        // [E] int32, source node per edge
  torch::Tensor rel;        // [E] int32 (or int16), relation id per edge
  torch::Tensor t_row_ptr;  // [N + 1] int64, CSR by source
  torch::Tensor t_col;      // [E] int32, destination per transposed edge
  torch::Tensor t_edge;     // [E] int32, edge index of each transposed edge

  static TorchGraph from_graph(const Graph& g, torch::Device device = torch::kCPU);
};

// Graph self-attention (BPT eqs. 4-7, 13): for node u and each source v of u,
// s_uv = q_u . (k_v + rel_emb[rel(uv)]) / sqrt(D), o_u = sum_v softmax_v(s_u)_v v_v.
// q, k, v: [B, N, H, D] (N = graph nodes); rel_emb: [R, D] or an undefined tensor; returns o: [B, N, H, D].
// Differentiable in q, k, v and rel_emb.
torch::Tensor graph_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                              const torch::Tensor& rel_emb, const TorchGraph& graph);

// Dense baseline in plain LibTorch (matmul, softmax, matmul), causal or not.
// q, k, v: [B, T, H, D]; returns [B, T, H, D].
torch::Tensor dense_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, bool causal);

}  // namespace sb
