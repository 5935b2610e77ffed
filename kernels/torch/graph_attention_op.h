// LibTorch layer over the graph-attention kernels: the op. It is declared once (TORCH_LIBRARY(sparsebench),
// torch.ops.sparsebench.*), implemented per device (TORCH_LIBRARY_IMPL CPU in graph_attention_op.cpp, CUDA in
// graph_attention_cuda.cpp) over the kernel backend registry (kernels/gsa_backend.h), with an Autograd
// registration; the functions below call it. Its graph argument is a TorchGraph (torch_graph.h); the dense
// baselines it is compared against are in dense_attention.h, and how messages name tensors in tensor_text.h.
#pragma once

#include <torch/torch.h>

#include "kernels/torch/dense_attention.h"
#include "kernels/torch/tensor_text.h"
#include "kernels/torch/torch_graph.h"

namespace sb {

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

// Name of the kernel backend calls on `device` in `dtype` use (e.g. "cpu:AVX2", "cuda", "cpu:AVX2 (bfloat16 staged
// to float32)"); throws sb::Error when none.
std::string graph_attention_backend(torch::Device device, c10::ScalarType dtype = torch::kFloat32);
// What the calling thread's last forward on `device` ran where (cuda:tc: its share of edges on tensor cores, or why
// none ran there); "" for backends with one way of running a call.
std::string graph_attention_last_call(torch::Device device);

}  // namespace sb
