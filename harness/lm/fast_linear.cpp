// fast_linear and fast_gelu: autograd functions over oneDNN's matmul and GELU backward (float32 CPU), else LibTorch.
#include "harness/lm/fast_linear.h"

#include <cstdlib>
#include <map>
#include <mutex>
#include <tuple>
#include <unordered_map>

#include <ATen/record_function.h>
#include <fmt/format.h>

#include "common/error.h"

#ifdef SB_ONEDNN
#include <dnnl.hpp>
#endif

namespace sb {

namespace {

// SB_MATMUL: "onednn" (the default where built) or "torch"; read once.
bool onednn_wanted() {
  static const bool wanted = [] {
    const char* v = std::getenv("SB_MATMUL");
    const std::string s = v == nullptr ? "" : v;
    if (s.empty() || s == "onednn") return true;
    if (s == "torch") return false;
    throw Error(fmt::format("SB_MATMUL={}: expected \"onednn\" or \"torch\"", s));
  }();
  return wanted;
}

#ifdef SB_ONEDNN
using dnnl::memory;

dnnl::engine& engine() {
  static dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  return eng;
}

// A 2-D float32 operand: rows x cols with element strides (row, col).
struct Operand {
  int64_t rows, cols, row_stride, col_stride;
  memory::desc desc() const {
    return memory::desc({rows, cols}, memory::data_type::f32, memory::dims{row_stride, col_stride});
  }
};

// A row-major float32 matrix.
memory::desc plain(int64_t rows, int64_t cols) {
  return memory::desc({rows, cols}, memory::data_type::f32, memory::format_tag::ab);
}

// Primitives made once per key (making one JIT-compiles); cleared when `capacity` are held, so keys that keep
// changing (evaluation batches) do not pile up. A training run uses a handful.
template <typename Key, typename Prim>
class PrimitiveCache {
 public:
  explicit PrimitiveCache(size_t capacity) : capacity_(capacity) {}
  template <typename Make>
  Prim& get(const Key& key, Make&& make) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = cache_.find(key);
    if (it != cache_.end()) return it->second;
    if (cache_.size() >= capacity_) cache_.clear();
    return cache_.emplace(key, make()).first->second;
  }

 private:
  size_t capacity_;
  std::mutex mu_;
  std::map<Key, Prim> cache_;
};

// Matmul primitives by shape, strides and bias.
dnnl::matmul& primitive(const Operand& a, const Operand& b, bool bias) {
  using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, bool>;
  static PrimitiveCache<Key, dnnl::matmul> cache(256);
  return cache.get(Key{a.rows, a.cols, b.cols, a.row_stride, a.col_stride, b.row_stride, b.col_stride, bias}, [&] {
    const memory::desc c_md = plain(a.rows, b.cols), bias_md = plain(1, b.cols);
#if DNNL_VERSION_MAJOR >= 3
    const auto pd = bias ? dnnl::matmul::primitive_desc(engine(), a.desc(), b.desc(), bias_md, c_md)
                         : dnnl::matmul::primitive_desc(engine(), a.desc(), b.desc(), c_md);
#else
    const auto desc = bias ? dnnl::matmul::desc(a.desc(), b.desc(), bias_md, c_md)
                           : dnnl::matmul::desc(a.desc(), b.desc(), c_md);
    const dnnl::matmul::primitive_desc pd(desc, engine());
#endif
    return dnnl::matmul(pd);
  });
}

// c [a.rows, b.cols] (contiguous) = A B (+ bias [b.cols]).
void matmul(const Operand& a, const float* pa, const Operand& b, const float* pb, const float* bias, float* c) {
  dnnl::matmul& prim = primitive(a, b, bias != nullptr);
  dnnl::stream s(engine());
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, memory(a.desc(), engine(), const_cast<float*>(pa))},
                                       {DNNL_ARG_WEIGHTS, memory(b.desc(), engine(), const_cast<float*>(pb))},
                                       {DNNL_ARG_DST, memory(plain(a.rows, b.cols), engine(), c)}};
  if (bias != nullptr) args.emplace(DNNL_ARG_BIAS, memory(plain(1, b.cols), engine(), const_cast<float*>(bias)));
  prim.execute(s, args);
  s.wait();
}

// x2d [M, K] and w [N, K] contiguous float32: x2d w^T (+ b).
torch::Tensor forward_product(const torch::Tensor& x2d, const torch::Tensor& w, const torch::Tensor& b) {
  RECORD_FUNCTION("sparsebench::matmul", std::vector<c10::IValue>());
  const int64_t M = x2d.size(0), K = x2d.size(1), N = w.size(0);
  auto y = torch::empty({M, N}, x2d.options());
  matmul({M, K, K, 1}, x2d.data_ptr<float>(), {K, N, 1, K}, w.data_ptr<float>(),
         b.defined() ? b.data_ptr<float>() : nullptr, y.data_ptr<float>());
  return y;
}

struct OneDnnLinear : public torch::autograd::Function<OneDnnLinear> {
  // Without a bias (autograd refuses undefined inputs) and with one.
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x2d,
                               const torch::Tensor& w) {
    ctx->save_for_backward({x2d, w});
    ctx->saved_data["bias"] = false;
    return forward_product(x2d, w, torch::Tensor());
  }
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x2d, const torch::Tensor& w,
                               const torch::Tensor& b) {
    ctx->save_for_backward({x2d, w});
    ctx->saved_data["bias"] = true;
    return forward_product(x2d, w, b);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    RECORD_FUNCTION("sparsebench::matmul", std::vector<c10::IValue>());
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor& x2d = saved[0];
    const torch::Tensor& w = saved[1];
    const torch::Tensor g = grads[0].contiguous();
    const int64_t M = x2d.size(0), K = x2d.size(1), N = w.size(0);
    torch::Tensor dx, dw, db;
    if (ctx->needs_input_grad(0)) {  // dY [M, N] W [N, K]
      dx = torch::empty({M, K}, x2d.options());
      matmul({M, N, N, 1}, g.data_ptr<float>(), {N, K, K, 1}, w.data_ptr<float>(), nullptr, dx.data_ptr<float>());
    }
    if (ctx->needs_input_grad(1)) {  // dY^T [N, M] X [M, K]
      dw = torch::empty({N, K}, w.options());
      matmul({N, M, 1, N}, g.data_ptr<float>(), {M, K, K, 1}, x2d.data_ptr<float>(), nullptr, dw.data_ptr<float>());
    }
    if (!ctx->saved_data["bias"].toBool()) return {dx, dw};
    if (ctx->needs_input_grad(2)) db = g.sum(0);
    return {dx, dw, db};
  }
};

// diff_src = GELU'(x) * dy over n elements, by oneDNN's gelu_erf backward; primitives by n.
void gelu_backward(const float* x, const float* dy, float* dx, int64_t n) {
  static PrimitiveCache<int64_t, dnnl::eltwise_backward> cache(64);
  const memory::desc md({n}, memory::data_type::f32, memory::format_tag::a);
  dnnl::eltwise_backward& prim = cache.get(n, [&] {
    const auto alg = dnnl::algorithm::eltwise_gelu_erf;
#if DNNL_VERSION_MAJOR >= 3
    const dnnl::eltwise_forward::primitive_desc hint(engine(), dnnl::prop_kind::forward_training, alg, md, md);
    return dnnl::eltwise_backward(dnnl::eltwise_backward::primitive_desc(engine(), alg, md, md, md, 0.f, 0.f, hint));
#else
    const dnnl::eltwise_forward::primitive_desc hint(
        dnnl::eltwise_forward::desc(dnnl::prop_kind::forward_training, alg, md, 0.f, 0.f), engine());
    return dnnl::eltwise_backward(
        dnnl::eltwise_backward::primitive_desc(dnnl::eltwise_backward::desc(alg, md, md, 0.f, 0.f), engine(), hint));
#endif
  });
  dnnl::stream s(engine());
  prim.execute(s, {{DNNL_ARG_SRC, memory(md, engine(), const_cast<float*>(x))},
                   {DNNL_ARG_DIFF_DST, memory(md, engine(), const_cast<float*>(dy))},
                   {DNNL_ARG_DIFF_SRC, memory(md, engine(), dx)}});
  s.wait();
}

struct OneDnnGelu : public torch::autograd::Function<OneDnnGelu> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x) {
    ctx->save_for_backward({x});
    return torch::gelu(x);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    RECORD_FUNCTION("sparsebench::gelu_backward", std::vector<c10::IValue>());
    const torch::Tensor x = ctx->get_saved_variables()[0];
    const torch::Tensor g = grads[0].contiguous();
    auto dx = torch::empty_like(x);
    gelu_backward(x.data_ptr<float>(), g.data_ptr<float>(), dx.data_ptr<float>(), x.numel());
    return {dx};
  }
};

bool runs_onednn(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b) {
  const auto cpu_f32 = [](const torch::Tensor& t) { return t.device().is_cpu() && t.scalar_type() == torch::kFloat32; };
  return cpu_f32(x) && cpu_f32(w) && (!b.defined() || cpu_f32(b)) && w.dim() == 2 &&
         x.dim() >= 1 && x.size(-1) == w.size(1) && x.numel() > 0 && w.numel() > 0 &&
         (!b.defined() || (b.dim() == 1 && b.size(0) == w.size(0)));
}

const char* isa_name(dnnl::cpu_isa isa) {
  switch (isa) {
    case dnnl::cpu_isa::sse41: return "sse41";
    case dnnl::cpu_isa::avx: return "avx";
    case dnnl::cpu_isa::avx2: return "avx2";
    case dnnl::cpu_isa::avx512_core: return "avx512_core";
    case dnnl::cpu_isa::avx512_core_vnni: return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core_bf16: return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_amx: return "avx512_core_amx";
    default: return "other";
  }
}
#endif

}  // namespace

torch::Tensor fast_linear(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b) {
  const bool wanted = onednn_wanted();  // checks SB_MATMUL in every build
#ifdef SB_ONEDNN
  if (wanted && runs_onednn(x, w, b)) {
    auto sizes = x.sizes().vec();
    sizes.back() = w.size(0);
    const auto x2d = x.reshape({-1, x.size(-1)}).contiguous();
    const auto wc = w.contiguous();
    const auto y = b.defined() ? OneDnnLinear::apply(x2d, wc, b.contiguous()) : OneDnnLinear::apply(x2d, wc);
    return y.view(sizes);
  }
#else
  (void)wanted;
#endif
  return torch::linear(x, w, b);
}

torch::Tensor fast_gelu(const torch::Tensor& x) {
  const bool wanted = onednn_wanted();
#ifdef SB_ONEDNN
  if (wanted && x.device().is_cpu() && x.scalar_type() == torch::kFloat32 && x.numel() > 0) {
    return OneDnnGelu::apply(x.contiguous());
  }
#else
  (void)wanted;
#endif
  return torch::gelu(x);
}

std::string matmul_backend() {
#ifdef SB_ONEDNN
  if (!onednn_wanted()) return "libtorch (SB_MATMUL=torch)";
  const dnnl_version_t* v = dnnl_version();
  return fmt::format("onednn {}.{}.{} ({})", v->major, v->minor, v->patch, isa_name(dnnl::get_effective_cpu_isa()));
#else
  (void)onednn_wanted();
  return "libtorch";
#endif
}

}  // namespace sb
