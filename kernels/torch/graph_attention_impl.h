// The op's device kernels over the backend registry, shared by the per-device registrations
// (graph_attention_op.cpp: CPU, graph_attention_cuda.cpp: CUDA). Internal to kernels/torch/.
#pragma once

#include <torch/torch.h>

#include "kernels/torch/graph_attention_op.h"

namespace sb::op {

using GraphRef = c10::intrusive_ptr<TorchGraph>;

// Checks the inputs and runs the backend for q's device on `stream` (a cudaStream_t on CUDA, else nullptr).
// q, k, v: [B, N, H, D]; rel_emb: [R, D] or none; returns o [B, N, H, D] and lse [B, N, H].
std::tuple<torch::Tensor, torch::Tensor> forward_on_device(const torch::Tensor& q, const torch::Tensor& k,
                                                           const torch::Tensor& v,
                                                           const c10::optional<torch::Tensor>& rel_emb,
                                                           const GraphRef& graph, void* stream);
// d_o, o: [B, N, H, D]; lse: [B, N, H]; returns dq, dk, dv (and d_rel_emb [R, D] with rel_emb).
std::vector<torch::Tensor> backward_on_device(const torch::Tensor& d_o, const torch::Tensor& q,
                                              const torch::Tensor& k, const torch::Tensor& v,
                                              const c10::optional<torch::Tensor>& rel_emb, const torch::Tensor& o,
                                              const torch::Tensor& lse, const GraphRef& graph, void* stream);

}  // namespace sb::op
