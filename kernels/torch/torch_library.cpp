// TORCH_LIBRARY(sparsebench): the graph-attention op for Python (torch.ops.load_library("libsparsebench_ops.so")).
// torch.ops.sparsebench.graph_attention(q, k, v, rel_emb or None, row_ptr, col, rel, t_row_ptr, t_col, t_edge)
// q, k, v: [B, N, H, D]; graph tensors as in sb::TorchGraph; differentiable in q, k, v and rel_emb.
#include <torch/library.h>
#include <torch/torch.h>

#include "kernels/torch/graph_attention_op.h"

namespace {

torch::Tensor graph_attention_op(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                 const c10::optional<torch::Tensor>& rel_emb, const torch::Tensor& row_ptr,
                                 const torch::Tensor& col, const torch::Tensor& rel, const torch::Tensor& t_row_ptr,
                                 const torch::Tensor& t_col, const torch::Tensor& t_edge) {
  const torch::Tensor r = rel_emb.has_value() ? *rel_emb : torch::Tensor();
  const sb::TorchGraph g = sb::TorchGraph::from_tensors(row_ptr, col, rel, t_row_ptr, t_col, t_edge,
                                                        r.defined() && r.dim() == 2 ? r.size(0) : 0);
  return sb::graph_attention(q, k, v, r, g);
}

torch::Tensor dense_attention_op(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, bool causal) {
  return sb::dense_attention(q, k, v, causal);
}

}  // namespace

// One definition for every device: the kernels dispatch by the tensors' device, and autograd comes from
// the autograd function inside sb::graph_attention.
TORCH_LIBRARY(sparsebench, m) {
  m.def("graph_attention(Tensor q, Tensor k, Tensor v, Tensor? rel_emb, Tensor row_ptr, Tensor col, Tensor rel, "
        "Tensor t_row_ptr, Tensor t_col, Tensor t_edge) -> Tensor",
        &graph_attention_op);
  m.def("dense_attention(Tensor q, Tensor k, Tensor v, bool causal) -> Tensor", &dense_attention_op);
}
