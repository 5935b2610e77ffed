// LibTorch layer over the graph-attention kernels: input checks, params, device dispatch, autograd, dense baseline.
#include "kernels/torch/graph_attention_op.h"

#include <cmath>

#include <ATen/record_function.h>
#include <fmt/format.h>
#include <limits>
#include <numeric>

#include "kernels/gsa_cpu.h"
#include "kernels/gsa_params.h"
#include "patterns/error.h"
#ifdef SB_WITH_CUDA
#include "kernels/cuda/gsa_cuda.h"
#endif

namespace sb {

namespace {

std::string shape_str(const torch::Tensor& t) {
  std::vector<int64_t> s(t.sizes().begin(), t.sizes().end());
  return fmt::format("({})", fmt::join(s, ", "));
}

// dtype names as Python spells them (float32, bfloat16, int64, ...)
std::string dtype_name(c10::ScalarType s) {
  switch (s) {
    case torch::kFloat32: return "float32";
    case torch::kFloat64: return "float64";
    case torch::kFloat16: return "float16";
    case torch::kBFloat16: return "bfloat16";
    case torch::kInt32: return "int32";
    case torch::kInt64: return "int64";
    case torch::kInt16: return "int16";
    case torch::kInt8: return "int8";
    case torch::kUInt8: return "uint8";
    case torch::kBool: return "bool";
    default: return c10::toString(s);
  }
}

std::string dtype_str(const torch::Tensor& t) { return dtype_name(t.scalar_type()); }

torch::Tensor host_tensor(const void* data, int64_t n, torch::Dtype dtype) {
  return torch::from_blob(const_cast<void*>(data), {n}, dtype).clone();
}

// Relation grouping of the edges (stable counting sort by relation id), on the host.
void group_by_relation(const std::vector<int64_t>& row_ptr, const std::vector<int32_t>& rel, int64_t n_rel,
                       std::vector<int64_t>& rel_ptr, std::vector<int32_t>& rel_edge, std::vector<int32_t>& rel_dst) {
  const int64_t ne = static_cast<int64_t>(rel.size());
  rel_ptr.assign(static_cast<size_t>(n_rel + 1), 0);
  for (int64_t e = 0; e < ne; ++e) rel_ptr[rel[e] + 1]++;
  for (int64_t r = 0; r < n_rel; ++r) rel_ptr[r + 1] += rel_ptr[r];
  std::vector<int64_t> cursor(rel_ptr.begin(), rel_ptr.end() - 1);
  rel_edge.resize(static_cast<size_t>(ne));
  rel_dst.resize(static_cast<size_t>(ne));
  const int64_t nn = static_cast<int64_t>(row_ptr.size()) - 1;
  for (int64_t u = 0; u < nn; ++u) {
    for (int64_t e = row_ptr[u]; e < row_ptr[u + 1]; ++e) {
      const int64_t slot = cursor[rel[e]]++;
      rel_edge[slot] = static_cast<int32_t>(e);
      rel_dst[slot] = static_cast<int32_t>(u);
    }
  }
}

template <typename T>
std::vector<T> to_vector(const torch::Tensor& t) {
  const torch::Tensor c = t.to(torch::kCPU).contiguous();
  return std::vector<T>(c.data_ptr<T>(), c.data_ptr<T>() + c.numel());
}

bool supported_dtype(const torch::Tensor& t) {
  const auto s = t.scalar_type();
  if (s == torch::kFloat32 || s == torch::kFloat64) return true;
  return t.is_cuda() && (s == torch::kFloat16 || s == torch::kBFloat16);
}

GsaDtype gsa_dtype(const torch::Tensor& t) {
  switch (t.scalar_type()) {
    case torch::kFloat64: return GsaDtype::f64;
    case torch::kFloat16: return GsaDtype::f16;
    case torch::kBFloat16: return GsaDtype::bf16;
    default: return GsaDtype::f32;
  }
}

torch::Dtype acc_dtype(const torch::Tensor& t) {
  return t.scalar_type() == torch::kFloat64 ? torch::kFloat64 : torch::kFloat32;
}

// Every check of the op's inputs: shapes, dtypes, devices, and the graph's consistency with them.
void check_inputs(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                  const torch::Tensor& rel_emb, const TorchGraph& graph) {
  if (!q.defined() || !k.defined() || !v.defined()) throw Error("graph_attention: q, k and v must be defined tensors");
  const int64_t nn = graph.n_nodes;
  if (q.dim() != 4 || q.size(1) != nn) {
    throw Error(fmt::format("q must have shape (B, N, H, D) with N = {} graph nodes, got {}", nn, shape_str(q)));
  }
  const std::string want = shape_str(q);
  if (k.sizes() != q.sizes()) throw Error(fmt::format("k must have shape {} like q, got {}", want, shape_str(k)));
  if (v.sizes() != q.sizes()) throw Error(fmt::format("v must have shape {} like q, got {}", want, shape_str(v)));
  if (!supported_dtype(q)) {
    throw Error(fmt::format("q must have dtype float32 or float64{}, got {}",
                            q.is_cuda() ? " (or float16/bfloat16 on CUDA)" : "", dtype_str(q)));
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
  if (!graph.row_ptr.defined() || graph.row_ptr.numel() != nn + 1) {
    throw Error(fmt::format("graph: row_ptr must have n_nodes + 1 = {} entries", nn + 1));
  }
  if (graph.device() != q.device()) {
    throw Error(fmt::format("graph is on {} but q is on {}; build it with TorchGraph::from_graph(g, q.device())",
                            graph.device().str(), q.device().str()));
  }
  if (q.is_cuda()) {
#ifdef SB_WITH_CUDA
    if (q.size(3) > kGsaCudaMaxD) {
      throw Error(fmt::format("graph_attention on CUDA: head dimension D = {} not supported (at most {})", q.size(3),
                              kGsaCudaMaxD));
    }
#else
    throw Error(fmt::format("graph_attention: q is on {} but this build has no CUDA kernels", q.device().str()));
#endif
  } else if (!q.device().is_cpu()) {
    throw Error(fmt::format("graph_attention: q is on {}; only CPU and CUDA are supported", q.device().str()));
  }
}

GsaStrides strides_of(const torch::Tensor& t) { return {t.stride(0), t.stride(1), t.stride(2)}; }

GsaParams make_params(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                      const torch::Tensor& rel_emb, const TorchGraph& graph) {
  GsaParams p;
  p.graph.row_ptr = graph.row_ptr.data_ptr<int64_t>();
  p.graph.col = graph.col.data_ptr<int32_t>();
  p.graph.rel = graph.rel.data_ptr<int32_t>();
  p.graph.t_row_ptr = graph.t_row_ptr.data_ptr<int64_t>();
  p.graph.t_col = graph.t_col.data_ptr<int32_t>();
  p.graph.t_edge = graph.t_edge.data_ptr<int32_t>();
  if (graph.rel_ptr.defined()) {
    p.graph.rel_ptr = graph.rel_ptr.data_ptr<int64_t>();
    p.graph.rel_edge = graph.rel_edge.data_ptr<int32_t>();
    p.graph.rel_dst = graph.rel_dst.data_ptr<int32_t>();
  }
  p.graph.n_nodes = graph.n_nodes;
  p.graph.n_edges = graph.col.numel();
  p.dtype = gsa_dtype(q);
  p.B = q.size(0);
  p.N = q.size(1);
  p.H = q.size(2);
  p.D = q.size(3);
  p.scale = 1.0 / std::sqrt(static_cast<double>(p.D));
  p.q = q.data_ptr();
  p.k = k.data_ptr();
  p.v = v.data_ptr();
  p.q_strides = strides_of(q);
  p.k_strides = strides_of(k);
  p.v_strides = strides_of(v);
  if (rel_emb.defined()) {
    p.R = rel_emb.size(0);
    p.rel_emb = rel_emb.data_ptr();
    p.rel_stride = rel_emb.stride(0);
  }
  return p;
}

torch::Tensor contiguous_or_undefined(const torch::Tensor& t) { return t.defined() ? t.contiguous() : t; }

class GraphAttentionFunction : public torch::autograd::Function<GraphAttentionFunction> {
 public:
  // graph tensors travel as inputs so the autograd graph keeps them alive; they get no gradient.
  // rel_arg: rel_emb, or a 1-d empty tensor standing for "none" (autograd inputs must be defined).
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, const torch::Tensor& rel_arg, const TorchGraph& graph) {
    const torch::Tensor rel_emb = rel_arg.dim() == 1 ? torch::Tensor() : rel_arg;
    auto [o, lse] = graph_attention_forward(q, k, v, rel_emb, graph);
    ctx->save_for_backward({q, k, v, rel_emb, o, lse});
    ctx->saved_data["row_ptr"] = graph.row_ptr;
    ctx->saved_data["col"] = graph.col;
    ctx->saved_data["rel"] = graph.rel;
    ctx->saved_data["t_row_ptr"] = graph.t_row_ptr;
    ctx->saved_data["t_col"] = graph.t_col;
    ctx->saved_data["t_edge"] = graph.t_edge;
    ctx->saved_data["rel_ptr"] = graph.rel_ptr;
    ctx->saved_data["rel_edge"] = graph.rel_edge;
    ctx->saved_data["rel_dst"] = graph.rel_dst;
    ctx->saved_data["n_tokens"] = graph.n_tokens;
    ctx->saved_data["n_relations"] = graph.n_relations;
    ctx->saved_data["causal"] = graph.causal;
    return o;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    TorchGraph g;
    auto tensor_or_undefined = [&](const char* key) {
      const c10::IValue& iv = ctx->saved_data[key];
      return iv.isTensor() ? iv.toTensor() : torch::Tensor();
    };
    g.row_ptr = tensor_or_undefined("row_ptr");
    g.col = tensor_or_undefined("col");
    g.rel = tensor_or_undefined("rel");
    g.t_row_ptr = tensor_or_undefined("t_row_ptr");
    g.t_col = tensor_or_undefined("t_col");
    g.t_edge = tensor_or_undefined("t_edge");
    g.rel_ptr = tensor_or_undefined("rel_ptr");
    g.rel_edge = tensor_or_undefined("rel_edge");
    g.rel_dst = tensor_or_undefined("rel_dst");
    g.n_nodes = g.row_ptr.numel() - 1;
    g.n_tokens = ctx->saved_data["n_tokens"].toInt();
    g.n_relations = ctx->saved_data["n_relations"].toInt();
    g.causal = ctx->saved_data["causal"].toBool();
    torch::Tensor d_o = grad_outputs[0];
    auto grads = graph_attention_backward(d_o, saved[0], saved[1], saved[2], saved[3], saved[4], saved[5], g);
    return {grads[0], grads[1], grads[2], grads[3], torch::Tensor()};
  }
};

}  // namespace

TorchGraph TorchGraph::from_graph(const Graph& g, torch::Device device) {
  TorchGraph t;
  t.n_tokens = g.n_tokens;
  t.n_nodes = g.n_nodes();
  t.n_relations = g.n_relations();
  t.causal = g.causal;
  const int64_t ne = g.n_edges();
  const std::vector<int32_t> rel32(g.rel.begin(), g.rel.end());
  std::vector<int64_t> rel_ptr;
  std::vector<int32_t> rel_edge, rel_dst;
  group_by_relation(g.row_ptr, rel32, t.n_relations, rel_ptr, rel_edge, rel_dst);
  t.row_ptr = host_tensor(g.row_ptr.data(), t.n_nodes + 1, torch::kInt64).to(device);
  t.col = host_tensor(g.col.data(), ne, torch::kInt32).to(device);
  t.rel = host_tensor(rel32.data(), ne, torch::kInt32).to(device);
  t.t_row_ptr = host_tensor(g.t_row_ptr.data(), t.n_nodes + 1, torch::kInt64).to(device);
  t.t_col = host_tensor(g.t_col.data(), ne, torch::kInt32).to(device);
  t.t_edge = host_tensor(g.t_edge.data(), ne, torch::kInt32).to(device);
  t.rel_ptr = host_tensor(rel_ptr.data(), t.n_relations + 1, torch::kInt64).to(device);
  t.rel_edge = host_tensor(rel_edge.data(), ne, torch::kInt32).to(device);
  t.rel_dst = host_tensor(rel_dst.data(), ne, torch::kInt32).to(device);
  return t;
}

TorchGraph TorchGraph::from_tensors(const torch::Tensor& row_ptr, const torch::Tensor& col, const torch::Tensor& rel,
                                    const torch::Tensor& t_row_ptr, const torch::Tensor& t_col,
                                    const torch::Tensor& t_edge, int64_t n_relations) {
  auto check = [](const torch::Tensor& t, const char* name, torch::Dtype dtype, int64_t n) {
    if (!t.defined() || t.dim() != 1 || t.scalar_type() != dtype || (n >= 0 && t.numel() != n)) {
      throw Error(fmt::format("graph: {} must be a 1-d {} tensor{}, got {} {}", name, dtype_name(dtype),
                              n >= 0 ? fmt::format(" of {} entries", n) : std::string(),
                              t.defined() ? dtype_str(t) : "undefined", t.defined() ? shape_str(t) : ""));
    }
  };
  check(row_ptr, "row_ptr", torch::kInt64, -1);
  if (row_ptr.numel() < 1) throw Error("graph: row_ptr must have n_nodes + 1 >= 1 entries");
  const int64_t nn = row_ptr.numel() - 1;
  check(col, "col", torch::kInt32, -1);
  const int64_t ne = col.numel();
  check(rel, "rel", torch::kInt32, ne);
  check(t_row_ptr, "t_row_ptr", torch::kInt64, nn + 1);
  check(t_col, "t_col", torch::kInt32, ne);
  check(t_edge, "t_edge", torch::kInt32, ne);
  for (const torch::Tensor* t : {&col, &rel, &t_row_ptr, &t_col, &t_edge}) {
    if (t->device() != row_ptr.device()) throw Error("graph: all graph tensors must be on one device");
  }
  const std::vector<int64_t> rp = to_vector<int64_t>(row_ptr);
  const std::vector<int32_t> cl = to_vector<int32_t>(col);
  const std::vector<int32_t> rl = to_vector<int32_t>(rel);
  if (rp.front() != 0 || rp.back() != ne) throw Error(fmt::format("graph: row_ptr must run from 0 to E = {}", ne));
  for (int64_t u = 0; u < nn; ++u) {
    if (rp[u + 1] < rp[u]) throw Error(fmt::format("graph: row_ptr decreases at node {}", u));
  }
  int64_t n_rel = std::max<int64_t>(0, n_relations);
  for (int64_t e = 0; e < ne; ++e) {
    if (cl[e] < 0 || cl[e] >= nn) throw Error(fmt::format("graph: col[{}] = {} outside [0, {})", e, cl[e], nn));
    if (rl[e] < 0) throw Error(fmt::format("graph: rel[{}] = {} is negative", e, rl[e]));
    n_rel = std::max<int64_t>(n_rel, rl[e] + 1);
  }
  TorchGraph t;
  t.n_tokens = nn;
  t.n_nodes = nn;
  t.n_relations = n_rel;
  t.row_ptr = row_ptr.contiguous();
  t.col = col.contiguous();
  t.rel = rel.contiguous();
  t.t_row_ptr = t_row_ptr.contiguous();
  t.t_col = t_col.contiguous();
  t.t_edge = t_edge.contiguous();
  if (row_ptr.is_cuda()) {  // only the CUDA backward reads the relation grouping
    std::vector<int64_t> rel_ptr;
    std::vector<int32_t> rel_edge, rel_dst;
    group_by_relation(rp, rl, n_rel, rel_ptr, rel_edge, rel_dst);
    t.rel_ptr = host_tensor(rel_ptr.data(), n_rel + 1, torch::kInt64).to(row_ptr.device());
    t.rel_edge = host_tensor(rel_edge.data(), ne, torch::kInt32).to(row_ptr.device());
    t.rel_dst = host_tensor(rel_dst.data(), ne, torch::kInt32).to(row_ptr.device());
  }
  return t;
}

std::tuple<torch::Tensor, torch::Tensor> graph_attention_forward(const torch::Tensor& q_in, const torch::Tensor& k_in,
                                                                 const torch::Tensor& v_in,
                                                                 const torch::Tensor& rel_in,
                                                                 const TorchGraph& graph) {
  RECORD_FUNCTION("sparsebench::graph_attention_forward", std::vector<c10::IValue>());
  check_inputs(q_in, k_in, v_in, rel_in, graph);
  const torch::Tensor q = q_in.contiguous(), k = k_in.contiguous(), v = v_in.contiguous();
  const torch::Tensor rel_emb = contiguous_or_undefined(rel_in);
  torch::Tensor o = torch::empty_like(q);
  torch::Tensor lse = torch::empty({q.size(0), q.size(1), q.size(2)}, q.options().dtype(acc_dtype(q)));
  GsaParams p = make_params(q, k, v, rel_emb, graph);
  p.o = o.data_ptr();
  p.o_strides = strides_of(o);
  p.lse = lse.data_ptr();
  if (q.is_cuda()) {
#ifdef SB_WITH_CUDA
    gsa_forward_cuda(p, nullptr);
#endif
  } else {
    gsa_forward_cpu(p);
  }
  return {o, lse};
}

std::vector<torch::Tensor> graph_attention_backward(const torch::Tensor& d_o_in, const torch::Tensor& q_in,
                                                    const torch::Tensor& k_in, const torch::Tensor& v_in,
                                                    const torch::Tensor& rel_in, const torch::Tensor& o_in,
                                                    const torch::Tensor& lse_in, const TorchGraph& graph) {
  RECORD_FUNCTION("sparsebench::graph_attention_backward", std::vector<c10::IValue>());
  check_inputs(q_in, k_in, v_in, rel_in, graph);
  if (!d_o_in.defined() || d_o_in.sizes() != q_in.sizes() || d_o_in.scalar_type() != q_in.scalar_type()) {
    throw Error(fmt::format("d_o must have shape {} and dtype {} like q", shape_str(q_in), dtype_str(q_in)));
  }
  const torch::Tensor q = q_in.contiguous(), k = k_in.contiguous(), v = v_in.contiguous();
  const torch::Tensor rel_emb = contiguous_or_undefined(rel_in);
  const torch::Tensor o = o_in.contiguous(), d_o = d_o_in.contiguous(), lse = lse_in.contiguous();
  torch::Tensor dq = torch::empty_like(q), dk = torch::empty_like(k), dv = torch::empty_like(v);
  torch::Tensor d_rel = rel_emb.defined() ? torch::empty_like(rel_emb) : torch::Tensor();
  GsaParams p = make_params(q, k, v, rel_emb, graph);
  p.o = const_cast<void*>(o.data_ptr());
  p.o_strides = strides_of(o);
  p.lse = const_cast<void*>(lse.data_ptr());
  p.d_o = d_o.data_ptr();
  p.d_o_strides = strides_of(d_o);
  p.dq = dq.data_ptr();
  p.dk = dk.data_ptr();
  p.dv = dv.data_ptr();
  p.dq_strides = strides_of(dq);
  p.dk_strides = strides_of(dk);
  p.dv_strides = strides_of(dv);
  if (d_rel.defined()) p.d_rel_emb = d_rel.data_ptr();
  torch::Tensor delta, rel_partial, edge_ds;  // workspaces, tracked by the CPU allocator like any tensor
  if (q.is_cuda()) {
#ifdef SB_WITH_CUDA
    delta = torch::empty({gsa_cuda_delta_elems(p)}, q.options().dtype(acc_dtype(q)));
    p.delta = delta.data_ptr();
    if (rel_emb.defined()) {
      edge_ds = torch::empty({std::max<int64_t>(1, gsa_cuda_edge_ds_elems(p))}, q.options().dtype(torch::kFloat32));
      p.edge_ds = edge_ds.data_ptr<float>();
    }
    gsa_backward_cuda(p, nullptr);
#endif
  } else {
    delta = torch::empty({gsa_cpu_delta_elems(p)}, q.options().dtype(acc_dtype(q)));
    p.delta = delta.data_ptr();
    if (rel_emb.defined()) {
      rel_partial = torch::empty({std::max<int64_t>(1, gsa_cpu_rel_partial_elems(p))}, q.options().dtype(acc_dtype(q)));
      p.rel_partial = rel_partial.data_ptr();
    }
    gsa_backward_cpu(p);
  }
  return {dq, dk, dv, d_rel};
}

torch::Tensor graph_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                              const torch::Tensor& rel_emb, const TorchGraph& graph) {
  check_inputs(q, k, v, rel_emb, graph);
  const torch::Tensor rel_arg = rel_emb.defined() ? rel_emb : torch::empty({0}, q.options());
  return GraphAttentionFunction::apply(q, k, v, rel_arg, graph);
}

torch::Tensor dense_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, bool causal) {
  if (q.dim() != 4) throw Error(fmt::format("q must have shape (B, T, H, D), got {}", shape_str(q)));
  if (k.sizes() != q.sizes()) throw Error(fmt::format("k must have shape {} like q, got {}", shape_str(q), shape_str(k)));
  if (v.sizes() != q.sizes()) throw Error(fmt::format("v must have shape {} like q, got {}", shape_str(q), shape_str(v)));
  // [B, T, H, D] -> [B, H, T, D]
  // q is scaled before the product so the [B, H, T, T] scores are materialised once
  const torch::Tensor qt = (q * (1.0 / std::sqrt(static_cast<double>(q.size(3))))).transpose(1, 2);
  const torch::Tensor kt = k.transpose(1, 2), vt = v.transpose(1, 2);
  torch::Tensor scores = torch::matmul(qt, kt.transpose(-2, -1));
  if (causal) {
    const int64_t t = q.size(1);
    const torch::Tensor future = torch::ones({t, t}, q.options().dtype(torch::kBool)).triu(1);
    scores.masked_fill_(future, -std::numeric_limits<double>::infinity());
  }
  return torch::matmul(torch::softmax(scores, -1), vt).transpose(1, 2).contiguous();
}

}  // namespace sb
