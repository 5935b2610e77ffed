// The graph-attention op: its declaration (TORCH_LIBRARY), input checks, the kernels' params, its CPU and Autograd
// registrations and the calls of graph_attention_op.h.
#include "kernels/torch/graph_attention_op.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <cmath>
#include <fmt/format.h>
#include <torch/library.h>

#include "kernels/gsa_backend.h"
#include "kernels/gsa_host_graph.h"
#include "kernels/gsa_params.h"
#include "kernels/gsa_tile_plan.h"
#include "kernels/torch/graph_attention_impl.h"
#include "common/error.h"

// Linked in by name (sb_torch_ops' link options) so that a library or program that calls nothing here,
// such as libsparsebench_ops.so, still carries the op's registrations.
extern "C" void sb_graph_attention_op_registrations() {}

namespace sb {

namespace {

using op::GraphRef;

bool floating(const torch::Tensor& t) {
  const auto s = t.scalar_type();
  return s == torch::kFloat32 || s == torch::kFloat64 || s == torch::kFloat16 || s == torch::kBFloat16;
}

GsaDtype gsa_dtype(c10::ScalarType s) {
  switch (s) {
    case torch::kFloat64: return GsaDtype::f64;
    case torch::kFloat16: return GsaDtype::f16;
    case torch::kBFloat16: return GsaDtype::bf16;
    default: return GsaDtype::f32;
  }
}

torch::Dtype acc_dtype(const torch::Tensor& t) {
  return t.scalar_type() == torch::kFloat64 ? torch::kFloat64 : torch::kFloat32;
}

// The backend the op runs on `device`, or an sb::Error naming why there is none.
const GsaBackend& backend_for(const torch::Device& device) {
  const GsaBackend* b = nullptr;
  if (device.is_cpu()) {
    b = gsa_backend_for(GsaDevice::cpu);
  } else if (device.is_cuda()) {
    b = gsa_backend_for(GsaDevice::cuda);
    if (b == nullptr) {
      throw Error(fmt::format("graph_attention: q is on {} but this build has no CUDA kernels", device.str()));
    }
  } else {
    throw Error(fmt::format("graph_attention: q is on {}; only CPU and CUDA are supported", device.str()));
  }
  if (b == nullptr) throw Error(fmt::format("graph_attention: no kernel backend for {}", device.str()));
  return *b;
}

// The call's shapes and dtype (no pointers): what a backend needs to answer whether it supports it.
GsaParams shape_params(const torch::Tensor& q, const torch::Tensor& rel_emb, const TorchGraph& graph) {
  GsaParams p;
  p.graph.n_nodes = graph.n_nodes;
  p.graph.n_edges = graph.n_edges();
  p.dtype = gsa_dtype(q.scalar_type());
  p.B = q.size(0);
  p.N = q.size(1);
  p.H = q.size(2);
  p.D = q.size(3);
  p.scale = 1.0 / std::sqrt(static_cast<double>(p.D));
  if (rel_emb.defined()) p.R = rel_emb.size(0);
  return p;
}

// A backend without kernels for a half type but with float32 ones (the CPU's) runs the call staged: inputs
// converted to float32, the float32 kernels (which accumulate in float32 as the half kernels do), results
// rounded back. The staging copies are LibTorch tensors, so memory records count them.
bool staged_through_float32(const GsaBackend& backend, const GsaParams& p) {
  if (p.dtype != GsaDtype::f16 && p.dtype != GsaDtype::bf16) return false;
  GsaParams f = p;
  f.dtype = GsaDtype::f32;
  return !backend.unsupported(p).empty() && backend.unsupported(f).empty();
}

torch::Tensor to_float32(const torch::Tensor& t) { return t.defined() ? t.to(torch::kFloat32) : t; }

// Every check of the op's inputs: shapes, dtypes, devices, the graph's consistency with them, and the
// support of the device's backend for the call. Returns that backend.
const GsaBackend& check_inputs(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                               const torch::Tensor& rel_emb, const TorchGraph& graph) {
  if (!q.defined() || !k.defined() || !v.defined()) throw Error("graph_attention: q, k and v must be defined tensors");
  const int64_t nn = graph.n_nodes;
  if (q.dim() != 4 || q.size(1) != nn) {
    throw Error(fmt::format("q must have shape (B, N, H, D) with N = {} graph nodes, got {}", nn, shape_str(q)));
  }
  const std::string want = shape_str(q);
  if (k.sizes() != q.sizes()) throw Error(fmt::format("k must have shape {} like q, got {}", want, shape_str(k)));
  if (v.sizes() != q.sizes()) throw Error(fmt::format("v must have shape {} like q, got {}", want, shape_str(v)));
  if (!floating(q)) {
    throw Error(fmt::format("q must have dtype float32, float64, float16 or bfloat16, got {}", dtype_str(q)));
  }
  for (const auto& [name, t] : {std::pair<const char*, const torch::Tensor&>{"k", k}, {"v", v}}) {
    if (t.scalar_type() != q.scalar_type()) {
      throw Error(fmt::format("{} must have dtype {} like q, got {}", name, dtype_str(q), dtype_str(t)));
    }
    if (t.device() != q.device()) {
      throw Error(fmt::format("{} must be on {} like q, got {}", name, q.device().str(), t.device().str()));
    }
  }
  if (rel_emb.defined()) {
    if (rel_emb.dim() != 2 || rel_emb.size(0) != graph.n_relations || rel_emb.size(1) != q.size(3)) {
      throw Error(fmt::format("rel_emb must have shape (R, D) = ({}, {}) for a graph with {} relations, got {}",
                              graph.n_relations, q.size(3), graph.n_relations, shape_str(rel_emb)));
    }
    if (rel_emb.scalar_type() != q.scalar_type()) {
      throw Error(fmt::format("rel_emb must have dtype {} like q, got {}", dtype_str(q), dtype_str(rel_emb)));
    }
    if (rel_emb.device() != q.device()) {
      throw Error(fmt::format("rel_emb must be on {} like q, got {}", q.device().str(), rel_emb.device().str()));
    }
  }
  if (!graph.row_ptr.defined() || graph.row_ptr.numel() != nn + 1 || !graph.rel_ptr.defined()) {
    throw Error("graph: not prepared; build it with TorchGraph::from_graph or prepare_graph");
  }
  if (graph.device() != q.device()) {
    throw Error(fmt::format("graph is on {} but q is on {}; build it with TorchGraph::from_graph(g, q.device())",
                            graph.device().str(), q.device().str()));
  }
  const GsaBackend& backend = backend_for(q.device());
  GsaParams p = shape_params(q, rel_emb, graph);
  if (staged_through_float32(backend, p)) p.dtype = GsaDtype::f32;
  gsa_require_supported(backend, p);
  return backend;
}

// Points one of p's arrays at t ([B, N, H, D]) with t's strides.
template <typename Ptr>
void set_array(Ptr& ptr, GsaStrides& strides, const torch::Tensor& t) {
  ptr = t.data_ptr();
  strides = {t.stride(0), t.stride(1), t.stride(2)};
}

GsaParams make_params(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                      const torch::Tensor& rel_emb, const TorchGraph& graph) {
  GsaParams p = shape_params(q, rel_emb, graph);
  p.graph.row_ptr = graph.row_ptr.data_ptr<int64_t>();
  p.graph.col = graph.col.data_ptr<int32_t>();
  p.graph.rel = graph.rel.data_ptr<int32_t>();
  p.graph.t_row_ptr = graph.t_row_ptr.data_ptr<int64_t>();
  p.graph.t_col = graph.t_col.data_ptr<int32_t>();
  p.graph.t_edge = graph.t_edge.data_ptr<int32_t>();
  p.graph.rel_ptr = graph.rel_ptr.data_ptr<int64_t>();
  p.graph.rel_edge = graph.rel_edge.data_ptr<int32_t>();
  p.graph.rel_dst = graph.rel_dst.data_ptr<int32_t>();
  const auto blocks = [](const torch::Tensor& t) { return t.defined() ? t.data_ptr<int32_t>() : nullptr; };
  p.graph.row_blocks = blocks(graph.row_blocks);
  p.graph.src_blocks = blocks(graph.src_blocks);
  p.graph.cpu_plans = graph.cpu_plans.get();
  p.graph.rows = gsa_schedule_view(graph.row_schedule.data_ptr<int64_t>(), graph.n_nodes, graph.row_pieces,
                                   graph.row_split);
  p.graph.srcs = gsa_schedule_view(graph.src_schedule.data_ptr<int64_t>(), graph.n_nodes, graph.src_pieces,
                                   graph.src_split);
  if (graph.tile_layout != nullptr) {
    p.graph.tiles = gsa_tile_view(graph.tile_data.data_ptr<int64_t>(), *graph.tile_layout);
    p.graph.src_tiles = gsa_tile_view(graph.src_tile_data.data_ptr<int64_t>(), *graph.src_tile_layout);
  }
  if (graph.wide_tile_layout != nullptr) {
    p.graph.wide_tiles = gsa_tile_view(graph.wide_tile_data.data_ptr<int64_t>(), *graph.wide_tile_layout);
  }
  set_array(p.q, p.q_strides, q);
  set_array(p.k, p.k_strides, k);
  set_array(p.v, p.v_strides, v);
  if (rel_emb.defined()) {
    p.rel_emb = rel_emb.data_ptr();
    p.rel_stride = rel_emb.stride(0);
  }
  return p;
}

torch::Tensor contiguous_or_undefined(const torch::Tensor& t) { return t.defined() ? t.contiguous() : t; }
torch::Tensor value_or_undefined(const c10::optional<torch::Tensor>& t) { return t.has_value() ? *t : torch::Tensor(); }
c10::optional<torch::Tensor> optional_of(const torch::Tensor& t) {
  return t.defined() ? c10::optional<torch::Tensor>(t) : c10::nullopt;
}

// Dispatcher handles of the ops declared below.
using ForwardSig = std::tuple<torch::Tensor, torch::Tensor>(const torch::Tensor&, const torch::Tensor&,
                                                            const torch::Tensor&, const c10::optional<torch::Tensor>&,
                                                            const GraphRef&);
using BackwardSig = std::vector<torch::Tensor>(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&,
                                               const torch::Tensor&, const c10::optional<torch::Tensor>&,
                                               const torch::Tensor&, const torch::Tensor&, const GraphRef&);
using OpSig = torch::Tensor(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&,
                            const c10::optional<torch::Tensor>&, const GraphRef&);

template <typename Sig>
c10::TypedOperatorHandle<Sig> find_op(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "").typed<Sig>();
}
const c10::TypedOperatorHandle<ForwardSig>& forward_op() {
  static const auto op = find_op<ForwardSig>("sparsebench::graph_attention_forward");
  return op;
}
const c10::TypedOperatorHandle<BackwardSig>& backward_op() {
  static const auto op = find_op<BackwardSig>("sparsebench::graph_attention_backward");
  return op;
}
const c10::TypedOperatorHandle<OpSig>& attention_op() {
  static const auto op = find_op<OpSig>("sparsebench::graph_attention");
  return op;
}

// A call's handle on a prepared graph: shares its device arrays (no copy of the graph).
GraphRef graph_ref(const TorchGraph& graph) { return c10::make_intrusive<TorchGraph>(graph); }

class GraphAttentionFunction : public torch::autograd::Function<GraphAttentionFunction> {
 public:
  // rel_arg: rel_emb, or a 1-d empty tensor standing for "none" (autograd inputs must be defined).
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, const torch::Tensor& rel_arg, const GraphRef& graph) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    const torch::Tensor rel_emb = rel_arg.dim() == 1 ? torch::Tensor() : rel_arg;
    auto [o, lse] = forward_op().call(q, k, v, optional_of(rel_emb), graph);
    ctx->save_for_backward({q, k, v, rel_emb, o, lse});
    ctx->saved_data["graph"] = graph;
    return o;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const GraphRef graph = ctx->saved_data["graph"].toCustomClass<TorchGraph>();
    auto grads = backward_op().call(grad_outputs[0], saved[0], saved[1], saved[2], optional_of(saved[3]), saved[4],
                                    saved[5], graph);
    return {grads[0], grads[1], grads[2], grads.size() > 3 ? grads[3] : torch::Tensor(), torch::Tensor()};
  }
};

// The Autograd registration of graph_attention: checks, then the autograd function over the device ops.
torch::Tensor graph_attention_autograd(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                       const c10::optional<torch::Tensor>& rel_opt, const GraphRef& graph) {
  const torch::Tensor rel_emb = value_or_undefined(rel_opt);
  check_inputs(q, k, v, rel_emb, *graph);
  const torch::Tensor rel_arg = rel_emb.defined() ? rel_emb : torch::empty({0}, q.options());
  return GraphAttentionFunction::apply(q, k, v, rel_arg, graph);
}

// The CPU registrations (CUDA's are in graph_attention_cuda.cpp).
std::tuple<torch::Tensor, torch::Tensor> forward_cpu(const torch::Tensor& q, const torch::Tensor& k,
                                                     const torch::Tensor& v,
                                                     const c10::optional<torch::Tensor>& rel_emb,
                                                     const GraphRef& graph) {
  return op::forward_on_device(q, k, v, rel_emb, graph, nullptr);
}
std::vector<torch::Tensor> backward_cpu(const torch::Tensor& d_o, const torch::Tensor& q, const torch::Tensor& k,
                                        const torch::Tensor& v, const c10::optional<torch::Tensor>& rel_emb,
                                        const torch::Tensor& o, const torch::Tensor& lse, const GraphRef& graph) {
  return op::backward_on_device(d_o, q, k, v, rel_emb, o, lse, graph, nullptr);
}
torch::Tensor attention_cpu(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                            const c10::optional<torch::Tensor>& rel_emb, const GraphRef& graph) {
  return std::get<0>(op::forward_on_device(q, k, v, rel_emb, graph, nullptr));
}

GraphRef prepare_graph_op(const torch::Tensor& row_ptr, const torch::Tensor& col, const torch::Tensor& rel,
                          int64_t n_relations) {
  return c10::make_intrusive<TorchGraph>(TorchGraph::from_tensors(row_ptr, col, rel, n_relations));
}

}  // namespace

namespace op {

std::tuple<torch::Tensor, torch::Tensor> forward_on_device(const torch::Tensor& q_in, const torch::Tensor& k_in,
                                                           const torch::Tensor& v_in,
                                                           const c10::optional<torch::Tensor>& rel_opt,
                                                           const GraphRef& graph, void* stream) {
  const torch::Tensor rel_in = value_or_undefined(rel_opt);
  const GsaBackend& backend = check_inputs(q_in, k_in, v_in, rel_in, *graph);
  if (staged_through_float32(backend, shape_params(q_in, rel_in, *graph))) {
    auto [o, lse] = forward_on_device(to_float32(q_in), to_float32(k_in), to_float32(v_in),
                                      optional_of(to_float32(rel_in)), graph, stream);
    return {o.to(q_in.scalar_type()), lse};
  }
  const torch::Tensor q = q_in.contiguous(), k = k_in.contiguous(), v = v_in.contiguous();
  const torch::Tensor rel_emb = contiguous_or_undefined(rel_in);
  torch::Tensor o = torch::empty_like(q);
  torch::Tensor lse = torch::empty({q.size(0), q.size(1), q.size(2)}, q.options().dtype(acc_dtype(q)));
  GsaParams p = make_params(q, k, v, rel_emb, *graph);
  set_array(p.o, p.o_strides, o);
  p.lse = lse.data_ptr();
  torch::Tensor workspace;
  if (const int64_t bytes = backend.forward_workspace_bytes(p); bytes > 0) {
    workspace = torch::empty({bytes}, q.options().dtype(torch::kUInt8));
    p.workspace = workspace.data_ptr();
    p.workspace_bytes = bytes;
  }
  backend.forward(p, stream);
  return {o, lse};
}

std::vector<torch::Tensor> backward_on_device(const torch::Tensor& d_o_in, const torch::Tensor& q_in,
                                              const torch::Tensor& k_in, const torch::Tensor& v_in,
                                              const c10::optional<torch::Tensor>& rel_opt, const torch::Tensor& o_in,
                                              const torch::Tensor& lse_in, const GraphRef& graph, void* stream) {
  const torch::Tensor rel_in = value_or_undefined(rel_opt);
  const GsaBackend& backend = check_inputs(q_in, k_in, v_in, rel_in, *graph);
  if (!d_o_in.defined() || d_o_in.sizes() != q_in.sizes() || d_o_in.scalar_type() != q_in.scalar_type()) {
    throw Error(fmt::format("d_o must have shape {} and dtype {} like q", shape_str(q_in), dtype_str(q_in)));
  }
  if (staged_through_float32(backend, shape_params(q_in, rel_in, *graph))) {
    std::vector<torch::Tensor> grads =
        backward_on_device(to_float32(d_o_in), to_float32(q_in), to_float32(k_in), to_float32(v_in),
                           optional_of(to_float32(rel_in)), to_float32(o_in), lse_in, graph, stream);
    for (auto& g : grads) g = g.to(q_in.scalar_type());
    return grads;
  }
  const torch::Tensor q = q_in.contiguous(), k = k_in.contiguous(), v = v_in.contiguous();
  const torch::Tensor rel_emb = contiguous_or_undefined(rel_in);
  const torch::Tensor o = o_in.contiguous(), d_o = d_o_in.contiguous(), lse = lse_in.contiguous();
  torch::Tensor dq = torch::empty_like(q), dk = torch::empty_like(k), dv = torch::empty_like(v);
  GsaParams p = make_params(q, k, v, rel_emb, *graph);
  set_array(p.o, p.o_strides, o);
  p.lse = const_cast<void*>(lse.data_ptr());
  set_array(p.d_o, p.d_o_strides, d_o);
  set_array(p.dq, p.dq_strides, dq);
  set_array(p.dk, p.dk_strides, dk);
  set_array(p.dv, p.dv_strides, dv);
  std::vector<torch::Tensor> grads = {dq, dk, dv};
  if (rel_emb.defined()) {
    grads.push_back(torch::empty_like(rel_emb));
    p.d_rel_emb = grads.back().data_ptr();
  }
  // Workspaces as bytes on q's device, so LibTorch's allocator (and the CPU memory tracker) sees them.
  const GsaWorkspace need = backend.backward_workspace(p);
  const torch::Tensor delta = torch::empty({std::max<int64_t>(1, need.delta_bytes)}, q.options().dtype(torch::kUInt8));
  p.delta = delta.data_ptr();
  torch::Tensor workspace;
  if (need.workspace_bytes > 0) {
    workspace = torch::empty({need.workspace_bytes}, q.options().dtype(torch::kUInt8));
    p.workspace = workspace.data_ptr();
    p.workspace_bytes = need.workspace_bytes;
  }
  backend.backward(p, stream);
  return grads;
}

}  // namespace op

torch::Tensor graph_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                              const torch::Tensor& rel_emb, const TorchGraph& graph) {
  return attention_op().call(q, k, v, optional_of(rel_emb), graph_ref(graph));
}

std::tuple<torch::Tensor, torch::Tensor> graph_attention_forward(const torch::Tensor& q, const torch::Tensor& k,
                                                                 const torch::Tensor& v, const torch::Tensor& rel_emb,
                                                                 const TorchGraph& graph) {
  at::AutoDispatchBelowADInplaceOrView below_autograd;
  return forward_op().call(q, k, v, optional_of(rel_emb), graph_ref(graph));
}

std::vector<torch::Tensor> graph_attention_backward(const torch::Tensor& d_o, const torch::Tensor& q,
                                                    const torch::Tensor& k, const torch::Tensor& v,
                                                    const torch::Tensor& rel_emb, const torch::Tensor& o,
                                                    const torch::Tensor& lse, const TorchGraph& graph) {
  at::AutoDispatchBelowADInplaceOrView below_autograd;
  std::vector<torch::Tensor> grads = backward_op().call(d_o, q, k, v, optional_of(rel_emb), o, lse, graph_ref(graph));
  if (grads.size() < 4) grads.emplace_back();  // d_rel_emb: undefined without rel_emb
  return grads;
}

std::string graph_attention_backend(torch::Device device, c10::ScalarType dtype) {
  const GsaBackend& backend = backend_for(device);
  GsaParams p;
  p.dtype = gsa_dtype(dtype);
  if (staged_through_float32(backend, p)) return backend.name() + " (" + dtype_name(dtype) + " staged to float32)";
  return backend.name();
}

std::string graph_attention_last_call(torch::Device device) { return backend_for(device).last_call(); }

}  // namespace sb

// One declaration of the op for every device; Python: torch.ops.load_library("libsparsebench_ops.so"), then
//   g = torch.ops.sparsebench.prepare_graph(row_ptr, col, rel, n_relations)   # once per graph and device
//   o = torch.ops.sparsebench.graph_attention(q, k, v, rel_emb or None, g)     # differentiable
TORCH_LIBRARY(sparsebench, m) {
  m.class_<sb::TorchGraph>("Graph")
      .def("n_nodes", [](const sb::op::GraphRef& g) { return g->n_nodes; })
      .def("n_edges", [](const sb::op::GraphRef& g) { return g->n_edges(); })
      .def("n_relations", [](const sb::op::GraphRef& g) { return g->n_relations; });
  m.def("prepare_graph(Tensor row_ptr, Tensor col, Tensor rel, int n_relations=0) -> "
        "__torch__.torch.classes.sparsebench.Graph",
        &sb::prepare_graph_op);
  m.def("graph_attention(Tensor q, Tensor k, Tensor v, Tensor? rel_emb, "
        "__torch__.torch.classes.sparsebench.Graph graph) -> Tensor");
  m.def("graph_attention_forward(Tensor q, Tensor k, Tensor v, Tensor? rel_emb, "
        "__torch__.torch.classes.sparsebench.Graph graph) -> (Tensor, Tensor)");
  m.def("graph_attention_backward(Tensor d_o, Tensor q, Tensor k, Tensor v, Tensor? rel_emb, Tensor o, Tensor lse, "
        "__torch__.torch.classes.sparsebench.Graph graph) -> Tensor[]");
  // Host graph preparations made by this process (a prepared graph is reused: calls add none).
  m.def("graph_preparations() -> int", [] { return sb::GsaHostGraph::preparations(); });
  m.def("dense_attention(Tensor q, Tensor k, Tensor v, bool causal) -> Tensor", &sb::dense_attention);
  m.def("dense_naive_attention(Tensor q, Tensor k, Tensor v, bool causal) -> Tensor", &sb::dense_naive_attention);
  // The kernel backend graph_attention uses on a device ("cpu:AVX3", "cuda:tc", ...), and what the calling thread's
  // last forward there ran where ("" for backends with one way): what records name.
  m.def("attention_backend(str device) -> str",
        [](const std::string& device) { return sb::graph_attention_backend(torch::Device(device)); });
  m.def("attention_last_call(str device) -> str",
        [](const std::string& device) { return sb::graph_attention_last_call(torch::Device(device)); });
}

TORCH_LIBRARY_IMPL(sparsebench, CPU, m) {
  m.impl("graph_attention", &sb::attention_cpu);
  m.impl("graph_attention_forward", &sb::forward_cpu);
  m.impl("graph_attention_backward", &sb::backward_cpu);
}

TORCH_LIBRARY_IMPL(sparsebench, Autograd, m) { m.impl("graph_attention", &sb::graph_attention_autograd); }
