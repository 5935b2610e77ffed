// CPU graph self-attention kernels: rows in parallel (OpenMP), all heads of an edge together, D vectorised.
// Every output element is produced by exactly one loop nest in a fixed order, so results are bitwise
// identical across runs and thread counts (scheduling only decides which thread runs a row block).
// Variants: 1 = generic loops (any D, fp32/fp64, the compiler vectorises over D); 2 = AVX-512 fp32 for
// D in {16, 32, 48, 64, 128} (forward_rows_avx512, backward_*_avx512). Measured with `sparsebench bench
// kernels`, bpt k=16, n=8192, B=1, H=8, D=64, 2 shared cores: forward variant 1 3.3 GFLOP/s (0.32 of
// the same-run GEMM rate), variant 2 11-16 GFLOP/s (0.67-0.80); forward+backward variant 1 0.30,
// variant 2 0.46-0.58 of the GEMM rate.
#include "kernels/gsa_cpu.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include <omp.h>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif

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

#if defined(__AVX512F__)
// Variant 2 (fp32, D a multiple of 16, AVX-512): per head, the 16 edges of a chunk are scored with q in
// registers and their 16 partial-sum vectors reduced by one transpose-add tree (no per-edge horizontal
// sum); a vectorised exp; the head's accumulator stays in registers across the chunk.

// out[j] = sum of the 16 lanes of v[j], j = 0..15 (a fixed tree, so deterministic).
inline __m512 reduce16(const __m512* v) {
  __m512 s2[8];
  for (int i = 0; i < 8; ++i) {  // per 128-bit lane: [a0+a2, b0+b2, a1+a3, b1+b3]
    s2[i] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]), _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]));
  }
  __m512 s4[4];
  for (int i = 0; i < 4; ++i) {  // per 128-bit lane: the lane's partial sums of 4 consecutive vectors
    const __m512d a = _mm512_castps_pd(s2[2 * i]), b = _mm512_castps_pd(s2[2 * i + 1]);
    s4[i] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)), _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
  }
  const __m512 u01 = _mm512_add_ps(_mm512_shuffle_f32x4(s4[0], s4[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                   _mm512_shuffle_f32x4(s4[0], s4[1], _MM_SHUFFLE(3, 1, 3, 1)));
  const __m512 u23 = _mm512_add_ps(_mm512_shuffle_f32x4(s4[2], s4[3], _MM_SHUFFLE(2, 0, 2, 0)),
                                   _mm512_shuffle_f32x4(s4[2], s4[3], _MM_SHUFFLE(3, 1, 3, 1)));
  return _mm512_add_ps(_mm512_shuffle_f32x4(u01, u23, _MM_SHUFFLE(2, 0, 2, 0)),
                       _mm512_shuffle_f32x4(u01, u23, _MM_SHUFFLE(3, 1, 3, 1)));
}

// exp of 16 floats, the same range reduction and Taylor polynomial as exp_inplace.
inline __m512 exp16(__m512 x) {
  const __m512 xc = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.0f)), _mm512_set1_ps(88.0f));
  const __m512 fi = _mm512_roundscale_ps(_mm512_mul_ps(xc, _mm512_set1_ps(1.44269504088896341f)),
                                         _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fmadd_ps(fi, _mm512_set1_ps(-0.693359375f), xc);
  r = _mm512_fmadd_ps(fi, _mm512_set1_ps(2.12194440e-4f), r);
  __m512 poly = _mm512_set1_ps(1.0f / 5040.0f);
  poly = _mm512_fmadd_ps(poly, r, _mm512_set1_ps(1.0f / 720.0f));
  poly = _mm512_fmadd_ps(poly, r, _mm512_set1_ps(1.0f / 120.0f));
  poly = _mm512_fmadd_ps(poly, r, _mm512_set1_ps(1.0f / 24.0f));
  poly = _mm512_fmadd_ps(poly, r, _mm512_set1_ps(1.0f / 6.0f));
  poly = _mm512_fmadd_ps(poly, r, _mm512_set1_ps(0.5f));
  poly = _mm512_fmadd_ps(poly, r, _mm512_set1_ps(1.0f));
  poly = _mm512_fmadd_ps(poly, r, _mm512_set1_ps(1.0f));
  const __m512i bits = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(fi), _mm512_set1_epi32(127)), 23);
  const __m512 y = _mm512_mul_ps(poly, _mm512_castsi512_ps(bits));
  return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.0f), _CMP_GE_OQ), y);
}

// Forward over rows [u0, u1) of batch b, D = 16 * DB. Scratch as forward_rows.
template <int DB, bool REL>
void forward_rows_avx512(const GsaParams& p, const Views<float>& in, int64_t b, int64_t u0, int64_t u1,
                         std::vector<float>& scratch) {
  constexpr int64_t D = 16 * DB;
  const int64_t H = p.H;
  const GsaGraphView& g = p.graph;
  const __m512 scale = _mm512_set1_ps(static_cast<float>(p.scale));
  float* acc = scratch.data();
  float* m = acc + H * D;
  float* l = m + H;
  float* probs = l + H;  // [16]
  float* o = static_cast<float*>(p.o);
  float* lse = static_cast<float*>(p.lse);
  const float* kp[16];
  const float* vp[16];
  const float* rp[16];
  for (int64_t u = u0; u < u1; ++u) {
    const int64_t e0 = g.row_ptr[u], e1 = g.row_ptr[u + 1];
    float* o_u = o + at(p.o_strides, b, u);
    float* lse_u = lse + (b * p.N + u) * H;
    if (e0 == e1) {
      for (int64_t h = 0; h < H; ++h) {
        std::fill(o_u + h * p.o_strides.head, o_u + h * p.o_strides.head + D, 0.0f);
        lse_u[h] = gsa_neg_inf<float>();
      }
      continue;
    }
    const float* q_u = in.q + at(p.q_strides, b, u);
    std::fill(acc, acc + H * D, 0.0f);
    for (int64_t h = 0; h < H; ++h) {
      m[h] = gsa_neg_inf<float>();
      l[h] = 0.0f;
    }
    for (int64_t c = e0; c < e1; c += 16) {
      const int nc = static_cast<int>(std::min<int64_t>(16, e1 - c));
      const __mmask16 valid = static_cast<__mmask16>(nc == 16 ? 0xFFFF : (1u << nc) - 1);
      for (int j = 0; j < 16; ++j) {
        const int64_t e = c + (j < nc ? j : 0);  // padding lanes reuse the first edge, then are masked
        kp[j] = in.k + at(p.k_strides, b, g.col[e]);
        vp[j] = in.v + at(p.v_strides, b, g.col[e]);
        rp[j] = REL ? in.rel_emb + g.rel[e] * p.rel_stride : nullptr;
      }
      for (int64_t h = 0; h < H; ++h) {
        __m512 qv[DB];
        for (int db = 0; db < DB; ++db) qv[db] = _mm512_loadu_ps(q_u + h * p.q_strides.head + 16 * db);
        __m512 part[16];
        for (int j = 0; j < 16; ++j) {
          const float* kh = kp[j] + h * p.k_strides.head;
          __m512 a = _mm512_setzero_ps();
          for (int db = 0; db < DB; ++db) {
            __m512 key = _mm512_loadu_ps(kh + 16 * db);
            if (REL) key = _mm512_add_ps(key, _mm512_loadu_ps(rp[j] + 16 * db));
            a = _mm512_fmadd_ps(qv[db], key, a);
          }
          part[j] = a;
        }
        const __m512 s = _mm512_mask_blend_ps(valid, _mm512_set1_ps(gsa_neg_inf<float>()),
                                              _mm512_mul_ps(reduce16(part), scale));
        const float m_new = std::max(m[h], _mm512_reduce_max_ps(s));
        const float alpha = gsa_rescale(m[h], m_new);
        const __m512 pr = exp16(_mm512_sub_ps(s, _mm512_set1_ps(m_new)));
        l[h] = l[h] * alpha + _mm512_reduce_add_ps(pr);
        m[h] = m_new;
        _mm512_storeu_ps(probs, pr);
        float* acc_h = acc + h * D;
        __m512 av[DB];
        const __m512 alpha_v = _mm512_set1_ps(alpha);
        for (int db = 0; db < DB; ++db) av[db] = _mm512_mul_ps(_mm512_loadu_ps(acc_h + 16 * db), alpha_v);
        for (int j = 0; j < nc; ++j) {
          const __m512 pj = _mm512_set1_ps(probs[j]);
          const float* vh = vp[j] + h * p.v_strides.head;
          for (int db = 0; db < DB; ++db) av[db] = _mm512_fmadd_ps(pj, _mm512_loadu_ps(vh + 16 * db), av[db]);
        }
        for (int db = 0; db < DB; ++db) _mm512_storeu_ps(acc_h + 16 * db, av[db]);
      }
    }
    for (int64_t h = 0; h < H; ++h) {
      const GsaSoftmaxState<float> st{m[h], l[h]};
      const __m512 inv = _mm512_set1_ps(gsa_inv_norm(st));
      for (int db = 0; db < DB; ++db) {
        _mm512_storeu_ps(o_u + h * p.o_strides.head + 16 * db, _mm512_mul_ps(_mm512_loadu_ps(acc + h * D + 16 * db), inv));
      }
      lse_u[h] = gsa_lse(st);
    }
  }
}

using RowsFn = void (*)(const GsaParams&, const Views<float>&, int64_t, int64_t, int64_t, std::vector<float>&);

// The variant-2 row function for p, or nullptr when D is not one it is instantiated for.
RowsFn pick_forward_avx512(const GsaParams& p) {
  const bool rel = p.rel_emb != nullptr;
  switch (p.D) {
    case 16: return rel ? forward_rows_avx512<1, true> : forward_rows_avx512<1, false>;
    case 32: return rel ? forward_rows_avx512<2, true> : forward_rows_avx512<2, false>;
    case 48: return rel ? forward_rows_avx512<3, true> : forward_rows_avx512<3, false>;
    case 64: return rel ? forward_rows_avx512<4, true> : forward_rows_avx512<4, false>;
    case 128: return rel ? forward_rows_avx512<8, true> : forward_rows_avx512<8, false>;
    default: return nullptr;
  }
}
#endif

template <typename T>
void forward_impl(const GsaParams& p) {
  const Views<T> in(p);
  const int64_t n_blocks = (p.N + kRowBlock - 1) / kRowBlock;
  const int64_t work = p.B * n_blocks;
#pragma omp parallel
  {
    std::vector<T> scratch(static_cast<size_t>(p.H * p.D + 2 * p.H + p.H * kEdgeChunk + 16));
#if defined(__AVX512F__)
    RowsFn fast = nullptr;
    if constexpr (std::is_same_v<T, float>) fast = pick_forward_avx512(p);
#endif
#pragma omp for schedule(dynamic, 1)
    for (int64_t w = 0; w < work; ++w) {
      const int64_t b = w / n_blocks;
      const int64_t u0 = (w % n_blocks) * kRowBlock;
      const int64_t u1 = std::min(p.N, u0 + kRowBlock);
#if defined(__AVX512F__)
      if constexpr (std::is_same_v<T, float>) {
        if (fast != nullptr) {
          fast(p, in, b, u0, u1, scratch);
          continue;
        }
      }
#endif
      forward_rows<T>(p, in, b, u0, u1, scratch);
    }
  }
}

int64_t rel_chunks(const GsaParams& p) { return std::min<int64_t>(kGsaRelChunks, p.N); }

// s[h] = P(u <- v) for every head h of one edge, recomputed from q_u, k_v (+ r) and the saved lse_u: both
// backward passes need it, by destination and by source.
template <typename T, typename A>
void edge_probs(const GsaParams& p, const T* q_u, const T* k_v, const T* r, const A* lse_u, A* s) {
  const A scale = static_cast<A>(p.scale);
  for (int64_t h = 0; h < p.H; ++h) {
    const T* qh = q_u + h * p.q_strides.head;
    const T* kh = k_v + h * p.k_strides.head;
    s[h] = scale * (r != nullptr ? dot_sum<T, A>(qh, kh, r, p.D) : dot<T, A>(qh, kh, p.D)) - lse_u[h];
  }
  exp_inplace(s, p.H);
}

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
        edge_probs<T, A>(p, q_u, k_v, r, lse_u, s);
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
      edge_probs<T, A>(p, q_u, k_v, r, lse_u, s);
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

#if defined(__AVX512F__)
// Backward variant 2 (fp32, AVX-512, the D values of variant 2): each pass takes 16 partners at a time
// (sources in the dq pass, destinations in the dk/dv pass), scores and dP reduced with reduce16, the
// accumulators of one head in registers across the 16.

// dq pass over rows [u0, u1): as backward_dq_rows. Scratch: dq_acc [H*D], 16 floats.
template <int DB, bool REL>
void backward_dq_rows_avx512(const GsaParams& p, const Views<float>& in, int64_t u0, int64_t u1, float* rel_part,
                             std::vector<float>& scratch) {
  constexpr int64_t D = 16 * DB;
  const int64_t H = p.H;
  const float scale_f = static_cast<float>(p.scale);
  const __m512 scale = _mm512_set1_ps(scale_f);
  const GsaGraphView& g = p.graph;
  const float* o = static_cast<const float*>(p.o);
  const float* d_o = static_cast<const float*>(p.d_o);
  const float* lse = static_cast<const float*>(p.lse);
  float* delta = static_cast<float*>(p.delta);
  float* dq = static_cast<float*>(p.dq);
  float* dq_acc = scratch.data();
  float* ds_buf = dq_acc + H * D;
  const float* kp[16];
  const float* vp[16];
  const float* rp[16];
  __m512 part[16];
  for (int64_t u = u0; u < u1; ++u) {
    const int64_t e0 = g.row_ptr[u], e1 = g.row_ptr[u + 1];
    for (int64_t b = 0; b < p.B; ++b) {
      const float* q_u = in.q + at(p.q_strides, b, u);
      const float* do_u = d_o + at(p.d_o_strides, b, u);
      const float* o_u = o + at(p.o_strides, b, u);
      const float* lse_u = lse + (b * p.N + u) * H;
      float* delta_u = delta + (b * p.N + u) * H;
      for (int64_t h = 0; h < H; ++h) {
        delta_u[h] = dot<float, float>(do_u + h * p.d_o_strides.head, o_u + h * p.o_strides.head, D);
      }
      std::fill(dq_acc, dq_acc + H * D, 0.0f);
      for (int64_t c = e0; c < e1; c += 16) {
        const int nc = static_cast<int>(std::min<int64_t>(16, e1 - c));
        const __mmask16 valid = static_cast<__mmask16>(nc == 16 ? 0xFFFF : (1u << nc) - 1);
        for (int j = 0; j < 16; ++j) {
          const int64_t e = c + (j < nc ? j : 0);
          kp[j] = in.k + at(p.k_strides, b, g.col[e]);
          vp[j] = in.v + at(p.v_strides, b, g.col[e]);
          rp[j] = REL ? in.rel_emb + g.rel[e] * p.rel_stride : nullptr;
        }
        for (int64_t h = 0; h < H; ++h) {
          __m512 qv[DB], dov[DB];
          for (int db = 0; db < DB; ++db) {
            qv[db] = _mm512_loadu_ps(q_u + h * p.q_strides.head + 16 * db);
            dov[db] = _mm512_loadu_ps(do_u + h * p.d_o_strides.head + 16 * db);
          }
          for (int j = 0; j < 16; ++j) {
            const float* kh = kp[j] + h * p.k_strides.head;
            __m512 a = _mm512_setzero_ps();
            for (int db = 0; db < DB; ++db) {
              __m512 key = _mm512_loadu_ps(kh + 16 * db);
              if (REL) key = _mm512_add_ps(key, _mm512_loadu_ps(rp[j] + 16 * db));
              a = _mm512_fmadd_ps(qv[db], key, a);
            }
            part[j] = a;
          }
          const __m512 s = _mm512_mask_blend_ps(valid, _mm512_set1_ps(gsa_neg_inf<float>()),
                                                _mm512_mul_ps(reduce16(part), scale));
          const __m512 pr = exp16(_mm512_sub_ps(s, _mm512_set1_ps(lse_u[h])));
          for (int j = 0; j < 16; ++j) {
            const float* vh = vp[j] + h * p.v_strides.head;
            __m512 a = _mm512_setzero_ps();
            for (int db = 0; db < DB; ++db) a = _mm512_fmadd_ps(dov[db], _mm512_loadu_ps(vh + 16 * db), a);
            part[j] = a;
          }
          const __m512 dp = reduce16(part);
          const __m512 ds = _mm512_mul_ps(pr, _mm512_sub_ps(dp, _mm512_set1_ps(delta_u[h])));
          _mm512_storeu_ps(ds_buf, ds);
          float* acc_h = dq_acc + h * D;
          __m512 av[DB];
          for (int db = 0; db < DB; ++db) av[db] = _mm512_loadu_ps(acc_h + 16 * db);
          for (int j = 0; j < nc; ++j) {
            const __m512 dsj = _mm512_set1_ps(ds_buf[j]);
            const float* kh = kp[j] + h * p.k_strides.head;
            for (int db = 0; db < DB; ++db) {
              __m512 key = _mm512_loadu_ps(kh + 16 * db);
              if (REL) key = _mm512_add_ps(key, _mm512_loadu_ps(rp[j] + 16 * db));
              av[db] = _mm512_fmadd_ps(dsj, key, av[db]);
            }
          }
          for (int db = 0; db < DB; ++db) _mm512_storeu_ps(acc_h + 16 * db, av[db]);
          if (REL) {
            for (int j = 0; j < nc; ++j) {
              float* rpart = rel_part + g.rel[c + j] * D;
              const __m512 w = _mm512_set1_ps(ds_buf[j] * scale_f);
              for (int db = 0; db < DB; ++db) {
                _mm512_storeu_ps(rpart + 16 * db, _mm512_fmadd_ps(w, qv[db], _mm512_loadu_ps(rpart + 16 * db)));
              }
            }
          }
        }
      }
      float* dq_u = dq + at(p.dq_strides, b, u);
      for (int64_t h = 0; h < H; ++h) {
        for (int db = 0; db < DB; ++db) {
          _mm512_storeu_ps(dq_u + h * p.dq_strides.head + 16 * db,
                           _mm512_mul_ps(_mm512_loadu_ps(dq_acc + h * D + 16 * db), scale));
        }
      }
    }
  }
}

// dk/dv pass over sources [v0, v1) of batch b: as backward_dkv_rows. Scratch: 3 x 16 floats.
template <int DB, bool REL>
void backward_dkv_rows_avx512(const GsaParams& p, const Views<float>& in, int64_t b, int64_t v0, int64_t v1,
                              std::vector<float>& scratch) {
  const int64_t H = p.H;
  const __m512 scale = _mm512_set1_ps(static_cast<float>(p.scale));
  const GsaGraphView& g = p.graph;
  const float* d_o = static_cast<const float*>(p.d_o);
  const float* lse = static_cast<const float*>(p.lse);
  const float* delta = static_cast<const float*>(p.delta);
  float* lse_buf = scratch.data();
  float* delta_buf = lse_buf + 16;
  float* coef = delta_buf + 16;
  const float* qp[16];
  const float* dop[16];
  const float* rp[16];
  int64_t row[16];
  __m512 part[16];
  for (int64_t v = v0; v < v1; ++v) {
    const float* k_v = in.k + at(p.k_strides, b, v);
    const float* v_v = in.v + at(p.v_strides, b, v);
    float* dk_v = static_cast<float*>(p.dk) + at(p.dk_strides, b, v);
    float* dv_v = static_cast<float*>(p.dv) + at(p.dv_strides, b, v);
    for (int64_t h = 0; h < H; ++h) {
      std::fill(dk_v + h * p.dk_strides.head, dk_v + h * p.dk_strides.head + 16 * DB, 0.0f);
      std::fill(dv_v + h * p.dv_strides.head, dv_v + h * p.dv_strides.head + 16 * DB, 0.0f);
    }
    const int64_t t0 = g.t_row_ptr[v], t1 = g.t_row_ptr[v + 1];
    for (int64_t c = t0; c < t1; c += 16) {
      const int nc = static_cast<int>(std::min<int64_t>(16, t1 - c));
      const __mmask16 valid = static_cast<__mmask16>(nc == 16 ? 0xFFFF : (1u << nc) - 1);
      for (int j = 0; j < 16; ++j) {
        const int64_t t = c + (j < nc ? j : 0);
        const int64_t u = g.t_col[t];
        qp[j] = in.q + at(p.q_strides, b, u);
        dop[j] = d_o + at(p.d_o_strides, b, u);
        rp[j] = REL ? in.rel_emb + g.rel[g.t_edge[t]] * p.rel_stride : nullptr;
        row[j] = (b * p.N + u) * H;
      }
      for (int64_t h = 0; h < H; ++h) {
        __m512 kv[DB], vv[DB];
        for (int db = 0; db < DB; ++db) {
          kv[db] = _mm512_loadu_ps(k_v + h * p.k_strides.head + 16 * db);
          vv[db] = _mm512_loadu_ps(v_v + h * p.v_strides.head + 16 * db);
        }
        for (int j = 0; j < 16; ++j) {
          lse_buf[j] = lse[row[j] + h];
          delta_buf[j] = delta[row[j] + h];
          const float* qh = qp[j] + h * p.q_strides.head;
          __m512 a = _mm512_setzero_ps();
          for (int db = 0; db < DB; ++db) {
            __m512 key = kv[db];
            if (REL) key = _mm512_add_ps(key, _mm512_loadu_ps(rp[j] + 16 * db));
            a = _mm512_fmadd_ps(_mm512_loadu_ps(qh + 16 * db), key, a);
          }
          part[j] = a;
        }
        const __m512 s = _mm512_mask_blend_ps(valid, _mm512_set1_ps(gsa_neg_inf<float>()),
                                              _mm512_mul_ps(reduce16(part), scale));
        const __m512 pr = exp16(_mm512_sub_ps(s, _mm512_loadu_ps(lse_buf)));
        for (int j = 0; j < 16; ++j) {
          const float* doh = dop[j] + h * p.d_o_strides.head;
          __m512 a = _mm512_setzero_ps();
          for (int db = 0; db < DB; ++db) a = _mm512_fmadd_ps(_mm512_loadu_ps(doh + 16 * db), vv[db], a);
          part[j] = a;
        }
        const __m512 ds = _mm512_mul_ps(pr, _mm512_sub_ps(reduce16(part), _mm512_loadu_ps(delta_buf)));
        _mm512_storeu_ps(coef, ds);
        _mm512_storeu_ps(delta_buf, pr);  // reused: the probabilities
        float* dk_h = dk_v + h * p.dk_strides.head;
        float* dv_h = dv_v + h * p.dv_strides.head;
        __m512 dka[DB], dva[DB];
        for (int db = 0; db < DB; ++db) {
          dka[db] = _mm512_loadu_ps(dk_h + 16 * db);
          dva[db] = _mm512_loadu_ps(dv_h + 16 * db);
        }
        for (int j = 0; j < nc; ++j) {
          const __m512 dsj = _mm512_set1_ps(coef[j]);
          const __m512 pj = _mm512_set1_ps(delta_buf[j]);
          const float* qh = qp[j] + h * p.q_strides.head;
          const float* doh = dop[j] + h * p.d_o_strides.head;
          for (int db = 0; db < DB; ++db) {
            dka[db] = _mm512_fmadd_ps(dsj, _mm512_loadu_ps(qh + 16 * db), dka[db]);
            dva[db] = _mm512_fmadd_ps(pj, _mm512_loadu_ps(doh + 16 * db), dva[db]);
          }
        }
        for (int db = 0; db < DB; ++db) {
          _mm512_storeu_ps(dk_h + 16 * db, dka[db]);
          _mm512_storeu_ps(dv_h + 16 * db, dva[db]);
        }
      }
    }
    for (int64_t h = 0; h < H; ++h) {
      float* dk_h = dk_v + h * p.dk_strides.head;
      for (int db = 0; db < DB; ++db) _mm512_storeu_ps(dk_h + 16 * db, _mm512_mul_ps(_mm512_loadu_ps(dk_h + 16 * db), scale));
    }
  }
}

using DqFn = void (*)(const GsaParams&, const Views<float>&, int64_t, int64_t, float*, std::vector<float>&);
using DkvFn = void (*)(const GsaParams&, const Views<float>&, int64_t, int64_t, int64_t, std::vector<float>&);

template <int DB>
std::pair<DqFn, DkvFn> backward_fns(bool rel) {
  if (rel) return {backward_dq_rows_avx512<DB, true>, backward_dkv_rows_avx512<DB, true>};
  return {backward_dq_rows_avx512<DB, false>, backward_dkv_rows_avx512<DB, false>};
}

// The variant-2 backward functions for p, or nullptrs when D is not one they are instantiated for.
std::pair<DqFn, DkvFn> pick_backward_avx512(const GsaParams& p) {
  const bool rel = p.rel_emb != nullptr;
  switch (p.D) {
    case 16: return backward_fns<1>(rel);
    case 32: return backward_fns<2>(rel);
    case 48: return backward_fns<3>(rel);
    case 64: return backward_fns<4>(rel);
    case 128: return backward_fns<8>(rel);
    default: return {nullptr, nullptr};
  }
}
#endif

template <typename T>
void backward_impl(const GsaParams& p) {
  const Views<T> in(p);
  const bool has_rel = in.rel_emb != nullptr;
  const int64_t H = p.H, D = p.D;
  // Pass 1: with rel_emb, rows go in kGsaRelChunks fixed chunks (one partial each); without, small blocks.
  const int64_t n_chunks = has_rel ? rel_chunks(p) : (p.N + kRowBlock - 1) / kRowBlock;
  T* rel_partial = static_cast<T*>(p.workspace);
#if defined(__AVX512F__)
  std::pair<DqFn, DkvFn> fast{nullptr, nullptr};
  if constexpr (std::is_same_v<T, float>) fast = pick_backward_avx512(p);
#endif
#pragma omp parallel
  {
    std::vector<T> scratch(static_cast<size_t>(H * D + H + 16));
#pragma omp for schedule(dynamic, 1)
    for (int64_t c = 0; c < n_chunks; ++c) {
      const int64_t u0 = p.N * c / n_chunks, u1 = p.N * (c + 1) / n_chunks;
      T* part = nullptr;
      if (has_rel) {
        part = rel_partial + c * p.R * D;
        std::fill(part, part + p.R * D, T(0));
      }
#if defined(__AVX512F__)
      if constexpr (std::is_same_v<T, float>) {
        if (fast.first != nullptr) {
          fast.first(p, in, u0, u1, part, scratch);
          continue;
        }
      }
#endif
      backward_dq_rows<T>(p, in, u0, u1, part, scratch);
    }
  }
  // Pass 2 (needs every row's delta): dk, dv by source.
  const int64_t n_blocks = (p.N + kRowBlock - 1) / kRowBlock;
  const int64_t work = p.B * n_blocks;
#pragma omp parallel
  {
    std::vector<T> scratch(static_cast<size_t>(2 * H * D + H + 48));
#pragma omp for schedule(dynamic, 1)
    for (int64_t w = 0; w < work; ++w) {
      const int64_t b = w / n_blocks;
      const int64_t v0 = (w % n_blocks) * kRowBlock;
#if defined(__AVX512F__)
      if constexpr (std::is_same_v<T, float>) {
        if (fast.second != nullptr) {
          fast.second(p, in, b, v0, std::min(p.N, v0 + kRowBlock), scratch);
          continue;
        }
      }
#endif
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
