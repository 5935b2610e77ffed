// The op's CUDA registrations (built when the kernels have CUDA and LibTorch does): the device kernels
// of graph_attention_impl.h on the current CUDA stream of q's device.
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include "kernels/torch/graph_attention_impl.h"

// Linked in by name (sb_torch_ops' link options): nothing else refers to this file.
extern "C" void sb_graph_attention_cuda_registrations() {}

namespace sb {

namespace {

using op::GraphRef;

void* current_stream(const torch::Tensor& q) { return c10::cuda::getCurrentCUDAStream(q.get_device()).stream(); }

std::tuple<torch::Tensor, torch::Tensor> forward_cuda(const torch::Tensor& q, const torch::Tensor& k,
                                                      const torch::Tensor& v,
                                                      const c10::optional<torch::Tensor>& rel_emb,
                                                      const GraphRef& graph) {
  const c10::cuda::CUDAGuard device_guard(q.device());
  return op::forward_on_device(q, k, v, rel_emb, graph, current_stream(q));
}

std::vector<torch::Tensor> backward_cuda(const torch::Tensor& d_o, const torch::Tensor& q, const torch::Tensor& k,
                                         const torch::Tensor& v, const c10::optional<torch::Tensor>& rel_emb,
                                         const torch::Tensor& o, const torch::Tensor& lse, const GraphRef& graph) {
  const c10::cuda::CUDAGuard device_guard(q.device());
  return op::backward_on_device(d_o, q, k, v, rel_emb, o, lse, graph, current_stream(q));
}

torch::Tensor attention_cuda(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                             const c10::optional<torch::Tensor>& rel_emb, const GraphRef& graph) {
  return std::get<0>(forward_cuda(q, k, v, rel_emb, graph));
}

}  // namespace

}  // namespace sb

TORCH_LIBRARY_IMPL(sparsebench, CUDA, m) {
  m.impl("graph_attention", &sb::attention_cuda);
  m.impl("graph_attention_forward", &sb::forward_cuda);
  m.impl("graph_attention_backward", &sb::backward_cuda);
}
