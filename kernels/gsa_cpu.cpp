// CPU graph self-attention kernels: rows in parallel (OpenMP), all heads of an edge together, D vectorised.
// Every output element is produced by exactly one loop nest in a fixed order, so results are bitwise
// identical across runs and thread counts (scheduling only decides which thread runs a row block).
#include "kernels/gsa_cpu.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include <omp.h>

#include "kernels/gsa_math.h"
#include "patterns/error.h"

namespace sb {

namespace {

constexpr int kEdgeChunk = 16;  // edges scored together before one online-softmax update
constexpr int64_t kRowBlock = 16;  // destination rows per scheduling unit

// exp(x) for a whole array, in a loop the compiler vectorises: 2^i * exp(r), i = round(x / ln 2),
// |r| <= ln(2) / 2, exp(r) by its Taylor series to degree 7 (relative error < 1e-8 before rounding).
void exp_inplace(float* x, int64_t n) {
#pragma omp simd
  for (int64_t j = 0; j < n; ++j) {
    const float xj = x[j];
    const float xc = std::min(std::max(xj, -87.0f), 88.0f);
    const float t = xc * 1.44269504088896341f;
    const int32_t ii = static_cast<int32_t>(t >= 0.0f ? t + 0.5f : t - 0.5f);
    const float fi = static_cast<float>(ii);
    float r = std::fma(fi, -0.693359375f, xc);
    r = std::fma(fi, 2.12194440e-4f, r);
    float poly = 1.0f / 5040.0f;
    poly = std::fma(poly, r, 1.0f / 720.0f);
    poly = std::fma(poly, r, 1.0f / 120.0f);
    poly = std::fma(poly, r, 1.0f / 24.0f);
    poly = std::fma(poly, r, 1.0f / 6.0f);
    poly = std::fma(poly, r, 0.5f);
    poly = std::fma(poly, r, 1.0f);
    poly = std::fma(poly, r, 1.0f);
    int32_t bits = (ii + 127) << 23;
    float two_i;
    std::memcpy(&two_i, &bits, sizeof(two_i));
    x[j] = xj < -87.0f ? 0.0f : poly * two_i;
  }
}

void exp_inplace(double* x, int64_t n) {
  for (int64_t j = 0; j < n; ++j) x[j] = std::exp(x[j]);
}

// a . b over D
template <typename T, typename A>
inline A dot(const T* a, const T* b, int64_t d_len) {
  A acc = 0;
#pragma omp simd reduction(+ : acc)
  for (int64_t d = 0; d < d_len; ++d) acc += static_cast<A>(a[d]) * static_cast<A>(b[d]);
  return acc;
}

// a . (b + c) over D (the relation row c added to the key)
template <typename T, typename A>
inline A dot_sum(const T* a, const T* b, const T* c, int64_t d_len) {
  A acc = 0;
#pragma omp simd reduction(+ : acc)
  for (int64_t d = 0; d < d_len; ++d) acc += static_cast<A>(a[d]) * (static_cast<A>(b[d]) + static_cast<A>(c[d]));
  return acc;
}

// y += alpha * x over D
template <typename T, typename A>
inline void axpy(A* y, A alpha, const T* x, int64_t d_len) {
#pragma omp simd
  for (int64_t d = 0; d < d_len; ++d) y[d] += alpha * static_cast<A>(x[d]);
}

template <typename T>
struct Views {
  const T* q;
  const T* k;
  const T* v;
  const T* rel_emb;
  explicit Views(const GsaParams& p)
      : q(static_cast<const T*>(p.q)),
        k(static_cast<const T*>(p.k)),
        v(static_cast<const T*>(p.v)),
        rel_emb(static_cast<const T*>(p.rel_emb)) {}
};

inline int64_t at(const GsaStrides& s, int64_t b, int64_t n) { return b * s.batch + n * s.node; }

// Forward over destination rows [u0, u1) of batch b. Scratch: acc [H*D], m/l [H], s [H*kEdgeChunk].
template <typename T>
void forward_rows(const GsaParams& p, const Views<T>& in, int64_t b, int64_t u0, int64_t u1, std::vector<T>& scratch) {
  using A = T;
  const int64_t H = p.H, D = p.D;
  const A scale = static_cast<A>(p.scale);
  const GsaGraphView& g = p.graph;
  const bool has_rel = in.rel_emb != nullptr;
  A* acc = scratch.data();
  A* m = acc + H * D;
  A* l = m + H;
  A* s = l + H;
  T* o = static_cast<T*>(p.o);
  A* lse = static_cast<A*>(p.lse);
  for (int64_t u = u0; u < u1; ++u) {
    const int64_t e0 = g.row_ptr[u], e1 = g.row_ptr[u + 1];
    T* o_u = o + at(p.o_strides, b, u);
    A* lse_u = lse + (b * p.N + u) * H;
    if (e0 == e1) {
      for (int64_t h = 0; h < H; ++h) {
        std::fill(o_u + h * p.o_strides.head, o_u + h * p.o_strides.head + D, T(0));
        lse_u[h] = gsa_neg_inf<A>();
      }
      continue;
    }
    const T* q_u = in.q + at(p.q_strides, b, u);
    std::fill(acc, acc + H * D, A(0));
    for (int64_t h = 0; h < H; ++h) {
      const GsaSoftmaxState<A> st = gsa_softmax_init<A>();
      m[h] = st.m;
      l[h] = st.l;
    }
    for (int64_t c = e0; c < e1; c += kEdgeChunk) {
      const int nc = static_cast<int>(std::min<int64_t>(kEdgeChunk, e1 - c));
      for (int j = 0; j < nc; ++j) {
        const T* k_v = in.k + at(p.k_strides, b, g.col[c + j]);
        const T* r = has_rel ? in.rel_emb + g.rel[c + j] * p.rel_stride : nullptr;
        for (int64_t h = 0; h < H; ++h) {
          const T* qh = q_u + h * p.q_strides.head;
          const T* kh = k_v + h * p.k_strides.head;
          s[h * kEdgeChunk + j] = scale * (has_rel ? dot_sum<T, A>(qh, kh, r, D) : dot<T, A>(qh, kh, D));
        }
      }
      for (int64_t h = 0; h < H; ++h) {
        A* sh = s + h * kEdgeChunk;
        A mx = m[h];
        for (int j = 0; j < nc; ++j) mx = std::max(mx, sh[j]);
        const A alpha = gsa_rescale(m[h], mx);
        m[h] = mx;
        l[h] *= alpha;
        if (alpha != A(1)) {
          A* acc_h = acc + h * D;
#pragma omp simd
          for (int64_t d = 0; d < D; ++d) acc_h[d] *= alpha;
        }
        for (int j = 0; j < nc; ++j) sh[j] -= mx;
        for (int j = nc; j < kEdgeChunk; ++j) sh[j] = gsa_neg_inf<A>();
      }
      exp_inplace(s, H * kEdgeChunk);
      for (int64_t h = 0; h < H; ++h) {
        A sum = 0;
        for (int j = 0; j < nc; ++j) sum += s[h * kEdgeChunk + j];
        l[h] += sum;
      }
      for (int j = 0; j < nc; ++j) {
        const T* v_v = in.v + at(p.v_strides, b, g.col[c + j]);
        for (int64_t h = 0; h < H; ++h) axpy<T, A>(acc + h * D, s[h * kEdgeChunk + j], v_v + h * p.v_strides.head, D);
      }
    }
    for (int64_t h = 0; h < H; ++h) {
      const GsaSoftmaxState<A> st{m[h], l[h]};
      const A inv = gsa_inv_norm(st);
      T* o_h = o_u + h * p.o_strides.head;
      const A* acc_h = acc + h * D;
#pragma omp simd
      for (int64_t d = 0; d < D; ++d) o_h[d] = static_cast<T>(acc_h[d] * inv);
      lse_u[h] = gsa_lse(st);
    }
  }
}

template <typename T>
void forward_impl(const GsaParams& p) {
  const Views<T> in(p);
  const int64_t n_blocks = (p.N + kRowBlock - 1) / kRowBlock;
  const int64_t work = p.B * n_blocks;
#pragma omp parallel
  {
    std::vector<T> scratch(static_cast<size_t>(p.H * p.D + 2 * p.H + p.H * kEdgeChunk));
#pragma omp for schedule(dynamic, 1)
    for (int64_t w = 0; w < work; ++w) {
      const int64_t b = w / n_blocks;
      const int64_t u0 = (w % n_blocks) * kRowBlock;
      forward_rows<T>(p, in, b, u0, std::min(p.N, u0 + kRowBlock), scratch);
    }
  }
}

int64_t rel_chunks(const GsaParams& p) { return std::min<int64_t>(kGsaRelChunks, p.N); }

// Backward pass 1, by destination rows [u0, u1): delta, dq, and this chunk's partial d_rel_emb.
// Scratch: dq_acc [H*D], s/dp [H] each.
template <typename T>
void backward_dq_rows(const GsaParams& p, const Views<T>& in, int64_t u0, int64_t u1, T* rel_part,
                      std::vector<T>& scratch) {
  using A = T;
  const int64_t H = p.H, D = p.D;
  const A scale = static_cast<A>(p.scale);
  const GsaGraphView& g = p.graph;
  const bool has_rel = in.rel_emb != nullptr;
  const T* o = static_cast<const T*>(p.o);
  const T* d_o = static_cast<const T*>(p.d_o);
  const A* lse = static_cast<const A*>(p.lse);
  A* delta = static_cast<A*>(p.delta);
  T* dq = static_cast<T*>(p.dq);
  A* dq_acc = scratch.data();
  A* s = dq_acc + H * D;
  for (int64_t u = u0; u < u1; ++u) {
    const int64_t e0 = g.row_ptr[u], e1 = g.row_ptr[u + 1];
    for (int64_t b = 0; b < p.B; ++b) {
      const T* q_u = in.q + at(p.q_strides, b, u);
      const T* do_u = d_o + at(p.d_o_strides, b, u);
      const T* o_u = o + at(p.o_strides, b, u);
      const A* lse_u = lse + (b * p.N + u) * H;
      A* delta_u = delta + (b * p.N + u) * H;
      for (int64_t h = 0; h < H; ++h) {
        delta_u[h] = dot<T, A>(do_u + h * p.d_o_strides.head, o_u + h * p.o_strides.head, D);
      }
      std::fill(dq_acc, dq_acc + H * D, A(0));
      for (int64_t e = e0; e < e1; ++e) {
        const T* k_v = in.k + at(p.k_strides, b, g.col[e]);
        const T* v_v = in.v + at(p.v_strides, b, g.col[e]);
        const T* r = has_rel ? in.rel_emb + g.rel[e] * p.rel_stride : nullptr;
        for (int64_t h = 0; h < H; ++h) {
          const T* qh = q_u + h * p.q_strides.head;
          const T* kh = k_v + h * p.k_strides.head;
          s[h] = scale * (has_rel ? dot_sum<T, A>(qh, kh, r, D) : dot<T, A>(qh, kh, D)) - lse_u[h];
        }
        exp_inplace(s, H);
        for (int64_t h = 0; h < H; ++h) {
          const A dp = dot<T, A>(do_u + h * p.d_o_strides.head, v_v + h * p.v_strides.head, D);
          const A ds = gsa_dscore(s[h], dp, delta_u[h]);
          A* dq_h = dq_acc + h * D;
          axpy<T, A>(dq_h, ds, k_v + h * p.k_strides.head, D);
          if (has_rel) {
            axpy<T, A>(dq_h, ds, r, D);
            axpy<T, A>(rel_part + g.rel[e] * D, ds * scale, q_u + h * p.q_strides.head, D);
          }
        }
      }
      T* dq_u = dq + at(p.dq_strides, b, u);
      for (int64_t h = 0; h < H; ++h) {
        T* dq_h = dq_u + h * p.dq_strides.head;
        const A* acc_h = dq_acc + h * D;
#pragma omp simd
        for (int64_t d = 0; d < D; ++d) dq_h[d] = static_cast<T>(acc_h[d] * scale);
      }
    }
  }
}

// Backward pass 2, by source rows [v0, v1) through the transposed graph: dk, dv.
// Scratch: dk_acc, dv_acc [H*D], s [H].
template <typename T>
void backward_dkv_rows(const GsaParams& p, const Views<T>& in, int64_t b, int64_t v0, int64_t v1,
                       std::vector<T>& scratch) {
  using A = T;
  const int64_t H = p.H, D = p.D;
  const A scale = static_cast<A>(p.scale);
  const GsaGraphView& g = p.graph;
  const bool has_rel = in.rel_emb != nullptr;
  const T* d_o = static_cast<const T*>(p.d_o);
  const A* lse = static_cast<const A*>(p.lse);
  const A* delta = static_cast<const A*>(p.delta);
  T* dk = static_cast<T*>(p.dk);
  T* dv = static_cast<T*>(p.dv);
  A* dk_acc = scratch.data();
  A* dv_acc = dk_acc + H * D;
  A* s = dv_acc + H * D;
  for (int64_t v = v0; v < v1; ++v) {
    const T* k_v = in.k + at(p.k_strides, b, v);
    const T* v_v = in.v + at(p.v_strides, b, v);
    std::fill(dk_acc, dk_acc + 2 * H * D, A(0));
    for (int64_t t = g.t_row_ptr[v]; t < g.t_row_ptr[v + 1]; ++t) {
      const int64_t u = g.t_col[t];
      const int64_t e = g.t_edge[t];
      const T* q_u = in.q + at(p.q_strides, b, u);
      const T* do_u = d_o + at(p.d_o_strides, b, u);
      const A* lse_u = lse + (b * p.N + u) * H;
      const A* delta_u = delta + (b * p.N + u) * H;
      const T* r = has_rel ? in.rel_emb + g.rel[e] * p.rel_stride : nullptr;
      for (int64_t h = 0; h < H; ++h) {
        const T* qh = q_u + h * p.q_strides.head;
        const T* kh = k_v + h * p.k_strides.head;
        s[h] = scale * (has_rel ? dot_sum<T, A>(qh, kh, r, D) : dot<T, A>(qh, kh, D)) - lse_u[h];
      }
      exp_inplace(s, H);
      for (int64_t h = 0; h < H; ++h) {
        const T* do_h = do_u + h * p.d_o_strides.head;
        const A dp = dot<T, A>(do_h, v_v + h * p.v_strides.head, D);
        const A ds = gsa_dscore(s[h], dp, delta_u[h]);
        axpy<T, A>(dk_acc + h * D, ds, q_u + h * p.q_strides.head, D);
        axpy<T, A>(dv_acc + h * D, s[h], do_h, D);
      }
    }
    T* dk_v = dk + at(p.dk_strides, b, v);
    T* dv_v = dv + at(p.dv_strides, b, v);
    for (int64_t h = 0; h < H; ++h) {
      T* dk_h = dk_v + h * p.dk_strides.head;
      T* dv_h = dv_v + h * p.dv_strides.head;
      const A* dk_a = dk_acc + h * D;
      const A* dv_a = dv_acc + h * D;
#pragma omp simd
      for (int64_t d = 0; d < D; ++d) {
        dk_h[d] = static_cast<T>(dk_a[d] * scale);
        dv_h[d] = static_cast<T>(dv_a[d]);
      }
    }
  }
}

template <typename T>
void backward_impl(const GsaParams& p) {
  const Views<T> in(p);
  const bool has_rel = in.rel_emb != nullptr;
  const int64_t H = p.H, D = p.D;
  // Pass 1: with rel_emb, rows go in kGsaRelChunks fixed chunks (one partial each); without, small blocks.
  const int64_t n_chunks = has_rel ? rel_chunks(p) : (p.N + kRowBlock - 1) / kRowBlock;
  T* rel_partial = static_cast<T*>(p.rel_partial);
#pragma omp parallel
  {
    std::vector<T> scratch(static_cast<size_t>(H * D + H));
#pragma omp for schedule(dynamic, 1)
    for (int64_t c = 0; c < n_chunks; ++c) {
      const int64_t u0 = p.N * c / n_chunks, u1 = p.N * (c + 1) / n_chunks;
      T* part = nullptr;
      if (has_rel) {
        part = rel_partial + c * p.R * D;
        std::fill(part, part + p.R * D, T(0));
      }
      backward_dq_rows<T>(p, in, u0, u1, part, scratch);
    }
  }
  // Pass 2 (needs every row's delta): dk, dv by source.
  const int64_t n_blocks = (p.N + kRowBlock - 1) / kRowBlock;
  const int64_t work = p.B * n_blocks;
#pragma omp parallel
  {
    std::vector<T> scratch(static_cast<size_t>(2 * H * D + H));
#pragma omp for schedule(dynamic, 1)
    for (int64_t w = 0; w < work; ++w) {
      const int64_t b = w / n_blocks;
      const int64_t v0 = (w % n_blocks) * kRowBlock;
      backward_dkv_rows<T>(p, in, b, v0, std::min(p.N, v0 + kRowBlock), scratch);
    }
  }
  // d_rel_emb: chunk partials summed in chunk order.
  if (has_rel) {
    T* d_rel = static_cast<T*>(p.d_rel_emb);
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < p.R; ++r) {
      T* out = d_rel + r * p.rel_stride;
      std::fill(out, out + D, T(0));
      for (int64_t c = 0; c < n_chunks; ++c) {
        const T* part = rel_partial + (c * p.R + r) * D;
#pragma omp simd
        for (int64_t d = 0; d < D; ++d) out[d] += part[d];
      }
    }
  }
}

void check_cpu_dtype(const GsaParams& p, const char* what) {
  if (p.dtype != GsaDtype::f32 && p.dtype != GsaDtype::f64) {
    throw Error(std::string(what) + ": the CPU kernels support float32 and float64 only");
  }
}

}  // namespace

int64_t gsa_cpu_delta_elems(const GsaParams& p) { return p.B * p.N * p.H; }

int64_t gsa_cpu_rel_partial_elems(const GsaParams& p) {
  return p.rel_emb ? rel_chunks(p) * p.R * p.D : 0;
}

void gsa_forward_cpu(const GsaParams& p) {
  check_cpu_dtype(p, "graph_attention forward");
  if (p.N == 0 || p.B == 0 || p.H == 0) return;
  if (p.dtype == GsaDtype::f32) {
    forward_impl<float>(p);
  } else {
    forward_impl<double>(p);
  }
}

void gsa_backward_cpu(const GsaParams& p) {
  check_cpu_dtype(p, "graph_attention backward");
  if (p.N == 0 || p.B == 0 || p.H == 0) return;
  if (p.dtype == GsaDtype::f32) {
    backward_impl<float>(p);
  } else {
    backward_impl<double>(p);
  }
}

}  // namespace sb
