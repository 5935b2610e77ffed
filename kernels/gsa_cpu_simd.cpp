// CPU graph-attention cores written once over Google Highway and compiled for every SIMD target (SSE4, AVX2,
// AVX-512 on x86-64; NEON on ARM; EMU128 everywhere); gsa_cpu.cpp picks one at run time. fp32 and fp64 share
// the code. Rows (destination rows, or sources in the backward by source) go in groups of kGsaCpuRowGroup and
// their edges in segments of a few chunks of N edges (N = lanes of the target). Per (segment, head, row): the
// chunks' N scores are N dot products over D reduced together by a fixed transpose-add tree (no per-edge
// horizontal sum), then one max, one rescale and one vector-exp pass over the segment, then the accumulation
// with the accumulator held in registers over the whole segment. A group whose rows share most of their sources
// (window, bigbird blocks, bpt's tokens; also sources sharing destinations in the backward) runs instead as a
// register tile over the union of its sources, so each key, value or query row loaded serves all its rows
// (forward_tile, dq_tile, dkv_tile); the forward tile of bpt takes relation terms by column
// (TileRelations::pays_by_column). The forward and both backwards first try groups of one or two vectors' lanes
// of rows (16 on AVX2 and AVX-512, 8 on SSE4 and NEON) as wide tiles (forward_wide, dq_wide, dkv_wide): a row (or
// source) per lane, so scores, dP and the outputs (dq, dk, dv) accumulate as GEMM-like register blocks of broadcast
// key, value, query or dO elements against vectors of rows; groups that do not tile that way run as above. Other
// rows with at least twice as many edges as distinct relations take q . r_rel from a table of their relations
// (row_relations) instead of reading a relation row per edge. The backward by destination can store P and dS of
// every edge and head (the edge cache) for the backward by source.
// Every output element is produced by one fixed sequence of operations that depends only on the graph (row groups,
// and whether a group runs as a tile, are fixed by it), so results are bitwise identical across runs and thread
// counts (they differ between targets, whose lane counts differ).
// Left out: SSSE3 (SSE4 covers the same machines) and SVE, whose sizeless vectors cannot be array elements, which
// the cores' register blocks are (ARM builds run NEON; tests/kernels/cross_compile_aarch64.py checks they compile).
#ifndef HWY_DISABLED_TARGETS
#define HWY_DISABLED_TARGETS (HWY_SSSE3 | HWY_SVE | HWY_SVE2 | HWY_SVE_256 | HWY_SVE2_128)
#endif
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/gsa_cpu_simd.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <hwy/cache_control.h>
#include <hwy/highway.h>

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "kernels/gsa_cpu_kernels.h"
#include "kernels/gsa_math.h"
#include "kernels/gsa_split_plan.h"

HWY_BEFORE_NAMESPACE();
namespace sb {
namespace HWY_NAMESPACE {
namespace {

namespace hn = hwy::HWY_NAMESPACE;

// Pointer arrays are sized for the widest vectors of any target.
constexpr int kMaxLanes = HWY_MAX_BYTES / sizeof(float);
constexpr int kMaxHeads = 16;  // heads combined per d_rel_emb row update

inline int64_t at(const GsaStrides& s, int64_t b, int64_t n) { return b * s.batch + n * s.node; }

// exp(x) per lane: 2^i * exp(r), i = round(x / ln 2), |r| <= ln(2) / 2, exp(r) by its Taylor series (degree 7 for
// fp32, 13 for fp64: relative error below 1e-7 and 1e-15 before rounding). Every lane goes through defined
// arithmetic: NaN gives NaN, x above the largest argument with a finite result gives +inf, x below the smallest
// with a normal result gives 0. 2^i is built from the bits of i + bias + 2^mantissa_bits held exactly in a float
// (no float-to-int conversion, no signed shift).
template <class D>
HWY_INLINE hn::Vec<D> vexp(D d, hn::Vec<D> x) {
  using T = hn::TFromD<D>;
  constexpr bool f32 = sizeof(T) == 4;
  const hn::RebindToUnsigned<D> du;
  const T lo = f32 ? T(-87.0) : T(-708.0);
  const T hi = f32 ? T(88.3762626647949) : T(709.436);  // (bias + 0.5) * ln 2 keeps i + bias below the max exponent
  const auto finite_x = hn::IfThenElseZero(hn::Not(hn::IsNaN(x)), x);
  const auto xc = hn::Min(hn::Max(finite_x, hn::Set(d, lo)), hn::Set(d, hi));
  const auto fi = hn::Round(hn::Mul(xc, hn::Set(d, T(1.44269504088896340736))));
  auto r = hn::MulAdd(fi, hn::Set(d, f32 ? T(-0.693359375) : T(-0.693147180369123816490)), xc);
  r = hn::MulAdd(fi, hn::Set(d, f32 ? T(2.12194440e-4) : T(-1.90821492927058770002e-10)), r);
  auto poly = hn::Set(d, T(1.0 / 5040.0));
  if constexpr (!f32) {
    poly = hn::Set(d, T(1.0 / 6227020800.0));
    poly = hn::MulAdd(poly, r, hn::Set(d, T(1.0 / 479001600.0)));
    poly = hn::MulAdd(poly, r, hn::Set(d, T(1.0 / 39916800.0)));
    poly = hn::MulAdd(poly, r, hn::Set(d, T(1.0 / 3628800.0)));
    poly = hn::MulAdd(poly, r, hn::Set(d, T(1.0 / 362880.0)));
    poly = hn::MulAdd(poly, r, hn::Set(d, T(1.0 / 40320.0)));
    poly = hn::MulAdd(poly, r, hn::Set(d, T(1.0 / 5040.0)));
  }
  poly = hn::MulAdd(poly, r, hn::Set(d, T(1.0 / 720.0)));
  poly = hn::MulAdd(poly, r, hn::Set(d, T(1.0 / 120.0)));
  poly = hn::MulAdd(poly, r, hn::Set(d, T(1.0 / 24.0)));
  poly = hn::MulAdd(poly, r, hn::Set(d, T(1.0 / 6.0)));
  poly = hn::MulAdd(poly, r, hn::Set(d, T(0.5)));
  poly = hn::MulAdd(poly, r, hn::Set(d, T(1.0)));
  poly = hn::MulAdd(poly, r, hn::Set(d, T(1.0)));
  // i + bias + 2^m is an exactly representable integer; its low m bits are i + bias, shifted into the exponent.
  constexpr int kMant = f32 ? 23 : 52;
  const T magic = f32 ? T(127.0 + 8388608.0) : T(1023.0 + 4503599627370496.0);
  const auto biased = hn::BitCast(du, hn::Add(fi, hn::Set(d, magic)));
  const auto two_i = hn::BitCast(d, hn::ShiftLeft<kMant>(biased));
  auto y = hn::IfThenElseZero(hn::Ge(x, hn::Set(d, lo)), hn::Mul(poly, two_i));
  y = hn::IfThenElse(hn::Gt(x, hn::Set(d, hi)), hn::Set(d, std::numeric_limits<T>::infinity()), y);
  return hn::IfThenElse(hn::IsNaN(x), x, y);
}

// Lane j of the result = the sum of the lanes of part[j], j < N, by a fixed tree: pairs of lanes inside each
// 128-bit block first (interleaves), then across blocks.
template <class D>
HWY_INLINE hn::Vec<D> reduce_parts(D d, const hn::Vec<D>* part) {
  using T = hn::TFromD<D>;
  using V = hn::Vec<D>;
#if HWY_HAVE_SCALABLE || HWY_TARGET == HWY_SCALAR
  HWY_ALIGN T buf[kMaxLanes * 2];
  const size_t n = hn::Lanes(d);
  for (size_t j = 0; j < n; ++j) buf[j] = hn::GetLane(hn::SumOfLanes(d, part[j]));
  return hn::Load(d, buf);
#else
  constexpr size_t N = hn::MaxLanes(D());
  constexpr size_t L = 16 / sizeof(T);  // lanes per 128-bit block
  if constexpr (N < L) {
    HWY_ALIGN T buf[kMaxLanes * 2];
    for (size_t j = 0; j < N; ++j) buf[j] = hn::GetLane(hn::SumOfLanes(d, part[j]));
    return hn::Load(d, buf);
  } else {
    constexpr size_t G = N / L;  // vectors left after the in-block stage: group g holds edges g*L .. g*L+L-1
    V g[G > 0 ? G : 1];
    for (size_t i = 0; i < G; ++i) {
      const V* p = part + i * L;
      if constexpr (L == 4) {
        const V ab = hn::Add(hn::InterleaveLower(d, p[0], p[1]), hn::InterleaveUpper(d, p[0], p[1]));
        const V ce = hn::Add(hn::InterleaveLower(d, p[2], p[3]), hn::InterleaveUpper(d, p[2], p[3]));
        const hn::Repartition<uint64_t, D> d64;
        const auto ab64 = hn::BitCast(d64, ab), ce64 = hn::BitCast(d64, ce);
        g[i] = hn::Add(hn::BitCast(d, hn::InterleaveLower(d64, ab64, ce64)),
                       hn::BitCast(d, hn::InterleaveUpper(d64, ab64, ce64)));
      } else {
        g[i] = hn::Add(hn::InterleaveLower(d, p[0], p[1]), hn::InterleaveUpper(d, p[0], p[1]));
      }
    }
    if constexpr (G == 1) {
      return g[0];
    } else if constexpr (G == 2) {
      return hn::Add(hn::ConcatLowerLower(d, g[1], g[0]), hn::ConcatUpperUpper(d, g[1], g[0]));
    } else if constexpr (G == 4) {
      // Halves first (blocks [g0p g0q g2p g2q] and [g1p g1q g3p g3q]), then adjacent blocks.
      const V z02 = hn::Add(hn::ConcatLowerLower(d, g[2], g[0]), hn::ConcatUpperUpper(d, g[2], g[0]));
      const V z13 = hn::Add(hn::ConcatLowerLower(d, g[3], g[1]), hn::ConcatUpperUpper(d, g[3], g[1]));
      const V even = hn::OddEvenBlocks(hn::SwapAdjacentBlocks(z13), z02);
      const V odd = hn::OddEvenBlocks(z13, hn::SwapAdjacentBlocks(z02));
      return hn::Add(even, odd);
    } else {
      HWY_ALIGN T buf[kMaxLanes * 2];
      for (size_t j = 0; j < N; ++j) buf[j] = hn::GetLane(hn::SumOfLanes(d, part[j]));
      return hn::Load(d, buf);
    }
  }
#endif
}

// Which operand of group_dot is the same for every edge (kept in registers per block of D); kFixedNone: neither
// (each lane its own row's query: packed short rows).
enum Fixed { kFixedA, kFixedB, kFixedNone };

// Dot products of N edges: result lane j = sum_d a_j[d] * (b_j[d] + c_j[d]) (c only when REL), where a_j =
// a[j] + a_off, b_j = b[j] + b_off, c_j = c[j]; one of a, b is the same for every j (FIX), or neither. Lanes
// j >= nc are computed on valid pointers and left to the caller to mask.
template <Fixed FIX, bool REL, class D, typename T = hn::TFromD<D>>
HWY_INLINE hn::Vec<D> group_dot(D d, const T* const* a, int64_t a_off, const T* const* b, int64_t b_off,
                                const T* const* c, int64_t len) {
  using V = hn::Vec<D>;
  constexpr size_t kN = hn::MaxLanes(D());
#if HWY_HAVE_SCALABLE
  const size_t N = hn::Lanes(d);
#else
  constexpr size_t N = kN;  // a compile-time count lets the compiler keep every part[j] in a register
#endif
  V part[kN];
  for (size_t j = 0; j < N; ++j) part[j] = hn::Zero(d);
  int64_t i = 0;
  const int64_t n = static_cast<int64_t>(N);
  // The operand of lane j that is not fixed (b_j; a_j for kFixedB); with kFixedNone a_j is read beside it.
  const auto varying = [&](size_t j) { return FIX == kFixedB ? a[j] + a_off : b[j] + b_off; };
  for (; i + 4 * n <= len; i += 4 * n) {
    V f[4];
    if constexpr (FIX != kFixedNone) {
      const T* fp = (FIX == kFixedA ? a[0] + a_off : b[0] + b_off) + i;
      for (int k = 0; k < 4; ++k) f[k] = hn::LoadU(d, fp + k * n);
    }
#pragma GCC unroll 16
    for (size_t j = 0; j < N; ++j) {
      const T* vp = varying(j) + i;
      for (int k = 0; k < 4; ++k) {
        const V x = hn::LoadU(d, vp + k * n);
        const V fk = FIX == kFixedNone ? hn::LoadU(d, a[j] + a_off + i + k * n) : f[k];
        if constexpr (REL) {
          const V cv = hn::LoadU(d, c[j] + i + k * n);
          if constexpr (FIX != kFixedB) part[j] = hn::MulAdd(fk, hn::Add(x, cv), part[j]);  // a_j . (b_j + c_j)
          else part[j] = hn::MulAdd(x, hn::Add(fk, cv), part[j]);                           // a_j . (b + c_j)
        } else {
          part[j] = hn::MulAdd(fk, x, part[j]);
        }
      }
    }
  }
  for (; i + n <= len; i += n) {
    V f = hn::Zero(d);
    if constexpr (FIX != kFixedNone) f = hn::LoadU(d, (FIX == kFixedA ? a[0] + a_off : b[0] + b_off) + i);
#pragma GCC unroll 16
    for (size_t j = 0; j < N; ++j) {
      const V x = hn::LoadU(d, varying(j) + i);
      const V fj = FIX == kFixedNone ? hn::LoadU(d, a[j] + a_off + i) : f;
      if constexpr (REL) {
        const V cv = hn::LoadU(d, c[j] + i);
        if constexpr (FIX != kFixedB) part[j] = hn::MulAdd(fj, hn::Add(x, cv), part[j]);
        else part[j] = hn::MulAdd(x, hn::Add(fj, cv), part[j]);
      } else {
        part[j] = hn::MulAdd(fj, x, part[j]);
      }
    }
  }
  V s = reduce_parts(d, part);
  if (i < len) {  // D not a multiple of N: the last elements one by one
    HWY_ALIGN T tail[kMaxLanes * 2];
    for (size_t j = 0; j < N; ++j) {
      const T* aj = a[FIX == kFixedA ? 0 : j] + a_off;  // kFixedNone: each lane's own
      const T* bj = b[FIX == kFixedB ? 0 : j] + b_off;
      T t = 0;
      for (int64_t e = i; e < len; ++e) t += aj[e] * (REL ? bj[e] + c[j][e] : bj[e]);
      tail[j] = t;
    }
    s = hn::Add(s, hn::Load(d, tail));
  }
  return s;
}

// p, computed here: the compiler otherwise keeps x_off + i + k*n for every k in a register and spills them, where
// the loads can take one base and constant displacements.
template <typename T>
HWY_INLINE const T* pinned(const T* p) {
#if defined(__GNUC__)
  asm("" : "+r"(p));
#endif
  return p;
}

// v, held in a register: the compiler otherwise folds the load of an operand used by several FMAs into each of
// them, loading it once per FMA (a chunk of a tile's dots then takes 12 loads for its 8 FMAs instead of 8).
template <class V>
HWY_INLINE V in_register(V v) {
#if defined(__GNUC__) && HWY_ARCH_X86 && HWY_TARGET != HWY_EMU128 && HWY_TARGET != HWY_SCALAR
  asm("" : "+x"(v.raw));
#endif
  return v;
}

// acc[i .. i + K*n) = alpha * acc + sum_{j < nc} w[j] * (x_j + y_j) (y only when REL) over K vectors held in
// registers while the nc edges stream through (K independent FMA chains).
template <int K, bool REL, class D, typename T = hn::TFromD<D>>
HWY_INLINE void axpy_regs(D d, T* acc, hn::Vec<D> va, bool rescale, const T* w, int nc, const T* const* x,
                          int64_t x_off, const T* const* y, int64_t i) {
  using V = hn::Vec<D>;
#if HWY_HAVE_SCALABLE
  const int64_t n = static_cast<int64_t>(hn::Lanes(d));
#else
  constexpr int64_t n = static_cast<int64_t>(hn::MaxLanes(D()));  // constant offsets: no spilled index registers
#endif
  V r[K];
  for (int k = 0; k < K; ++k) {
    r[k] = hn::LoadU(d, acc + i + k * n);
    if (rescale) r[k] = hn::Mul(r[k], va);
  }
  for (int j = 0; j < nc; ++j) {
    const V wj = hn::Set(d, w[j]);
    const T* xp = pinned(x[j] + x_off + i);
    for (int k = 0; k < K; ++k) {
      V xv = hn::LoadU(d, xp + k * n);
      if constexpr (REL) xv = hn::Add(xv, hn::LoadU(d, y[j] + i + k * n));
      r[k] = hn::MulAdd(wj, xv, r[k]);
    }
  }
  for (int k = 0; k < K; ++k) hn::StoreU(r[k], d, acc + i + k * n);
}

// acc[d] = alpha * acc[d] + sum_{j < nc} w[j] * (x_j[d] + y_j[d]) (y only when REL), x_j = x[j] + x_off; the
// accumulator is held in registers in blocks of 8 (then 4, 1) vectors while the nc edges stream through.
template <bool REL, class D, typename T = hn::TFromD<D>>
HWY_INLINE void group_axpy(D d, T* acc, T alpha, const T* w, int nc, const T* const* x, int64_t x_off,
                           const T* const* y, int64_t len) {
  const int64_t n = static_cast<int64_t>(hn::Lanes(d));
  const auto va = hn::Set(d, alpha);
  const bool rescale = alpha != T(1);
  int64_t i = 0;
  for (; i + 8 * n <= len; i += 8 * n) axpy_regs<8, REL>(d, acc, va, rescale, w, nc, x, x_off, y, i);
  for (; i + 4 * n <= len; i += 4 * n) axpy_regs<4, REL>(d, acc, va, rescale, w, nc, x, x_off, y, i);
  for (; i + n <= len; i += n) axpy_regs<1, REL>(d, acc, va, rescale, w, nc, x, x_off, y, i);
  for (; i < len; ++i) {
    T r = rescale ? acc[i] * alpha : acc[i];
    for (int j = 0; j < nc; ++j) r += w[j] * (REL ? x[j][x_off + i] + y[j][i] : x[j][x_off + i]);
    acc[i] = r;
  }
}

// out[d] = scale * in[d] over len elements (converting the accumulator to the output).
template <class D, typename T = hn::TFromD<D>>
HWY_INLINE void scale_copy(D d, T* out, const T* in, T scale, int64_t len) {
  const int64_t n = static_cast<int64_t>(hn::Lanes(d));
  const auto vs = hn::Set(d, scale);
  int64_t i = 0;
  for (; i + n <= len; i += n) hn::StoreU(hn::Mul(hn::LoadU(d, in + i), vs), d, out + i);
  for (; i < len; ++i) out[i] = in[i] * scale;
}

// a . b over len elements (one vector accumulator, then a lane sum; used once per row and head).
template <class D, typename T = hn::TFromD<D>>
HWY_INLINE T dot(D d, const T* a, const T* b, int64_t len) {
  const int64_t n = static_cast<int64_t>(hn::Lanes(d));
  auto acc = hn::Zero(d);
  int64_t i = 0;
  for (; i + n <= len; i += n) acc = hn::MulAdd(hn::LoadU(d, a + i), hn::LoadU(d, b + i), acc);
  T s = hn::GetLane(hn::SumOfLanes(d, acc));
  for (; i < len; ++i) s += a[i] * b[i];
  return s;
}

template <typename T>
struct In {
  const T* q;
  const T* k;
  const T* v;
  const T* rel;
  explicit In(const GsaParams& p)
      : q(static_cast<const T*>(p.q)),
        k(static_cast<const T*>(p.k)),
        v(static_cast<const T*>(p.v)),
        rel(static_cast<const T*>(p.rel_emb)) {}
};

// Edges are taken in segments of up to kSegChunks chunks (of lanes edges): per (row, head, segment) all scores first
// (independent dot products), then one max, one rescale and one vector exp pass, then the accumulation with the
// accumulator in registers over the whole segment, so no per-edge or per-chunk dependency chain (max, rescale,
// accumulator round trip) serialises the work. Rows of a group are walked in step, segment by segment, and every
// head of a segment is finished for each row of the group before the next head: rows of window, bpt and similar
// graphs share most sources at the same positions, so a segment's key and value rows for one head stay in L1
// across the group.
constexpr int kSegChunks = 4;
constexpr int kSegMax = kMaxLanes * kSegChunks;

// Source rows of one segment of a row's edges (chunk-major: chunk i holds lanes i*nl ..; padding lanes of a
// partial chunk repeat the chunk's first edge and are masked by the caller).
template <typename T>
struct EdgeSeg {
  const T* k[kSegMax];
  const T* v[kSegMax];
  const T* r[kSegMax];
  int32_t rel[kSegMax];
  int n = 0;  // edges in the segment
  void gather(const GsaParams& p, const In<T>& in, int64_t b, int64_t e, int count, int nl) {
    const GsaGraphView& g = p.graph;
    n = count;
    const int padded = (count + nl - 1) / nl * nl;
    for (int j = 0; j < padded; ++j) {
      const int64_t ej = e + (j < count ? j : j / nl * nl);
      k[j] = in.k + at(p.k_strides, b, g.col[ej]);
      v[j] = in.v + at(p.v_strides, b, g.col[ej]);
      rel[j] = in.rel != nullptr ? g.rel[ej] : 0;
      r[j] = in.rel != nullptr ? in.rel + rel[j] * p.rel_stride : nullptr;
    }
  }
};

// Scaled scores q_u,h . (k_j,h + r_j) of one chunk (pointers k, r from lane 0), -inf in the lanes outside `valid`;
// with kFixedNone, q_u holds each lane's own row.
template <bool REL, Fixed FIX = kFixedA, class D, class M, typename T = hn::TFromD<D>>
HWY_INLINE hn::Vec<D> chunk_scores(D d, const GsaParams& p, const T* const* q_u, int64_t h, const T* const* k,
                                   const T* const* r, M valid) {
  const auto dots = group_dot<FIX, REL>(d, q_u, h * p.q_strides.head, k, h * p.k_strides.head, r, p.D);
  return hn::IfThenElse(valid, hn::Mul(dots, hn::Set(d, static_cast<T>(p.scale))), hn::Set(d, gsa_neg_inf<T>()));
}

// Rows of one work group (up to R): destination row (or source) ids and edge ranges.
template <int R>
struct RowGroupT {
  int64_t u[R];
  int64_t e0[R];
  int64_t e1[R];
  int n = 0;
  int64_t longest() const {
    int64_t len = 0;
    for (int i = 0; i < n; ++i) len = std::max(len, e1[i] - e0[i]);
    return len;
  }
};
using RowGroup = RowGroupT<kGsaCpuRowGroup>;

// The pieces [e0[i], e1[i]) of rows u[i] as one group.
inline RowGroup piece_group(int n, const int64_t* u, const int64_t* e0, const int64_t* e1) {
  RowGroup grp;
  grp.n = std::min(n, kGsaCpuRowGroup);
  for (int i = 0; i < grp.n; ++i) grp.u[i] = u[i], grp.e0[i] = e0[i], grp.e1[i] = e1[i];
  return grp;
}

// One row (or source) with edges [e0, e1) as a group.
inline RowGroup single_row(int64_t u, int64_t e0, int64_t e1) {
  RowGroup grp;
  grp.u[0] = u;
  grp.e0[0] = e0;
  grp.e1[0] = e1;
  grp.n = 1;
  return grp;
}

// For each edge offset `off` (a multiple of seg_len) below the group's longest row: gathers the segment at `off`
// of every row i of the group into segs[i] (empty past a row's end), then calls f(off).
template <typename T, typename Seg, typename F>
void for_group_segments(const GsaParams& p, const In<T>& in, int64_t b, const RowGroup& grp, int seg_len, int nl,
                        Seg* segs, F&& f) {
  const int64_t len = grp.longest();
  for (int64_t off = 0; off < len; off += seg_len) {
    for (int i = 0; i < grp.n; ++i) {
      const int count = static_cast<int>(std::clamp<int64_t>(grp.e1[i] - grp.e0[i] - off, 0, seg_len));
      segs[i].gather(p, in, b, grp.e0[i] + off, count, nl);
    }
    f(off);
  }
}

// exp(m_old - m_new) without a library call; 0 when nothing was seen yet (m_old = -inf), as gsa_rescale.
template <class D, typename T = hn::TFromD<D>>
HWY_INLINE T rescale_factor(D d, T m_old, T m_new) {
  return m_old == gsa_neg_inf<T>() ? T(0) : hn::GetLane(vexp(d, hn::Set(d, m_old - m_new)));
}

// A row whose edges outnumber its distinct relations twice or more reuses each relation: its scores take q_h . r_rel
// from a table of the row's (head, relation) pairs, so the score loop reads one key row per edge instead of a key
// and a relation row (window and dense rows; bpt's and segtree's span nodes, whose edges share one relation).
// Returns whether the row [e0, e1) qualifies, with its relations (first use first) in `rels` when it does.
inline bool row_relations(const GsaParams& p, int64_t e0, int64_t e1, std::vector<int32_t>& rels) {
  thread_local std::vector<uint8_t> seen;
  if (static_cast<int64_t>(seen.size()) < p.R) seen.resize(static_cast<size_t>(p.R), 0);
  rels.clear();
  const int64_t most = (e1 - e0) / 2;
  for (int64_t e = e0; e < e1 && static_cast<int64_t>(rels.size()) <= most; ++e) {
    const int32_t r = p.graph.rel[e];
    if (!seen[r]) seen[r] = 1, rels.push_back(r);
  }
  for (int32_t r : rels) seen[r] = 0;
  return p.R > 0 && e1 > e0 && static_cast<int64_t>(rels.size()) <= most;
}

// The rows of a group with a relation table (row_relations): their relations, per thread.
inline std::vector<int32_t>* group_relations() {
  thread_local std::vector<int32_t> rels[kGsaCpuRowGroup];
  return rels;
}

// tab [H, R] = q_u,h . r_rel for every head and each relation in rels (other entries untouched).
template <class D, typename T = hn::TFromD<D>>
void rel_table(D d, const GsaParams& p, const T* q_u, const std::vector<int32_t>& rels, T* tab) {
  const int nl = static_cast<int>(hn::Lanes(d));
  const int n = static_cast<int>(rels.size());
  const T* rel = static_cast<const T*>(p.rel_emb);
  const T* q1[1] = {q_u};
  const T* rp[kMaxLanes * 2];
  HWY_ALIGN T buf[kMaxLanes * 2];
  for (int r0 = 0; r0 < n; r0 += nl) {
    const int nr = std::min(nl, n - r0);
    for (int j = 0; j < nl; ++j) rp[j] = rel + rels[r0 + (j < nr ? j : 0)] * p.rel_stride;
    for (int64_t h = 0; h < p.H; ++h) {
      hn::Store(group_dot<kFixedA, false>(d, q1, h * p.q_strides.head, rp, 0, rp, p.D), d, buf);
      for (int j = 0; j < nr; ++j) tab[h * p.R + rels[r0 + j]] = buf[j];
    }
  }
}

// Scaled scores of one chunk (pointers k, r and relation ids rel from lane 0), -inf outside `valid`: from the
// relation table tab_h [R] of the head when there is one, else from the relation rows.
template <bool REL, class D, class M, typename T = hn::TFromD<D>>
HWY_INLINE hn::Vec<D> chunk_scores_tab(D d, const GsaParams& p, const T* const* q_u, int64_t h, const T* const* k,
                                       const T* const* r, const int32_t* rel, const T* tab_h, M valid) {
  if (!REL || tab_h == nullptr) return chunk_scores<REL>(d, p, q_u, h, k, r, valid);
  HWY_ALIGN T rs[kMaxLanes * 2];
  const size_t nl = hn::Lanes(d);
  for (size_t j = 0; j < nl; ++j) rs[j] = tab_h[rel[j]];
  const auto dots = hn::Add(group_dot<kFixedA, false>(d, q_u, h * p.q_strides.head, k, h * p.k_strides.head, r, p.D),
                            hn::Load(d, rs));
  return hn::IfThenElse(valid, hn::Mul(dots, hn::Set(d, static_cast<T>(p.scale))), hn::Set(d, gsa_neg_inf<T>()));
}

// Asks for the cache lines of rows x[0 .. n) from x_off, len elements each: in the forward, the value rows of a
// head while its scores run and the key rows of the next head (the sources of a row or tile are scattered nodes,
// beyond the hardware prefetchers' streams).
template <typename T>
HWY_INLINE void prefetch_rows(const T* const* x, int n, int64_t x_off, int64_t len) {
  constexpr int64_t kLine = 64 / sizeof(T);
  for (int j = 0; j < n; ++j) {
    for (int64_t e = 0; e < len; e += kLine) hwy::Prefetch(x[j] + x_off + e);
  }
}

// Forward: adds the edges of each row of the group (batch b) to its online-softmax state m [H], l [H],
// acc [H, D] (row i's at m + i*H, l + i*H, acc + i*H*D).
template <bool REL, typename T>
void forward_accumulate(const GsaParams& p, int64_t b, const RowGroup& grp, T* m, T* l, T* acc, T* tab) {
  const hn::ScalableTag<T> d;
  using V = hn::Vec<decltype(d)>;
  const int nl = static_cast<int>(hn::Lanes(d));
  const In<T> in(p);
  const int64_t H = p.H, D = p.D;
  const T* tabs[kGsaCpuRowGroup];
  std::vector<int32_t>* rels = group_relations();
  for (int i = 0; i < grp.n; ++i) {
    tabs[i] = nullptr;
    if (REL && row_relations(p, grp.e0[i], grp.e1[i], rels[i])) {
      rel_table(d, p, in.q + at(p.q_strides, b, grp.u[i]), rels[i], tab + i * H * p.R);
      tabs[i] = tab + i * H * p.R;
    }
  }
  EdgeSeg<T> segs[kGsaCpuRowGroup];
  HWY_ALIGN T probs[kSegMax];
  for_group_segments(p, in, b, grp, nl * kSegChunks, nl, segs, [&](int64_t) {
    for (int64_t h = 0; h < H; ++h) {
      for (int i = 0; i < grp.n; ++i) {
        const EdgeSeg<T>& sg = segs[i];
        if (sg.n == 0) continue;
        const T* q_u[1] = {in.q + at(p.q_strides, b, grp.u[i])};
        const T* tab_h = tabs[i] != nullptr ? tabs[i] + h * p.R : nullptr;
        V mx = hn::Set(d, gsa_neg_inf<T>());
        for (int c = 0; c < sg.n; c += nl) {
          const int nc = std::min(nl, sg.n - c);
          const auto valid = hn::FirstN(d, static_cast<size_t>(nc));
          const V s = chunk_scores_tab<REL>(d, p, q_u, h, sg.k + c, sg.r + c, sg.rel + c, tab_h, valid);
          prefetch_rows(sg.v + c, nc, h * p.v_strides.head, D);
          if (h + 1 < H) prefetch_rows(sg.k + c, nc, (h + 1) * p.k_strides.head, D);
          hn::Store(s, d, probs + c);
          mx = hn::Max(mx, s);
        }
        T& mh = m[i * H + h];
        T& lh = l[i * H + h];
        const T m_new = std::max(mh, hn::GetLane(hn::MaxOfLanes(d, mx)));
        const T alpha = rescale_factor(d, mh, m_new);
        const V vm = hn::Set(d, m_new);
        V sum = hn::Zero(d);
        for (int c = 0; c < sg.n; c += nl) {
          const V pr = vexp(d, hn::Sub(hn::Load(d, probs + c), vm));
          hn::Store(pr, d, probs + c);
          sum = hn::Add(sum, pr);
        }
        lh = lh * alpha + hn::GetLane(hn::SumOfLanes(d, sum));
        mh = m_new;
        group_axpy<false>(d, acc + (i * H + h) * D, alpha, probs, sg.n, sg.v, h * p.v_strides.head, sg.r, D);
      }
    }
  });
}

// Forward of rows that share most of their sources (window rows, bigbird blocks), as a register tile: the
// group's rows (up to kTileRows; missing rows are empty) walk the sorted union of their sources in segments, and
// each key, value or relation row loaded serves every row of the group, where the per-row path loads it once per
// row. Dots of J = N/kTileRows rows x kTileRows query rows fill the N parts of one reduce_parts (lane
// j*kTileRows + i), so a chunk takes kTileRows*J FMAs for J + kTileRows loads per vector of D. Relation terms
// q_i . r_rel come from a table over the relations the group's edges use, built the same way. Union positions a
// row lacks score -inf and weigh 0 (a non-finite value row of such a source would still reach the row as 0 * inf).
constexpr int kTileRows = 4;
static_assert(kTileRows == kGsaCpuRowGroup, "the tile covers one row group");

// The tile pays while the union of the group's sources is at most kTileWaste times the mean row length.
constexpr double kTileWaste = kGsaTileWaste;
// Rows shorter than this on average do not pay for the merge (bpt k=4 causal at n=512 measured slower as tiles).
constexpr int64_t kTileMinRow = 32;
// The backward by source's tile (dkv_tile) reads P and dS from the edge cache and only accumulates, so it pays for
// shorter rows: bpt k=4's tokens, 23 destinations each on average.
constexpr int64_t kDkvTileMinRow = 8;

// The union of the row group whose merge tile_union finished last on this thread (one store per R): the tiles
// that then run the group, and the relation planning before them, replay it instead of merging again (the merge
// of R sorted rows took 6-9% of a bpt forward when it ran three times per group).
template <int R>
struct UnionStore {
  bool valid = false;
  const int32_t* col = nullptr;
  int n_rows = 0;
  int64_t e0[R], e1[R];
  std::vector<int64_t> node, at;  // every column of the union, and its entries at[j*R + i]
  static UnionStore& mine() {
    thread_local UnionStore s;
    return s;
  }
  // Whether the store holds the union of grp's rows over col (the merge depends on nothing else).
  bool holds(const RowGroupT<R>& grp, const int32_t* c) const {
    if (!valid || c != col || grp.n != n_rows) return false;
    for (int i = 0; i < grp.n; ++i) if (grp.e0[i] != e0[i] || grp.e1[i] != e1[i]) return false;
    return true;
  }
  void begin() {
    valid = false;
    node.clear();
    at.clear();
  }
  void finish(const RowGroupT<R>& grp, const int32_t* c) {
    valid = true, col = c, n_rows = grp.n;
    for (int i = 0; i < grp.n; ++i) e0[i] = grp.e0[i], e1[i] = grp.e1[i];
  }
};

// Walks the sorted union of a row group's columns (sources, or destinations in the backward by source) segment by
// segment: node[j] is the segment's j-th column, at[j*R + i] the position in col of row i's entry for it
// (-1: none). Columns from `padded` up to a multiple of `pad` repeat the first, with no entries. Replays the
// thread's UnionStore when it holds the group.
template <int S, int R = kTileRows>
struct TileUnion {
  int64_t node[S];
  int64_t at[S * R];
  int n = 0;       // columns in the segment
  int padded = 0;  // n rounded up to the multiple
  TileUnion(const RowGroupT<R>& grp, const int32_t* col) : grp_(grp), col_(col) {
    const UnionStore<R>& st = UnionStore<R>::mine();
    if (st.holds(grp, col)) stored_ = &st;
    for (int i = 0; i < R; ++i) c_[i] = i < grp.n ? grp.e0[i] : 0;
  }
  // The next segment of at most S columns; false at the end.
  bool next(int pad) {
    if (stored_ != nullptr) {
      n = static_cast<int>(std::min<int64_t>(S, static_cast<int64_t>(stored_->node.size()) - pos_));
      std::copy_n(stored_->node.begin() + pos_, n, node);
      std::copy_n(stored_->at.begin() + pos_ * R, n * R, at);
      pos_ += n;
    } else {
      merge();
    }
    padded = (n + pad - 1) / pad * pad;
    for (int j = n; j < padded; ++j) {
      node[j] = node[0];
      for (int i = 0; i < R; ++i) at[j * R + i] = -1;
    }
    return n > 0;
  }

 private:
  void merge() {
    for (n = 0; n < S; ++n) {
      int64_t lo = INT64_MAX;
      for (int i = 0; i < grp_.n; ++i) if (c_[i] < grp_.e1[i]) lo = std::min<int64_t>(lo, col_[c_[i]]);
      if (lo == INT64_MAX) break;
      for (int i = 0; i < R; ++i) {
        const bool has = i < grp_.n && c_[i] < grp_.e1[i] && col_[c_[i]] == lo;
        at[n * R + i] = has ? c_[i]++ : -1;
      }
      node[n] = lo;
    }
  }
  const RowGroupT<R>& grp_;
  const int32_t* col_;
  const UnionStore<R>* stored_ = nullptr;
  int64_t pos_ = 0;
  int64_t c_[R];
};

// The union of rows that each read a run of consecutive columns (window's rows), written straight into st without
// the R-way merge. Returns its size, 0 when it has more than `most` columns, -1 when some row is not one run (then
// the merge decides). Columns between the runs that no row reads are skipped, not walked.
template <int R>
int64_t contiguous_union(const RowGroupT<R>& grp, const int32_t* col, double most, UnionStore<R>& st) {
  int64_t first[R], last[R], lo = INT64_MAX, hi = INT64_MIN;  // row i's run: columns first[i]..last[i]
  for (int i = 0; i < R; ++i) {
    first[i] = INT64_MAX, last[i] = INT64_MIN;  // no row, or an empty one: reads nothing
    if (i >= grp.n || grp.e1[i] == grp.e0[i]) continue;
    first[i] = col[grp.e0[i]], last[i] = col[grp.e1[i] - 1];
    if (last[i] - first[i] != grp.e1[i] - grp.e0[i] - 1) return -1;  // sorted and distinct: a gap in the row
    lo = std::min(lo, first[i]), hi = std::max(hi, last[i]);
  }
  if (lo > hi) return -1;
  int64_t n = 0;
  for (int64_t c = lo; c <= hi; ++c) {
    st.at.resize(static_cast<size_t>((n + 1) * R));
    int64_t* at = st.at.data() + n * R;
    bool any = false;
    int64_t next = INT64_MAX;  // the first run starting after c
    for (int i = 0; i < R; ++i) {
      const bool has = c >= first[i] && c <= last[i];
      at[i] = has ? grp.e0[i] + (c - first[i]) : -1;
      any = any || has;
      if (first[i] > c) next = std::min(next, first[i]);
    }
    if (!any) {  // between the rows' runs: on to the next one (there is one, since c < hi)
      c = next - 1;
      continue;
    }
    st.node.push_back(c);
    if (static_cast<double>(++n) > most) return 0;
  }
  st.at.resize(static_cast<size_t>(n * R));
  return n;
}

// Returns the size of the union when the tile applies, else 0 (col: the sources of the rows, or the destinations of
// sources in the backward by source).
template <class D, int R>
int64_t tile_union(D d, const GsaParams& p, const RowGroupT<R>& grp, const int32_t* col, double waste = kTileWaste,
                   int64_t min_row = kTileMinRow) {
#if HWY_HAVE_SCALABLE || HWY_TARGET == HWY_SCALAR
  (void)d, (void)p, (void)grp, (void)col, (void)waste, (void)min_row;
  return 0;
#else
  (void)d;
  constexpr size_t N = hn::MaxLanes(D());
  if (N < static_cast<size_t>(kTileRows) || grp.n < 2 || p.D % static_cast<int64_t>(N) != 0) return 0;
  int64_t total = 0;
  for (int i = 0; i < grp.n; ++i) total += grp.e1[i] - grp.e0[i];
  if (total < min_row * grp.n) return 0;
  for (int i = 0; i < grp.n; ++i) {
    for (int64_t e = grp.e0[i] + 1; e < grp.e1[i]; ++e) if (col[e] <= col[e - 1]) return 0;  // merge needs order
  }
  const double most = waste * static_cast<double>(total) / grp.n;
  if constexpr (R > kTileRows) {
    // The first and last rows' union bounds the group's from below: a two-way count refuses most groups of a wide
    // tile that would not pay before the R-way merge (window 64's 16 rows on AVX-512, bpt's span sources).
    const int last = grp.n - 1;
    int64_t a = grp.e0[0], z = grp.e0[last], pair = 0;
    while (a < grp.e1[0] && z < grp.e1[last]) {
      ++pair;
      if (col[a] == col[z]) ++a, ++z;
      else if (col[a] < col[z]) ++a;
      else ++z;
    }
    pair += (grp.e1[0] - a) + (grp.e1[last] - z);
    if (static_cast<double>(pair) > most) return 0;
  }
  int64_t unions = 0;
  UnionStore<R>& st = UnionStore<R>::mine();
  st.begin();
  const int64_t runs = contiguous_union(grp, col, most, st);
  if (runs >= 0) {
    if (runs > 0) st.finish(grp, col);
    return runs;
  }
  TileUnion<64, R> un(grp, col);  // merges: the store is invalid
  while (un.next(1)) {
    unions += un.n;
    if (static_cast<double>(unions) > most) return 0;
    st.node.insert(st.node.end(), un.node, un.node + un.n);
    st.at.insert(st.at.end(), un.at, un.at + un.n * R);
  }
  st.finish(grp, col);
  return unions;
#endif
}

#if !(HWY_HAVE_SCALABLE || HWY_TARGET == HWY_SCALAR)
// Lane j*kTileRows + i = q_i . (x_j + y_j) (q_i = q[i] + q_off, x_j = x[j] + x_off, y_j = y[j]; y only when ADD)
// for the J = N/kTileRows rows x.
template <bool ADD = false, class D, typename T = hn::TFromD<D>>
HWY_INLINE hn::Vec<D> tile_dots(D d, const T* const* q, int64_t q_off, const T* const* x, int64_t x_off, int64_t len,
                                const T* const* y = nullptr) {
  using V = hn::Vec<D>;
  constexpr int N = static_cast<int>(hn::MaxLanes(D()));
  constexpr int J = N / kTileRows;
  V part[N];
  for (int t = 0; t < N; ++t) part[t] = hn::Zero(d);
  for (int64_t e = 0; e < len; e += N) {
    V xv[J];
    for (int j = 0; j < J; ++j) {
      xv[j] = hn::LoadU(d, x[j] + x_off + e);
      if constexpr (ADD) xv[j] = hn::Add(xv[j], hn::LoadU(d, y[j] + e));
    }
    for (int i = 0; i < kTileRows; ++i) {
      const V qv = in_register(hn::LoadU(d, q[i] + q_off + e));
      for (int j = 0; j < J; ++j) part[j * kTileRows + i] = hn::MulAdd(qv, xv[j], part[j * kTileRows + i]);
    }
  }
  return reduce_parts(d, part);
}
// The relations a row group's edges use, each given a slot (first use first), while the object lives.
class TileRelations {
 public:
  TileRelations() : slot_of_(thread_maps().first), rels_(thread_maps().second) { rels_.clear(); }
  ~TileRelations() { clear(); }
  TileRelations(const TileRelations&) = delete;
  TileRelations& operator=(const TileRelations&) = delete;
  int count() const { return static_cast<int>(rels_.size()); }

  // Assigns the slots to every relation of the group; whether that table (one dot per relation and row) costs at
  // most half the key dots. bpt's edges each have their own relation, so its table is as large as the rows: the
  // count stops (false, slots partly assigned) as soon as it is too large.
  template <class G>
  bool pays(const GsaParams& p, const G& grp, int64_t unions) {
    grow(p);
    const int64_t most = unions / 2;
    for (int i = 0; i < grp.n; ++i) {
      for (int64_t e = grp.e0[i]; e < grp.e1[i]; ++e) {
        add(p.graph.rel[e]);
        if (count() > most) return false;
      }
    }
    return true;
  }
  int32_t slot(int32_t r) const { return slot_of_[r]; }
  int32_t relation(int s) const { return rels_[s]; }
  // r's slot in W, the backward's sums of dS per slot (head h at w + h * ws, R entries a slot): a new one (after the
  // table's) where r has none yet, its entries zeroed for every head.
  template <typename T>
  int32_t w_slot(int32_t r, T* w, int64_t H, int64_t ws, int R) {
    const int fresh = count();
    add(r);
    const int32_t s = slot_of_[r];
    if (s >= fresh) {
      for (int64_t h = 0; h < H; ++h) std::fill_n(w + h * ws + s * R, R, T(0));
    }
    return s;
  }

  // Column relations instead: a column of the union whose rows all reach it under one relation adds that relation's
  // row to the key row, once for the whole group (tile_dots<true>); only the edges of columns whose rows disagree
  // take q . r from the table. Within bpt's upper levels, and window's clipped distances, the rows of a group agree,
  // so the table covers few relations where `pays` would count all of them.
  template <int R>
  bool pays_by_column(const GsaParams& p, const RowGroupT<R>& grp, int64_t unions) {
    clear();
    grow(p);
    by_column_ = true;
    TileUnion<64, R> un(grp, p.graph.col);
    while (un.next(1)) {
      for (int j = 0; j < un.n; ++j) {
        const int64_t* a = un.at + j * R;
        if (column_relation<R>(p, a) >= 0) continue;
        for (int i = 0; i < R; ++i) if (a[i] >= 0) add(p.graph.rel[a[i]]);
      }
    }
    zero_ = count();
    return count() <= unions;
  }
  // The relation every row of a column (entries a[R], -1: none) reaches it under, -1 if they differ (or none).
  template <int R = kTileRows>
  static int32_t column_relation(const GsaParams& p, const int64_t* a) {
    int32_t c = -1;
    for (int i = 0; i < R; ++i) {
      if (a[i] < 0) continue;
      if (c < 0) c = p.graph.rel[a[i]];
      else if (p.graph.rel[a[i]] != c) return -1;
    }
    return c;
  }
  bool by_column() const { return by_column_; }

  // Slots per head in the table: the relations, and by column one more slot of zeros (edges of agreeing columns),
  // fixed by pays_by_column: relations w_slot adds later (W's, in the backward) take slots past the table's.
  int slots() const { return by_column_ ? zero_ + 1 : count(); }
  int32_t zero_slot() const { return zero_; }

  // tab [H][slot * kTileRows + i] = q_i,h . r_rel for the kTileRows rows q (after a true pays or pays_by_column).
  template <class D, typename T = hn::TFromD<D>>
  void table(D d, const GsaParams& p, const T* const* q, T* tab) {
    constexpr int N = static_cast<int>(hn::MaxLanes(D()));
    constexpr int J = N / kTileRows;
    const T* rel = static_cast<const T*>(p.rel_emb);
    const int nr = count(), ns = slots();
    const T* rp[N];
    HWY_ALIGN T buf[N];
    for (int64_t h = 0; h < p.H; ++h) {
      T* tab_h = tab + h * ns * kTileRows;
      for (int s0 = 0; s0 < nr; s0 += J) {
        for (int j = 0; j < J; ++j) rp[j] = rel + rels_[std::min(s0 + j, nr - 1)] * p.rel_stride;
        hn::Store(tile_dots(d, q, h * p.q_strides.head, rp, 0, p.D), d, buf);
        const int cnt = std::min(J, nr - s0) * kTileRows;
        std::copy(buf, buf + cnt, tab_h + s0 * kTileRows);
      }
      std::fill(tab_h + nr * kTileRows, tab_h + ns * kTileRows, T(0));
    }
  }

 private:
  // Per thread, reused across groups: slot of every relation (-1 between uses) and the used relations.
  static std::pair<std::vector<int32_t>, std::vector<int32_t>>& thread_maps() {
    thread_local std::pair<std::vector<int32_t>, std::vector<int32_t>> m;
    return m;
  }
  void clear() {
    for (int32_t r : rels_) slot_of_[r] = -1;
    rels_.clear();
    by_column_ = false;
    zero_ = 0;
  }
  void grow(const GsaParams& p) {
    if (static_cast<int64_t>(slot_of_.size()) < p.R) slot_of_.resize(static_cast<size_t>(p.R), -1);
  }
  void add(int32_t r) {
    int32_t& s = slot_of_[r];
    if (s < 0) s = count(), rels_.push_back(r);
  }
  std::vector<int32_t>& slot_of_;
  std::vector<int32_t>& rels_;
  bool by_column_ = false;
  int32_t zero_ = 0;
};

// One segment of a row group's union of sources, as both tiles by destination read it: key and value rows of each
// source, the edge mask ok (1 where row i has an edge to source j) and each (j, i)'s index in a head's relation
// table. Written before the head loop: vector loads of freshly stored scalars stall on store forwarding.
// With column relations (rels.by_column()): rp holds each column's relation row (`zero`, a row of zeros, where the
// rows disagree), tix indexes the table for the edges of disagreeing columns (the zero slot elsewhere), and
// mixed[c] says whether chunk c of J columns has such a column.
template <bool REL, typename T, int S>
struct TileSources {
  using TI = hn::TFromD<hn::RebindToSigned<hn::ScalableTag<T>>>;
  const T* kp[S];
  const T* vp[S];
  const T* rp[S];
  HWY_ALIGN T ok[S * kTileRows];
  HWY_ALIGN TI tix[S * kTileRows];
  static constexpr uint8_t kSomeMixed = 1, kAllMixed = 3;
  uint8_t mixed[S];   // by chunk of J columns: 0, kSomeMixed or kAllMixed
  int32_t crel[S];    // by column: the relation its rows agree on, -1 where they disagree
  const T* zero = nullptr;  // D zeros (by column)
  // Makes the D elements at `at` the zero row.
  void set_zero(T* at, int64_t D) {
    std::fill(at, at + D, T(0));
    zero = at;
  }
  void fill(const GsaParams& p, const In<T>& in, int64_t b, const TileUnion<S>& un, const TileRelations& rels) {
    for (int j = 0; j < un.padded; ++j) {
      kp[j] = in.k + at(p.k_strides, b, un.node[j]);
      vp[j] = in.v + at(p.v_strides, b, un.node[j]);
    }
    for (int t = 0; t < un.padded * kTileRows; ++t) ok[t] = un.at[t] >= 0 ? T(1) : T(0);
    if constexpr (REL) {
      if (rels.by_column()) return fill_by_column(p, in, un, rels);
      for (int t = 0; t < un.padded * kTileRows; ++t) {
        const int32_t slot = un.at[t] >= 0 ? rels.slot(p.graph.rel[un.at[t]]) : 0;
        tix[t] = static_cast<TI>(slot * kTileRows + t % kTileRows);
      }
    }
  }

 private:
  void fill_by_column(const GsaParams& p, const In<T>& in, const TileUnion<S>& un, const TileRelations& rels) {
    const int J = std::max<int>(1, static_cast<int>(hn::Lanes(hn::ScalableTag<T>())) / kTileRows);
    int n_mixed[S] = {};
    for (int j = 0; j < un.padded; ++j) {
      const int64_t* a = un.at + j * kTileRows;
      const int32_t c = TileRelations::column_relation(p, a);
      crel[j] = c;
      rp[j] = c >= 0 ? in.rel + c * p.rel_stride : zero;
      for (int i = 0; i < kTileRows; ++i) {
        const int32_t slot = c < 0 && a[i] >= 0 ? rels.slot(p.graph.rel[a[i]]) : rels.zero_slot();
        tix[j * kTileRows + i] = static_cast<TI>(slot * kTileRows + i);
      }
      n_mixed[j / J] += c < 0 ? 1 : 0;  // padding columns (no rows) count as mixed: their zero row is not needed
    }
    for (int c = 0; c * J < un.padded; ++c) {
      mixed[c] = n_mixed[c] == J ? kAllMixed : n_mixed[c] > 0 ? kSomeMixed : 0;
    }
  }
};

// acc_i[e .. e + K*N) = alpha_i * acc_i + sum_{j < ns} w[j*kTileRows + i] * x_j[x_off ..] for the kTileRows rows
// (acc_i = acc + i * row_stride), K vectors of every row in registers while the sources stream through.
template <int K, class D, typename T = hn::TFromD<D>>
HWY_INLINE void tile_axpy(D d, T* acc, int64_t row_stride, const T* alpha, const T* w, int ns, const T* const* x,
                          int64_t x_off, int64_t e) {
  using V = hn::Vec<D>;
  constexpr int N = static_cast<int>(hn::MaxLanes(D()));
  V a[kTileRows][K];
  for (int i = 0; i < kTileRows; ++i) {
    const V va = hn::Set(d, alpha[i]);
    for (int k = 0; k < K; ++k) a[i][k] = hn::Mul(hn::LoadU(d, acc + i * row_stride + e + k * N), va);
  }
  for (int j = 0; j < ns; ++j) {
    V xv[K];
    for (int k = 0; k < K; ++k) xv[k] = hn::LoadU(d, x[j] + x_off + k * N);
    for (int i = 0; i < kTileRows; ++i) {
      const V wv = hn::Set(d, w[j * kTileRows + i]);
      for (int k = 0; k < K; ++k) a[i][k] = hn::MulAdd(wv, xv[k], a[i][k]);
    }
  }
  for (int i = 0; i < kTileRows; ++i) {
    for (int k = 0; k < K; ++k) hn::StoreU(a[i][k], d, acc + i * row_stride + e + k * N);
  }
}
// tile_axpy over the whole of D (x_off: the head's offset in the rows x): blocks of kTileKV vectors, then 2, then 1.
// kTileKV: kTileRows * K accumulators + K rows + a weight fit the registers (16 below AVX-512, 3 measured no faster).
constexpr int kTileKV = HWY_MAX_BYTES >= 64 ? 4 : 2;
template <class D, typename T = hn::TFromD<D>>
HWY_INLINE void tile_axpy_rows(D d, T* acc, int64_t row_stride, const T* alpha, const T* w, int ns, const T* const* x,
                               int64_t x_off, int64_t len) {
  constexpr int N = static_cast<int>(hn::MaxLanes(D()));
  int64_t e = 0;
  for (; e + kTileKV * N <= len; e += kTileKV * N) {
    tile_axpy<kTileKV>(d, acc, row_stride, alpha, w, ns, x, x_off + e, e);
  }
  for (; e + 2 * N <= len; e += 2 * N) tile_axpy<2>(d, acc, row_stride, alpha, w, ns, x, x_off + e, e);
  for (; e < len; e += N) tile_axpy<1>(d, acc, row_stride, alpha, w, ns, x, x_off + e, e);
}

// Unscaled scores q_i . (k_j + r_ij) of the J columns from j0 of a tile's segment: relation terms by column (the
// agreeing columns' relation row added to the key row, the table for the others), from the table alone, or none.
template <bool REL, class D, typename T, int S>
HWY_INLINE hn::Vec<D> tile_scores(D d, const GsaParams& p, const TileRelations& rels, const TileSources<REL, T, S>& src,
                                  const T* const* q_u, int64_t h, const T* tab_h, int j0) {
  const hn::RebindToSigned<D> di;
  const int64_t q_off = h * p.q_strides.head, k_off = h * p.k_strides.head;
  constexpr int J = static_cast<int>(hn::MaxLanes(D())) / kTileRows;
  if constexpr (!REL) {
    return tile_dots(d, q_u, q_off, src.kp + j0, k_off, p.D);
  } else {
    const uint8_t kind = rels.by_column() ? src.mixed[j0 / J] : src.kAllMixed;
    // The gather first: its latency then overlaps the dot products.
    const auto add = kind != 0 ? hn::GatherIndex(d, tab_h, hn::Load(di, src.tix + j0 * kTileRows)) : hn::Zero(d);
    const auto s = kind == src.kAllMixed ? tile_dots(d, q_u, q_off, src.kp + j0, k_off, p.D)
                                         : tile_dots<true>(d, q_u, q_off, src.kp + j0, k_off, p.D, src.rp + j0);
    return kind != 0 ? hn::Add(s, add) : s;
  }
}

// Whether a group of `unions` union columns runs as a tile by destination, and how its relation terms come: one
// table of every relation where that costs little (window 256's clipped distances), else by column (bpt), else
// the group runs per row. rels holds the slots after a true.
template <int R>
bool tile_relations(const GsaParams& p, const RowGroupT<R>& grp, int64_t unions, TileRelations& rels) {
  return p.rel_emb == nullptr || rels.pays(p, grp, unions) || rels.pays_by_column(p, grp, unions);
}
#endif

// Scratch: kTileRows * H * R elements (the relation table), inside what gsa_cpu_scratch_elems gives the forward
// beyond acc, m and l.
template <bool REL, typename T>
bool forward_tile(const GsaParams& p, int64_t b, const RowGroup& grp, int64_t unions, T* m, T* l, T* acc,
                  T* scratch) {
#if !(HWY_HAVE_SCALABLE || HWY_TARGET == HWY_SCALAR)
  TileRelations rels;
  if (!tile_relations(p, grp, unions, rels)) return false;
  const hn::ScalableTag<T> d;
  using V = hn::Vec<decltype(d)>;
  constexpr int N = static_cast<int>(hn::MaxLanes(decltype(d)()));
  constexpr int J = N / kTileRows;                 // sources per tile_dots
  constexpr int S = N * kSegChunks;                // union sources per segment
  const In<T> in(p);
  const GsaGraphView& g = p.graph;
  const int64_t H = p.H, Dm = p.D;
  const T* q_u[kTileRows];
  for (int i = 0; i < kTileRows; ++i) q_u[i] = in.q + at(p.q_strides, b, grp.u[i < grp.n ? i : 0]);
  for (int i = grp.n; i < kTileRows; ++i) {  // padding rows: empty state, never written out
    for (int64_t h = 0; h < H; ++h) m[i * H + h] = gsa_neg_inf<T>(), l[i * H + h] = T(0);
    std::fill(acc + i * H * Dm, acc + (i + 1) * H * Dm, T(0));
  }
  T* tab = scratch;  // [H][slot * kTileRows + i] = q_i,h . r of the slot's relation
  if constexpr (REL) rels.table(d, p, q_u, tab);
  const int nslot = rels.slots();
  HWY_ALIGN T sc[S * kTileRows];  // scores, then weights, at j*kTileRows + i
  const V scale = hn::Set(d, static_cast<T>(p.scale));
  TileUnion<S> un(grp, g.col);
  TileSources<REL, T, S> src;
  src.set_zero(tab + H * nslot * kTileRows, Dm);
  const T* const* vp = src.vp;
  while (un.next(J)) {
    const int ns = un.n, padded = un.padded;
    src.fill(p, in, b, un, rels);
    for (int64_t h = 0; h < H; ++h) {
      const int64_t hv = h * p.v_strides.head;
      const T* tab_h = tab + h * nslot * kTileRows;
      V mx = hn::Set(d, gsa_neg_inf<T>());
      for (int j0 = 0; j0 < padded; j0 += J) {
        V s = tile_scores(d, p, rels, src, q_u, h, tab_h, j0);
        prefetch_rows(vp + j0, J, hv, Dm);
        if (h + 1 < H) prefetch_rows(src.kp + j0, J, (h + 1) * p.k_strides.head, Dm);
        s = hn::IfThenElse(hn::Gt(hn::Load(d, src.ok + j0 * kTileRows), hn::Zero(d)), hn::Mul(s, scale),
                           hn::Set(d, gsa_neg_inf<T>()));
        hn::Store(s, d, sc + j0 * kTileRows);
        mx = hn::Max(mx, s);
      }
      // Per row: the new max (lanes i, i + kTileRows, ...), the rescale of its state, then exp over the segment.
      HWY_ALIGN T mxl[N];
      hn::Store(mx, d, mxl);
      HWY_ALIGN T msub[N];
      T alpha[kTileRows];
      for (int i = 0; i < kTileRows; ++i) {
        T segmax = i < N ? mxl[i] : gsa_neg_inf<T>();  // N >= kTileRows wherever a tile runs (tile_union)
        for (int t = i + kTileRows; t < N; t += kTileRows) segmax = std::max(segmax, mxl[t]);
        T& mh = m[i * H + h];
        const T m_new = std::max(mh, segmax);
        alpha[i] = rescale_factor(d, mh, m_new);
        mh = m_new;
        const T m_use = m_new == gsa_neg_inf<T>() ? T(0) : m_new;  // a row with nothing yet: exp(-inf) = 0
        for (int t = i; t < N; t += kTileRows) msub[t] = m_use;
      }
      const V vm = hn::Load(d, msub);
      V sum = hn::Zero(d);
      for (int t = 0; t < padded * kTileRows; t += N) {
        const V pr = vexp(d, hn::Sub(hn::Load(d, sc + t), vm));
        hn::Store(pr, d, sc + t);
        sum = hn::Add(sum, pr);
      }
      HWY_ALIGN T suml[N];
      hn::Store(sum, d, suml);
      for (int i = 0; i < kTileRows; ++i) {
        T s = 0;
        for (int t = i; t < N; t += kTileRows) s += suml[t];
        l[i * H + h] = l[i * H + h] * alpha[i] + s;
      }
      // acc_i += sum_j w_ij v_j, a block of every row in registers while the segment's sources stream through.
      tile_axpy_rows(d, acc + h * Dm, H * Dm, alpha, sc, ns, vp, hv, Dm);
    }
  }
  return true;
#else
  (void)p, (void)b, (void)grp, (void)unions, (void)m, (void)l, (void)acc, (void)scratch;
  return false;
#endif
}

#if !(HWY_HAVE_SCALABLE || HWY_TARGET == HWY_SCALAR)
// Wide tiles: the forward of a group of up to R = V*N rows (V vectors of N lanes) that share most of their sources,
// row i in lane i, as flash attention lays out a block. A union column's scores are V vectors over the rows: its
// key row's elements, broadcast, times the rows' queries held transposed (qt [D][R]). Like a GEMM micro-kernel, a
// register block of C columns x V row vectors takes C*V FMAs per C broadcasts and V loads (AVX2: 6 x 2, the 4-row
// tile takes 4*J FMAs per 4 + J loads plus a reduce_parts per J columns). Max, rescale, exp and the row sums are
// lane-wise, with no horizontal step; the output accumulates transposed (ot [D][R]), a block of C elements of D by
// V row vectors in registers while the segment's weight vectors stream through against broadcast value elements.
// Relation terms: one table of every relation of the group where that costs little (window's clipped distances):
// columns read their slot's vectors (gathered per lane where the rows of a column disagree); else by column (bpt):
// a column whose rows agree adds its relation row to the key row once per head (into kr) and only the disagreeing
// columns read the table.
// Accumulators per register block, C*V: 12 FMA chains keep two pipes of latency 4 busy, and with V row vectors and
// a broadcast fit 16 registers (24 on AVX-512's 32 measured 2x slower: the C key row pointers no longer fit the
// general registers).
constexpr int kWideAcc = 12;
constexpr int kWideTail = 2;   // the smaller blocks after the full ones (segments are padded to a multiple of it)
constexpr int kWideSeg = kGsaCpuWideSeg;
static_assert(kWideSeg % kWideAcc == 0 && kWideSeg % kWideTail == 0, "segments hold whole blocks");

// Row vectors of a wide tile of T on this target (two where their rows still fit a row block), and its rows.
template <typename T>
constexpr int wide_vecs() {
  return 2 * static_cast<int>(hn::MaxLanes(hn::ScalableTag<T>())) <= kGsaCpuRowBlock ? 2 : 1;
}
template <typename T>
constexpr int wide_rows() {
  return wide_vecs<T>() * static_cast<int>(hn::MaxLanes(hn::ScalableTag<T>()));
}
template <typename T>
using WideGroup = RowGroupT<wide_rows<T>()>;

// Calls f(j0, std::integral_constant<int, C>) over [0, n) in blocks of C = kWideAcc / V, then kWideTail (n: a
// multiple of kWideTail).
template <int V, typename F>
HWY_INLINE void wide_blocks(int n, F&& f) {
  constexpr int C = kWideAcc / V;
  int j0 = 0;
  for (; j0 + C <= n; j0 += C) f(j0, std::integral_constant<int, C>());
  for (; j0 < n; j0 += kWideTail) f(j0, std::integral_constant<int, kWideTail>());
}

// s[c*V + v] = sum_e qt[e*R + v*N ..] * x[c][e], e < len, for C columns: lane i of vector v holds row v*N + i's dot
// with column c.
template <int C, int V, class D, typename T = hn::TFromD<D>>
HWY_INLINE void wide_dots(D d, const T* HWY_RESTRICT qt, const T* const* x, int64_t len, hn::Vec<D>* s) {
  using Vec = hn::Vec<D>;
  constexpr int N = static_cast<int>(hn::MaxLanes(D()));
  Vec a[C * V];
  for (int t = 0; t < C * V; ++t) a[t] = hn::Zero(d);
  for (int64_t e = 0; e < len; ++e) {
    Vec qv[V];
    for (int v = 0; v < V; ++v) qv[v] = hn::Load(d, qt + (e * V + v) * N);
    for (int c = 0; c < C; ++c) {
      const Vec xb = hn::Set(d, x[c][e]);
      for (int v = 0; v < V; ++v) a[c * V + v] = hn::MulAdd(xb, qv[v], a[c * V + v]);
    }
  }
  for (int t = 0; t < C * V; ++t) s[t] = a[t];
}

// ot[e*R ..] = alpha * ot + sum_{j < ns} w[j*R ..] * x_j[e] for K elements e from e0 (x_j = x[j] + x_off), the K*V
// accumulators in registers while the columns stream through.
template <int K, int V, class D, typename T = hn::TFromD<D>>
HWY_INLINE void wide_axpy(D d, T* HWY_RESTRICT ot, const hn::Vec<D>* alpha, const T* HWY_RESTRICT w, int ns,
                          const T* const* x, int64_t x_off, int64_t e0) {
  using Vec = hn::Vec<D>;
  constexpr int N = static_cast<int>(hn::MaxLanes(D()));
  Vec a[K * V];
  for (int k = 0; k < K; ++k) {
    for (int v = 0; v < V; ++v) a[k * V + v] = hn::Mul(hn::Load(d, ot + ((e0 + k) * V + v) * N), alpha[v]);
  }
  for (int j = 0; j < ns; ++j) {
    Vec wv[V];
    for (int v = 0; v < V; ++v) wv[v] = hn::Load(d, w + (j * V + v) * N);
    const T* xj = x[j] + x_off + e0;
    for (int k = 0; k < K; ++k) {
      const Vec xb = hn::Set(d, xj[k]);
      for (int v = 0; v < V; ++v) a[k * V + v] = hn::MulAdd(xb, wv[v], a[k * V + v]);
    }
  }
  for (int k = 0; k < K; ++k) {
    for (int v = 0; v < V; ++v) hn::Store(a[k * V + v], d, ot + ((e0 + k) * V + v) * N);
  }
}

// wide_axpy over the whole of D (x_off: the head's offset in the rows x): blocks of kWideAcc / V, then smaller.
template <int V, class D, typename T = hn::TFromD<D>>
HWY_INLINE void wide_axpy_rows(D d, T* HWY_RESTRICT ot, const hn::Vec<D>* alpha, const T* HWY_RESTRICT w, int ns,
                               const T* const* x, int64_t x_off, int64_t len) {
  constexpr int K = kWideAcc / V;
  int64_t e = 0;
  for (; e + K <= len; e += K) wide_axpy<K, V>(d, ot, alpha, w, ns, x, x_off, e);
  for (; e + kWideTail <= len; e += kWideTail) wide_axpy<kWideTail, V>(d, ot, alpha, w, ns, x, x_off, e);
  for (; e < len; ++e) wide_axpy<1, V>(d, ot, alpha, w, ns, x, x_off, e);
}

// Scratch of a wide tile from `scratch`, aligned for vector loads.
template <typename T>
T* wide_scratch(T* scratch) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(scratch), align = 64;
  return reinterpret_cast<T*>((a + align - 1) / align * align);
}

// 16-lane targets (AVX-512 fp32) keep wide tiles to groups whose union is within kWideWaste16 of their mean row and
// whose relation terms come from one table (or none): the 4-row tiles there load four key rows per vector already,
// and measured faster for window 64 (union 1.23x its rows at 16 rows) and bpt k=16, 64 (relations by column).
constexpr double kWideWaste16 = 1.15;
template <typename T>
constexpr bool wide_16() {
  return hn::MaxLanes(hn::ScalableTag<T>()) >= 16;
}

// Before the union's merge, on 16-lane targets: a group with more distinct relations than half the largest union a
// wide tile accepts there cannot take one table (bpt k=64's 16-row groups: the merge alone cost 5%).
template <typename T, class G>
bool wide_feasible(const GsaParams& p, const G& grp) {
  if (!wide_16<T>() || p.rel_emb == nullptr || grp.n == 0) return true;
  int64_t total = 0;
  for (int i = 0; i < grp.n; ++i) total += grp.e1[i] - grp.e0[i];
  TileRelations rels;
  return rels.pays(p, grp, static_cast<int64_t>(kWideWaste16 * static_cast<double>(total) / grp.n));
}

// xt[(h*D + e)*R + i] = x_i,h[e] of the group's rows (zeros for lanes past them): rows held transposed.
template <int R, typename T>
void wide_transpose(const GsaParams& p, int64_t b, const RowGroupT<R>& grp, const T* x, const GsaStrides& st,
                    T* xt) {
  const T* x_i[R];
  for (int i = 0; i < grp.n; ++i) x_i[i] = x + at(st, b, grp.u[i]);
  // Row by row within each element: the stores stay contiguous (by column they strided the whole of xt, L1's size).
  for (int64_t h = 0; h < p.H; ++h) {
    for (int64_t e = 0; e < p.D; ++e) {
      T* out = xt + (h * p.D + e) * R;
      const int64_t off = h * st.head + e;
      for (int i = 0; i < grp.n; ++i) out[i] = x_i[i][off];
      for (int i = grp.n; i < R; ++i) out[i] = T(0);
    }
  }
}

// out[h * head + e] = factor * xt[(h*D + e)*R + i] for h < H: lane i of rows held transposed, written back as a row.
template <int R, typename T>
void wide_row_out(const T* xt, int i, int64_t H, int64_t Dm, T factor, T* out, int64_t head) {
  for (int64_t h = 0; h < H; ++h) {
    for (int64_t e = 0; e < Dm; ++e) out[h * head + e] = xt[(h * Dm + e) * R + i] * factor;
  }
}

// tab [H][slot][R] = q_i,h . r of each slot's relation, from the rows' queries held transposed (qt [H][D][R]).
template <int V, class D, typename T = hn::TFromD<D>>
void wide_table(D d, const GsaParams& p, const TileRelations& rels, const T* qt, T* tab) {
  constexpr int N = static_cast<int>(hn::MaxLanes(D()));
  constexpr int R = V * N;
  const T* rel = static_cast<const T*>(p.rel_emb);
  const int nslot = rels.count();
  const T* rp[kWideAcc];
  hn::Vec<D> s[kWideAcc];
  for (int64_t h = 0; h < p.H; ++h) {
    wide_blocks<V>((nslot + kWideTail - 1) / kWideTail * kWideTail, [&](int s0, auto cols) {
      constexpr int C = decltype(cols)::value;
      for (int c = 0; c < C; ++c) rp[c] = rel + rels.relation(std::min(s0 + c, nslot - 1)) * p.rel_stride;
      wide_dots<C, V>(d, qt + h * p.D * R, rp, p.D, s);
      for (int c = 0; c < C && s0 + c < nslot; ++c) {
        for (int v = 0; v < V; ++v) hn::Store(s[c * V + v], d, tab + (h * nslot + s0 + c) * R + v * N);
      }
    });
  }
}

// One segment of a wide tile's union as both wide tiles read it: each column's key and value rows, the mask ok
// (1 where row i has an edge to column j, at j*R + i), and how its relation term comes: none (also padding), a
// slot's vectors (kSlot), gathered per lane (kGather, lane indices in tix), or added to the key row (kKeyRel,
// relation row rrow and the relation in slot; by column only). Written before the head loop.
template <typename T, int R>
struct WideColumns {
  using TI = hn::TFromD<hn::RebindToSigned<hn::ScalableTag<T>>>;
  enum Kind : uint8_t { kNone, kSlot, kGather, kKeyRel };
  const T* kp[kWideSeg];
  const T* vp[kWideSeg];
  const T* rrow[kWideSeg];
  uint8_t kind[kWideSeg];
  int32_t slot[kWideSeg];
  HWY_ALIGN T ok[kWideSeg * R];
  HWY_ALIGN TI tix[kWideSeg * R];
  // x plus column j's relation term for row vector v (t = j*R + v*N) from the head's table tab_h.
  template <class D>
  HWY_INLINE hn::Vec<D> add_relation(D d, hn::Vec<D> x, const T* tab_h, int j, int t, int v) const {
    constexpr int N = static_cast<int>(hn::MaxLanes(D()));
    if (kind[j] == kSlot) return hn::Add(x, hn::Load(d, tab_h + slot[j] * R + v * N));
    if (kind[j] == kGather) {
      return hn::Add(x, hn::GatherIndex(d, tab_h, hn::Load(hn::RebindToSigned<D>(), tix + t)));
    }
    return x;
  }
  // xp[j] = column j's key row in the head at k_off, kKeyRel columns' plus their relation row (written to kr [j][D]).
  void key_rows(int padded, int64_t k_off, int64_t Dm, T* kr, const T** xp) const {
    for (int j = 0; j < padded; ++j) {
      if (kind[j] != kKeyRel) {
        xp[j] = kp[j] + k_off;
        continue;
      }
      T* krj = kr + j * Dm;
      for (int64_t e = 0; e < Dm; ++e) krj[e] = kp[j][k_off + e] + rrow[j][e];
      xp[j] = krj;
    }
  }
  void fill(const GsaParams& p, const In<T>& in, int64_t b, const TileUnion<kWideSeg, R>& un,
            const TileRelations& rels) {
    for (int j = 0; j < un.padded; ++j) {
      const int64_t* a = un.at + j * R;
      kp[j] = in.k + at(p.k_strides, b, un.node[j]);
      vp[j] = in.v + at(p.v_strides, b, un.node[j]);
      for (int i = 0; i < R; ++i) ok[j * R + i] = a[i] >= 0 ? T(1) : T(0);
      kind[j] = kNone;
      if (in.rel == nullptr || j >= un.n) continue;
      const int32_t c = TileRelations::column_relation<R>(p, a);
      if (c >= 0 && rels.by_column()) {
        kind[j] = kKeyRel;
        rrow[j] = in.rel + c * p.rel_stride;
        slot[j] = c;
      } else if (c >= 0) {
        kind[j] = kSlot;
        slot[j] = rels.slot(c);
      } else {
        kind[j] = kGather;
        for (int i = 0; i < R; ++i) {
          tix[j * R + i] = static_cast<TI>((a[i] >= 0 ? rels.slot(p.graph.rel[a[i]]) : 0) * R + i);
        }
      }
    }
  }
};

// Whether a wide tile takes the group, with rels' slots: relation terms as the 4-row tile takes them (not by
// column on 16-lane targets).
template <typename T, class G>
bool wide_relations(const GsaParams& p, const G& grp, int64_t unions, TileRelations& rels) {
  if (wide_16<T>()) return p.rel_emb == nullptr || rels.pays(p, grp, unions);
  return tile_relations(p, grp, unions, rels);
}

// Runs the group as a wide tile when its relation terms allow (false: nothing done), writing o and lse of its rows.
// Scratch: gsa_cpu_scratch_elems covers qt, ot [H][D][R], m, l [H][R], kr [kWideSeg][D] and the table [H][slot][R].
template <bool REL, typename T>
bool forward_wide(const GsaParams& p, int64_t b, const WideGroup<T>& grp, int64_t unions, T* scratch) {
  const hn::ScalableTag<T> d;
  using Vec = hn::Vec<decltype(d)>;
  constexpr int N = static_cast<int>(hn::MaxLanes(decltype(d)()));
  constexpr int V = wide_vecs<T>();
  constexpr int R = V * N;
  static_assert(R <= kGsaCpuWideRows, "scratch covers the rows");
  TileRelations rels;
  if (!wide_relations<T>(p, grp, unions, rels)) return false;
  const In<T> in(p);
  const int64_t H = p.H, Dm = p.D, HDR = H * Dm * R;
  T* qt = wide_scratch(scratch);  // [H][D][R]
  T* ot = qt + HDR;               // [H][D][R]
  T* m = ot + HDR;                // [H][R]
  T* l = m + H * R;               // [H][R]
  T* kr = l + H * R;              // [kWideSeg][D]: key rows plus their column's relation row (by column)
  T* tab = kr + kWideSeg * Dm;    // [H][slot][R] = q_i,h . r of the slot's relation
  const int nslot = rels.count();
  wide_transpose(p, b, grp, in.q, p.q_strides, qt);
  std::fill(ot, ot + HDR, T(0));
  std::fill(m, m + H * R, gsa_neg_inf<T>());
  std::fill(l, l + H * R, T(0));
  if constexpr (REL) wide_table<V>(d, p, rels, qt, tab);
  using Cols = WideColumns<T, R>;
  TileUnion<kWideSeg, R> un(grp, p.graph.col);
  Cols col;
  const T* xp[kWideSeg];
  HWY_ALIGN T sc[kWideSeg * R];  // scores, then weights, at j*R + i
  const Vec scale = hn::Set(d, static_cast<T>(p.scale));
  const Vec neg_inf = hn::Set(d, gsa_neg_inf<T>());
  while (un.next(kWideTail)) {
    const int ns = un.n, padded = un.padded;
    col.fill(p, in, b, un, rels);
    for (int64_t h = 0; h < H; ++h) {
      const int64_t k_off = h * p.k_strides.head;
      const T* qt_h = qt + h * Dm * R;
      const T* tab_h = tab + h * nslot * R;
      col.key_rows(padded, k_off, Dm, kr, xp);
      Vec mx[V];
      Vec s[kWideAcc];
      for (int v = 0; v < V; ++v) mx[v] = neg_inf;
      wide_blocks<V>(padded, [&](int j0, auto cols) {
        constexpr int C = decltype(cols)::value;
        wide_dots<C, V>(d, qt_h, xp + j0, Dm, s);
        for (int c = 0; c < C; ++c) {
          const int j = j0 + c;
          for (int v = 0; v < V; ++v) {
            Vec x = s[c * V + v];
            const int t = j * R + v * N;
            if (REL) x = col.add_relation(d, x, tab_h, j, t, v);
            x = hn::IfThenElse(hn::Gt(hn::Load(d, col.ok + t), hn::Zero(d)), hn::Mul(x, scale), neg_inf);
            hn::Store(x, d, sc + t);
            mx[v] = hn::Max(mx[v], x);
          }
        }
      });
      // Lane-wise: the new max, the rescale of the state (0 where nothing was seen yet), exp over the segment.
      Vec alpha[V], m_use[V], sum[V];
      for (int v = 0; v < V; ++v) {
        T* m_hv = m + h * R + v * N;
        const Vec m_old = hn::Load(d, m_hv);
        const Vec m_new = hn::Max(m_old, mx[v]);
        m_use[v] = hn::IfThenElse(hn::Eq(m_new, neg_inf), hn::Zero(d), m_new);
        alpha[v] = hn::IfThenElse(hn::Eq(m_old, neg_inf), hn::Zero(d), vexp(d, hn::Sub(m_old, m_use[v])));
        hn::Store(m_new, d, m_hv);
        sum[v] = hn::Zero(d);
      }
      for (int j = 0; j < padded; ++j) {
        for (int v = 0; v < V; ++v) {
          const int t = j * R + v * N;
          const Vec pr = vexp(d, hn::Sub(hn::Load(d, sc + t), m_use[v]));
          hn::Store(pr, d, sc + t);
          sum[v] = hn::Add(sum[v], pr);
        }
      }
      for (int v = 0; v < V; ++v) {
        T* l_hv = l + h * R + v * N;
        hn::Store(hn::MulAdd(hn::Load(d, l_hv), alpha[v], sum[v]), d, l_hv);
      }
      wide_axpy_rows<V>(d, ot + h * Dm * R, alpha, sc, ns, col.vp, h * p.v_strides.head, Dm);
    }
  }
  T* o = static_cast<T*>(p.o);
  T* lse = static_cast<T*>(p.lse);
  for (int i = 0; i < grp.n; ++i) {
    const int64_t u = grp.u[i];
    T* o_u = o + at(p.o_strides, b, u);
    T* lse_u = lse + (b * p.N + u) * H;
    for (int64_t h = 0; h < H; ++h) {
      const GsaSoftmaxState<T> st{m[h * R + i], l[h * R + i]};
      wide_row_out<R>(ot + h * Dm * R, i, 1, Dm, gsa_inv_norm(st), o_u + h * p.o_strides.head, 0);
      lse_u[h] = gsa_lse(st);
    }
  }
  return true;
}

// Whether forward_wide runs a group whose sources tile.
template <typename T, class G>
bool wide_applies(const GsaParams& p, const G& grp, int64_t unions) {
  TileRelations rels;
  return wide_relations<T>(p, grp, unions, rels);
}
#else
template <bool REL, typename T, class G>
bool forward_wide(const GsaParams&, int64_t, const G&, int64_t, T*) {
  return false;
}
template <typename T, class G>
bool wide_applies(const GsaParams&, const G&, int64_t) {
  return false;
}
#endif

template <typename T>
void init_state(const GsaParams& p, int n, T* m, T* l, T* acc) {
  for (int64_t h = 0; h < n * p.H; ++h) {
    const GsaSoftmaxState<T> st = gsa_softmax_init<T>();
    m[h] = st.m;
    l[h] = st.l;
  }
  std::fill(acc, acc + n * p.H * p.D, T(0));
}

// Calls f(group) for consecutive groups of up to R rows of [u0, u1) not marked in skip, with their CSR edge ranges.
template <int R = kGsaCpuRowGroup, typename F>
void for_row_groups(const int64_t* row_ptr, int64_t u0, int64_t u1, const uint8_t* skip, F&& f) {
  RowGroupT<R> grp;
  for (int64_t u = u0; u < u1; ++u) {
    if (skip != nullptr && skip[u]) continue;
    grp.u[grp.n] = u;
    grp.e0[grp.n] = row_ptr[u];
    grp.e1[grp.n] = row_ptr[u + 1];
    if (++grp.n == R) {
      f(grp);
      grp.n = 0;
    }
  }
  if (grp.n > 0) f(grp);
}

// The groups of rows [u0, u1) not marked in skip of the forward and the backward by destination: wide(group, unions)
// for each group of a wide tile's rows whose sources tile (it returns whether it ran the group as a wide tile),
// four(group) for the groups of kGsaCpuRowGroup rows of the others. A wide tile's rows are a multiple of
// kGsaCpuRowGroup and divide the row blocks, so these are the groups formed without wide tiles.
// by_source: the sources [u0, u1) of the backward by source instead, over the transposed graph (no relation terms).
template <typename T, typename W, typename F>
void for_wide_groups(const GsaParams& p, int64_t u0, int64_t u1, const uint8_t* skip, W&& wide, F&& four,
                     bool by_source = false) {
  const int64_t* row_ptr = by_source ? p.graph.t_row_ptr : p.graph.row_ptr;
#if !(HWY_HAVE_SCALABLE || HWY_TARGET == HWY_SCALAR)
  constexpr int NW = wide_rows<T>();
  if constexpr (NW >= kGsaCpuRowGroup) {
    static_assert(NW % kGsaCpuRowGroup == 0 && kGsaCpuRowBlock % NW == 0, "wide tiles regroup whole row groups");
    const int32_t* col = by_source ? p.graph.t_col : p.graph.col;
    for_row_groups<NW>(row_ptr, u0, u1, skip, [&](const WideGroup<T>& wg) {
      const int64_t unions = !by_source && !wide_feasible<T>(p, wg) ? 0 :
          tile_union(hn::ScalableTag<T>(), p, wg, col, wide_16<T>() ? kWideWaste16 : kTileWaste);
      if (unions > 0 && wide(wg, unions)) return;
      for (int s = 0; s < wg.n; s += kGsaCpuRowGroup) four(piece_group(wg.n - s, wg.u + s, wg.e0 + s, wg.e1 + s));
    });
    return;
  }
#endif
  (void)wide;
  for_row_groups(row_ptr, u0, u1, skip, four);
}

// Rows too short to fill a vector alone (bpt's and segtree's lowest span nodes: 2 to 4 sources each), packed: the
// group's edges side by side in the lanes of up to kShortVecs vectors, each lane with its own row's query, so one
// chunk of dots serves every row where the per-row path pads each row to a whole vector (bpt k=4 at n=8192: 6,144
// rows of 2 or 4 edges, 3/4 and 1/2 of their lanes padding). Every edge fits one pass: no rescale.
constexpr int kShortVecs = 2;

// Whether forward_short runs the group: 2 or more edges, all within kShortVecs vectors, and some row shorter than a
// vector.
template <typename T>
bool short_applies(const GsaParams& p, const RowGroup& grp) {
#if HWY_HAVE_SCALABLE || HWY_TARGET == HWY_SCALAR
  (void)p, (void)grp;
  return false;
#else
  constexpr int64_t N = static_cast<int64_t>(hn::MaxLanes(hn::ScalableTag<T>()));
  int64_t total = 0, shortest = N;
  for (int i = 0; i < grp.n; ++i) {
    total += grp.e1[i] - grp.e0[i];
    if (grp.e1[i] > grp.e0[i]) shortest = std::min(shortest, grp.e1[i] - grp.e0[i]);
  }
  return p.D % N == 0 && total >= 2 && total <= kShortVecs * N && shortest < N;
#endif
}

template <bool REL, typename T>
bool forward_short(const GsaParams& p, int64_t b, const RowGroup& grp, T* m, T* l, T* acc) {
#if HWY_HAVE_SCALABLE || HWY_TARGET == HWY_SCALAR
  (void)p, (void)b, (void)grp, (void)m, (void)l, (void)acc;
  return false;
#else
  if (!short_applies<T>(p, grp)) return false;
  const hn::ScalableTag<T> d;
  constexpr int N = static_cast<int>(hn::MaxLanes(decltype(d)()));
  constexpr int L = kShortVecs * N;
  const In<T> in(p);
  const GsaGraphView& g = p.graph;
  const int64_t H = p.H, Dm = p.D;
  const T* qp[L];
  const T* kp[L];
  const T* vp[L];
  const T* rp[L];
  int first[kGsaCpuRowGroup + 1];
  int row_of[L];
  int total = 0;
  for (int i = 0; i < grp.n; ++i) {
    first[i] = total;
    const T* q_i = in.q + at(p.q_strides, b, grp.u[i]);
    for (int64_t e = grp.e0[i]; e < grp.e1[i]; ++e, ++total) {
      qp[total] = q_i;
      kp[total] = in.k + at(p.k_strides, b, g.col[e]);
      vp[total] = in.v + at(p.v_strides, b, g.col[e]);
      rp[total] = REL ? in.rel + g.rel[e] * p.rel_stride : nullptr;
      row_of[total] = i;
    }
  }
  first[grp.n] = total;
  const int nv = (total + N - 1) / N;
  for (int t = total; t < nv * N; ++t) qp[t] = qp[0], kp[t] = kp[0], rp[t] = rp[0];  // padding lanes, masked
  HWY_ALIGN T sc[L];
  HWY_ALIGN T msub[L];
  for (int64_t h = 0; h < H; ++h) {
    for (int v = 0; v < nv; ++v) {
      const auto valid = hn::FirstN(d, static_cast<size_t>(total - v * N));
      hn::Store(chunk_scores<REL, kFixedNone>(d, p, qp + v * N, h, kp + v * N, rp + v * N, valid), d, sc + v * N);
    }
    for (int i = 0; i < grp.n; ++i) {
      T mx = gsa_neg_inf<T>();
      for (int t = first[i]; t < first[i + 1]; ++t) mx = std::max(mx, sc[t]);
      m[i * H + h] = mx;
    }
    for (int t = 0; t < nv * N; ++t) {
      const T mx = t < total ? m[row_of[t] * H + h] : T(0);
      msub[t] = mx == gsa_neg_inf<T>() ? T(0) : mx;  // a row of -inf scores: exp(-inf) = 0
    }
    for (int v = 0; v < nv; ++v) {
      hn::Store(vexp(d, hn::Sub(hn::Load(d, sc + v * N), hn::Load(d, msub + v * N))), d, sc + v * N);
    }
    for (int i = 0; i < grp.n; ++i) {
      const int n_i = first[i + 1] - first[i];
      if (n_i == 0) continue;
      T sum = 0;
      for (int t = first[i]; t < first[i + 1]; ++t) sum += sc[t];
      l[i * H + h] = sum;
      group_axpy<false>(d, acc + (i * H + h) * Dm, T(1), sc + first[i], n_i, vp + first[i], h * p.v_strides.head,
                        static_cast<const T* const*>(nullptr), Dm);
    }
  }
  return true;
#endif
}

// The forward of a group's rows (or pieces) into the state m, l, acc (scratch beyond them: the relation tables):
// a tile where one applies, packed short rows, else per row.
template <bool REL, typename T>
void forward_group(const GsaParams& p, int64_t b, const RowGroup& grp, T* m, T* l, T* acc, T* tab) {
  init_state(p, grp.n, m, l, acc);
  const int64_t unions = tile_union(hn::ScalableTag<T>(), p, grp, p.graph.col);
  if (unions > 0 && forward_tile<REL>(p, b, grp, unions, m, l, acc, tab)) return;
  if (unions == 0 && forward_short<REL>(p, b, grp, m, l, acc)) return;
  forward_accumulate<REL>(p, b, grp, m, l, acc, tab);
}

template <bool REL, typename T>
void forward_rows_t(const GsaParams& p, int64_t b, int64_t u0, int64_t u1, const uint8_t* skip, T* scratch) {
  const hn::ScalableTag<T> d;
  const int64_t H = p.H, D = p.D;
  T* acc = scratch;
  T* m = acc + kGsaCpuRowGroup * H * D;
  T* l = m + kGsaCpuRowGroup * H;
  T* tab = l + kGsaCpuRowGroup * H;
  T* o = static_cast<T*>(p.o);
  T* lse = static_cast<T*>(p.lse);
  const auto run = [&](const RowGroup& grp) {
    forward_group<REL>(p, b, grp, m, l, acc, tab);
    for (int i = 0; i < grp.n; ++i) {
      const int64_t u = grp.u[i];
      T* o_u = o + at(p.o_strides, b, u);
      T* lse_u = lse + (b * p.N + u) * H;
      for (int64_t h = 0; h < H; ++h) {
        const GsaSoftmaxState<T> st{m[i * H + h], l[i * H + h]};
        scale_copy(d, o_u + h * p.o_strides.head, acc + (i * H + h) * D, gsa_inv_norm(st), D);
        lse_u[h] = gsa_lse(st);
      }
    }
  };
  for_wide_groups<T>(
      p, u0, u1, skip,
      [&](const auto& wg, int64_t unions) { return forward_wide<REL>(p, b, wg, unions, scratch); }, run);
}

template <typename T>
void forward_rows(const GsaParams& p, int64_t b, int64_t u0, int64_t u1, const uint8_t* skip, void* scratch) {
  if (p.rel_emb != nullptr) forward_rows_t<true>(p, b, u0, u1, skip, static_cast<T*>(scratch));
  else forward_rows_t<false>(p, b, u0, u1, skip, static_cast<T*>(scratch));
}

// How the forward runs a group (forward_tile's decision): 0 a tile with one relation table or none, 1 a tile with
// relation terms by column, 2 per row.
template <typename T>
int group_kind_t(const GsaParams& p, const RowGroup& grp) {
#if !(HWY_HAVE_SCALABLE || HWY_TARGET == HWY_SCALAR)
  const int64_t unions = tile_union(hn::ScalableTag<T>(), p, grp, p.graph.col);
  TileRelations rels;
  if (unions > 0 && tile_relations(p, grp, unions, rels)) return rels.by_column() ? 1 : 0;
#else
  (void)p, (void)grp;
#endif
  return 2;
}

template <typename T>
void forward_groups(const GsaParams& p, int64_t u0, int64_t u1, const uint8_t* skip, int64_t* counts) {
  for_wide_groups<T>(
      p, u0, u1, skip,
      [&](const auto& wg, int64_t unions) {
        if (!wide_applies<T>(p, wg, unions)) return false;
        counts[3] += 1, counts[4] += wg.n;
        return true;
      },
      [&](const RowGroup& grp) {
        const int kind = group_kind_t<T>(p, grp);
        ++counts[kind == 2 && short_applies<T>(p, grp) ? 5 : kind];
      });
}

template <typename T>
int group_kind(const GsaParams& p, int n, const int64_t* u, const int64_t* e0, const int64_t* e1) {
  return group_kind_t<T>(p, piece_group(n, u, e0, e1));
}

template <bool REL, typename T>
void forward_tile_pieces_t(const GsaParams& p, int64_t b, const RowGroup& grp, void* const* st, T* scratch) {
  const int64_t H = p.H, HD = p.H * p.D;
  T* acc = scratch;
  T* m = acc + kGsaCpuRowGroup * HD;
  T* l = m + kGsaCpuRowGroup * H;
  forward_group<REL>(p, b, grp, m, l, acc, l + kGsaCpuRowGroup * H);
  for (int i = 0; i < grp.n; ++i) {
    T* s = static_cast<T*>(st[i]);
    std::copy(acc + i * HD, acc + (i + 1) * HD, s);
    std::copy(m + i * H, m + (i + 1) * H, s + HD);
    std::copy(l + i * H, l + (i + 1) * H, s + HD + H);
  }
}

template <typename T>
void forward_tile_pieces(const GsaParams& p, int64_t b, int n, const int64_t* u, const int64_t* e0, const int64_t* e1,
                         void* const* st, void* scratch) {
  const RowGroup grp = piece_group(n, u, e0, e1);
  if (p.rel_emb != nullptr) forward_tile_pieces_t<true>(p, b, grp, st, static_cast<T*>(scratch));
  else forward_tile_pieces_t<false>(p, b, grp, st, static_cast<T*>(scratch));
}

template <typename T>
void forward_piece(const GsaParams& p, int64_t b, int64_t u, int64_t e0, int64_t e1, void* m, void* l, void* acc,
                   void* scratch) {
  T* tab = static_cast<T*>(scratch);
  T* mt = static_cast<T*>(m);
  T* lt = static_cast<T*>(l);
  T* at_ = static_cast<T*>(acc);
  init_state(p, 1, mt, lt, at_);
  const RowGroup grp = single_row(u, e0, e1);
  if (p.rel_emb != nullptr) forward_accumulate<true>(p, b, grp, mt, lt, at_, tab);
  else forward_accumulate<false>(p, b, grp, mt, lt, at_, tab);
}

template <typename T>
void delta_rows(const GsaParams& p, int64_t u0, int64_t u1) {
  const hn::ScalableTag<T> d;
  const T* o = static_cast<const T*>(p.o);
  const T* d_o = static_cast<const T*>(p.d_o);
  T* delta = static_cast<T*>(p.delta);
  for (int64_t u = u0; u < u1; ++u) {
    for (int64_t b = 0; b < p.B; ++b) {
      const T* do_u = d_o + at(p.d_o_strides, b, u);
      const T* o_u = o + at(p.o_strides, b, u);
      T* delta_u = delta + (b * p.N + u) * p.H;
      for (int64_t h = 0; h < p.H; ++h) {
        delta_u[h] = dot(d, do_u + h * p.d_o_strides.head, o_u + h * p.o_strides.head, p.D);
      }
    }
  }
}

// Backward by destination: adds the edges of each row of the group (batch b) to its dq_acc [H, D] (unscaled; row
// i's at dq_acc + i*H*D) and their d_rel_emb contributions to rel_part [R, D]. Scratch: kGsaCpuRowGroup *
// (256 H + 3 H R). Rows with a relation table (row_relations) sum dS per (head, relation) instead of adding the
// relation row per edge: dq_h += sum_rel W_h,rel r_rel and d_rel_emb[rel] += scale sum_h W_h,rel q_h once per row.
// With pds [B, E, H, 2], each edge's P and dS per head are stored there for the pass by source.
template <bool REL, typename T>
void dq_accumulate(const GsaParams& p, int64_t b, const RowGroup& grp, T* dq_acc, T* rel_part, T* pds,
                   T* scratch) {
  const hn::ScalableTag<T> d;
  using V = hn::Vec<decltype(d)>;
  const int nl = static_cast<int>(hn::Lanes(d));
  const In<T> in(p);
  const GsaGraphView& g = p.graph;
  const int64_t H = p.H, D = p.D, R = p.R;
  const V scale = hn::Set(d, static_cast<T>(p.scale));
  // dS of every head of a row's segment [H][kSegMax] (scaled), so each edge's d_rel_emb row is updated once with
  // sum_h dS_h q_h instead of once per head.
  T* ds_all = scratch;
  T* tab = ds_all + kGsaCpuRowGroup * H * kSegMax;
  T* wsum = tab + kGsaCpuRowGroup * H * R;  // W [H, R] per row (the row's relations)
  const T* tabs[kGsaCpuRowGroup];
  std::vector<int32_t>* rels = group_relations();
  for (int i = 0; i < grp.n; ++i) {
    tabs[i] = nullptr;
    if (REL && row_relations(p, grp.e0[i], grp.e1[i], rels[i])) {
      rel_table(d, p, in.q + at(p.q_strides, b, grp.u[i]), rels[i], tab + i * H * R);
      tabs[i] = tab + i * H * R;
      for (int64_t h = 0; h < H; ++h) {
        for (int32_t r : rels[i]) wsum[(i * H + h) * R + r] = T(0);
      }
    }
  }
  EdgeSeg<T> segs[kGsaCpuRowGroup];
  HWY_ALIGN T ds[kSegMax];
  HWY_ALIGN T probs[kSegMax];
  for_group_segments(p, in, b, grp, nl * kSegChunks, nl, segs, [&](int64_t off) {
    for (int64_t h = 0; h < H; ++h) {
      for (int i = 0; i < grp.n; ++i) {
        const EdgeSeg<T>& sg = segs[i];
        if (sg.n == 0) continue;
        const int64_t u = grp.u[i];
        const T* q_u[1] = {in.q + at(p.q_strides, b, u)};
        const T* do_u[1] = {static_cast<const T*>(p.d_o) + at(p.d_o_strides, b, u)};
        const V lse_h = hn::Set(d, static_cast<const T*>(p.lse)[(b * p.N + u) * H + h]);
        const V delta_h = hn::Set(d, static_cast<const T*>(p.delta)[(b * p.N + u) * H + h]);
        const T* tab_h = tabs[i] != nullptr ? tabs[i] + h * R : nullptr;
        T* ds_heads = ds_all + (i * H + h) * kSegMax;
        for (int c = 0; c < sg.n; c += nl) {
          const auto valid = hn::FirstN(d, static_cast<size_t>(std::min(nl, sg.n - c)));
          const V s = chunk_scores_tab<REL>(d, p, q_u, h, sg.k + c, sg.r + c, sg.rel + c, tab_h, valid);
          const V pr = vexp(d, hn::Sub(s, lse_h));
          const V dp =
              group_dot<kFixedA, false>(d, do_u, h * p.d_o_strides.head, sg.v + c, h * p.v_strides.head, sg.r, D);
          const V dsv = hn::Mul(pr, hn::Sub(dp, delta_h));  // dS = P (dP - delta)
          hn::Store(dsv, d, ds + c);
          if (pds != nullptr) hn::Store(pr, d, probs + c);
          if constexpr (REL) hn::StoreU(hn::Mul(dsv, scale), d, ds_heads + c);
        }
        if (pds != nullptr) {
          T* out = pds + ((b * g.n_edges + grp.e0[i] + off) * H + h) * 2;
          for (int j = 0; j < sg.n; ++j) {
            out[j * H * 2] = probs[j];
            out[j * H * 2 + 1] = ds[j];
          }
        }
        T* dq_h = dq_acc + (i * H + h) * D;
        if (tab_h != nullptr) {
          group_axpy<false>(d, dq_h, T(1), ds, sg.n, sg.k, h * p.k_strides.head, sg.r, D);
          T* w_h = wsum + (i * H + h) * R;
          for (int j = 0; j < sg.n; ++j) w_h[sg.rel[j]] += ds[j];
        } else {
          group_axpy<REL>(d, dq_h, T(1), ds, sg.n, sg.k, h * p.k_strides.head, sg.r, D);
        }
      }
    }
    if constexpr (REL) {  // d_rel_emb[rel_e] += scale * sum_h dS_h q_h, heads in order
      const T* q_heads[kMaxHeads];
      HWY_ALIGN T w[kMaxHeads];
      for (int i = 0; i < grp.n; ++i) {
        if (tabs[i] != nullptr) continue;
        const T* q_u = in.q + at(p.q_strides, b, grp.u[i]);
        const int64_t e = grp.e0[i] + off;
        for (int64_t h0 = 0; h0 < H; h0 += kMaxHeads) {
          const int nh = static_cast<int>(std::min<int64_t>(kMaxHeads, H - h0));
          for (int hh = 0; hh < nh; ++hh) q_heads[hh] = q_u + (h0 + hh) * p.q_strides.head;
          for (int j = 0; j < segs[i].n; ++j) {
            for (int hh = 0; hh < nh; ++hh) w[hh] = ds_all[(i * H + h0 + hh) * kSegMax + j];
            group_axpy<false>(d, rel_part + g.rel[e + j] * D, T(1), w, nh, q_heads, 0, q_heads, D);
          }
        }
      }
    }
  });
  if constexpr (REL) {  // rows with a table: the relation sums, relations in order
    const T* rel = static_cast<const T*>(p.rel_emb);
    const T* q_heads[kMaxHeads];
    HWY_ALIGN T w[kMaxHeads];
    const T* rp[kMaxLanes * 2];
    HWY_ALIGN T wr[kMaxLanes * 2];
    for (int i = 0; i < grp.n; ++i) {
      if (tabs[i] == nullptr) continue;
      const T* w_i = wsum + i * H * R;
      for (int64_t h = 0; h < H; ++h) {  // dq_h += sum_rel W_h,rel r_rel over the row's relations
        int n = 0;
        for (int32_t r : rels[i]) {
          rp[n] = rel + r * p.rel_stride;
          wr[n++] = w_i[h * R + r];
          if (n == nl) {
            group_axpy<false>(d, dq_acc + (i * H + h) * D, T(1), wr, n, rp, 0, rp, D);
            n = 0;
          }
        }
        if (n > 0) group_axpy<false>(d, dq_acc + (i * H + h) * D, T(1), wr, n, rp, 0, rp, D);
      }
      const T* q_u = in.q + at(p.q_strides, b, grp.u[i]);
      for (int32_t r : rels[i]) {
        for (int64_t h0 = 0; h0 < H; h0 += kMaxHeads) {
          const int nh = static_cast<int>(std::min<int64_t>(kMaxHeads, H - h0));
          for (int hh = 0; hh < nh; ++hh) {
            q_heads[hh] = q_u + (h0 + hh) * p.q_strides.head;
            w[hh] = w_i[(h0 + hh) * R + r] * static_cast<T>(p.scale);
          }
          group_axpy<false>(d, rel_part + r * D, T(1), w, nh, q_heads, 0, q_heads, D);
        }
      }
    }
  }
}

#if !(HWY_HAVE_SCALABLE || HWY_TARGET == HWY_SCALAR)
// Relation gradients of a tile's rows from W, the sums of dS per head, slot and row (head h at wsum + h * ws, slot s
// of row i at + s * kTileRows + i), slots in order. Row i's dq: acc_h += sum_s W r_s (acc_h = acc + h * acc_head).
template <class D, typename T = hn::TFromD<D>>
void add_slot_rows(D d, const GsaParams& p, const TileRelations& rels, int nslot, const T* wsum, int64_t ws, int i,
                   T* acc, int64_t acc_head) {
  constexpr int N = static_cast<int>(hn::MaxLanes(D()));
  const T* rel = static_cast<const T*>(p.rel_emb);
  const T* rp[kMaxLanes];
  HWY_ALIGN T wr[kMaxLanes];
  for (int64_t h = 0; h < p.H; ++h) {
    const T* w_h = wsum + h * ws;
    for (int s0 = 0; s0 < nslot; s0 += N) {
      const int n = std::min(N, nslot - s0);
      for (int j = 0; j < n; ++j) {
        rp[j] = rel + rels.relation(s0 + j) * p.rel_stride;
        wr[j] = w_h[(s0 + j) * kTileRows + i];
      }
      group_axpy<false>(d, acc + h * acc_head, T(1), wr, n, rp, 0, rp, p.D);
    }
  }
}
#endif

#if !(HWY_HAVE_SCALABLE || HWY_TARGET == HWY_SCALAR)
// d_rel_emb[rel_s] += scale sum_{h, i < n} W_h[s][i] q_i,h[e] for K slots from s0 and E vectors of D from e0
// (W_h = wsum + h * ws, slot s at s * R): K*E accumulators against broadcast W and the rows' query vectors.
template <int K, int E, class D, typename T = hn::TFromD<D>>
HWY_INLINE void wide_grads(D d, const GsaParams& p, const TileRelations& rels, const T* wsum, int64_t ws, int R,
                           int n, const T* const* q, int s0, int64_t e0, T* rel_part) {
  using Vec = hn::Vec<D>;
  constexpr int N = static_cast<int>(hn::MaxLanes(D()));
  Vec a[K * E];
  for (int t = 0; t < K * E; ++t) a[t] = hn::Zero(d);
  for (int64_t h = 0; h < p.H; ++h) {
    const T* w_h = wsum + h * ws + s0 * R;
    for (int i = 0; i < n; ++i) {
      const T* q_ih = q[i] + h * p.q_strides.head + e0;
      Vec qv[E];
      for (int x = 0; x < E; ++x) qv[x] = hn::LoadU(d, q_ih + x * N);
      for (int k = 0; k < K; ++k) {
        const Vec wb = hn::Set(d, w_h[k * R + i]);
        for (int x = 0; x < E; ++x) a[k * E + x] = hn::MulAdd(wb, qv[x], a[k * E + x]);
      }
    }
  }
  const Vec scale = hn::Set(d, static_cast<T>(p.scale));
  for (int k = 0; k < K; ++k) {
    T* part = rel_part + rels.relation(s0 + k) * p.D + e0;
    for (int x = 0; x < E; ++x) {
      hn::StoreU(hn::MulAdd(a[k * E + x], scale, hn::LoadU(d, part + x * N)), d, part + x * N);
    }
  }
}

// wide_grads over every slot and the whole of D (a multiple of the lanes), for both tiles by destination: blocks of
// 6 slots by 2 vectors, then single slots and vectors.
template <class D, typename T = hn::TFromD<D>>
void wide_slot_grads(D d, const GsaParams& p, const TileRelations& rels, int nslot, const T* wsum, int64_t ws, int R,
                     int n, const T* const* q, T* rel_part) {
  constexpr int N = static_cast<int>(hn::MaxLanes(D()));
  constexpr int K = 6, E = 2;
  int s0 = 0;
  for (; s0 + K <= nslot; s0 += K) {
    int64_t e0 = 0;
    for (; e0 + E * N <= p.D; e0 += E * N) wide_grads<K, E>(d, p, rels, wsum, ws, R, n, q, s0, e0, rel_part);
    for (; e0 < p.D; e0 += N) wide_grads<K, 1>(d, p, rels, wsum, ws, R, n, q, s0, e0, rel_part);
  }
  for (; s0 < nslot; ++s0) {
    for (int64_t e0 = 0; e0 < p.D; e0 += N) wide_grads<1, 1>(d, p, rels, wsum, ws, R, n, q, s0, e0, rel_part);
  }
}
#endif

// Writes a segment's P and dS of every head (seg [H][2][stride]: head h's P at h * 2 * stride + t, its dS a stride
// later) into the edge cache pds_b [E][H][2] for the n entries at[t] >= 0 (edge ids), an edge's heads together: one
// line per edge, where a store per head and edge walks every line of the segment once per head (at 16 rows 48 KB,
// past L1: 18% of dq_wide's time; 10% of dq_tile's).
template <typename T>
HWY_INLINE void store_edge_cache(const T* seg, int64_t stride, const int64_t* at, int n, int64_t H, T* pds_b) {
  for (int t = 0; t < n; ++t) {
    if (at[t] < 0) continue;
    T* cache = pds_b + at[t] * H * 2;
    for (int64_t h = 0; h < H; ++h) {
      cache[2 * h] = seg[h * 2 * stride + t];
      cache[2 * h + 1] = seg[(h * 2 + 1) * stride + t];
    }
  }
}

// Backward by destination as a register tile (see forward_tile): scores and dP = dO_i . v_j of the group's rows over
// the union of their sources, dq_i += dS_ij k_j with each key row loaded once for the group. Relation gradients go
// through the group's relation slots: W [H][slot * kTileRows + i] sums dS per relation, then dq_i,h += sum W r_rel
// and d_rel_emb[rel] += scale sum_i,h W q_i,h once per relation. Relation terms as forward_tile takes them (one
// table, or by column): by column, an agreeing column's dS goes to its relation's W slot (past the table's).
// Scratch: 2 * kTileRows * H * (R + 1) + D + 2 * H * kTileRows * N * kSegChunks.
template <bool REL, typename T>
bool dq_tile(const GsaParams& p, int64_t b, const RowGroup& grp, int64_t unions, T* dq_acc, T* rel_part, T* pds,
             T* scratch) {
#if !(HWY_HAVE_SCALABLE || HWY_TARGET == HWY_SCALAR)
  TileRelations rels;
  if (REL && !tile_relations(p, grp, unions, rels)) return false;
  const hn::ScalableTag<T> d;
  using V = hn::Vec<decltype(d)>;
  constexpr int N = static_cast<int>(hn::MaxLanes(decltype(d)()));
  constexpr int J = N / kTileRows;
  constexpr int S = N * kSegChunks;
  const In<T> in(p);
  const GsaGraphView& g = p.graph;
  const int64_t H = p.H, Dm = p.D;
  const T* q_u[kTileRows];
  const T* do_u[kTileRows];
  int64_t row[kTileRows];  // (b * N + u) * H: lse and delta of the row
  for (int i = 0; i < kTileRows; ++i) {
    const int64_t u = grp.u[i < grp.n ? i : 0];
    q_u[i] = in.q + at(p.q_strides, b, u);
    do_u[i] = static_cast<const T*>(p.d_o) + at(p.d_o_strides, b, u);
    row[i] = (b * p.N + u) * H;
  }
  T* tab = scratch;
  if constexpr (REL) rels.table(d, p, q_u, tab);
  const int ntab = rels.slots();
  const int64_t ws = (p.R + 1) * kTileRows;  // W's head stride: room for every relation's slot and the zero slot
  T* wsum = tab + H * ntab * kTileRows;       // W [H][slot * kTileRows + i], the slots in use zeroed
  for (int64_t h = 0; h < H; ++h) std::fill_n(wsum + h * ws, ntab * kTileRows, T(0));
  const T* lse = static_cast<const T*>(p.lse);
  const T* delta = static_cast<const T*>(p.delta);
  HWY_ALIGN T pw[S * kTileRows];
  HWY_ALIGN T dsw[S * kTileRows];
  const T ones[kTileRows] = {T(1), T(1), T(1), T(1)};
  const V scale = hn::Set(d, static_cast<T>(p.scale));
  TileUnion<S> un(grp, g.col);
  TileSources<REL, T, S> src;
  src.set_zero(wsum + H * ws, Dm);
  T* pds_seg = wsum + H * ws + Dm;  // [H][2][S * kTileRows]: a segment's P, then dS, written to pds after its heads
  int32_t wix[S * kTileRows];       // W's index of each (column, row) of the segment
  const T* const* kp = src.kp;
  const T* const* vp = src.vp;
  while (un.next(J)) {
    const int ns = un.n, padded = un.padded;
    src.fill(p, in, b, un, rels);
    for (int t = 0; REL && t < ns * kTileRows; ++t) wix[t] = src.tix[t];
    for (int j = 0; REL && rels.by_column() && j < ns; ++j) {
      if (src.crel[j] < 0) continue;
      const int32_t slot = rels.w_slot(src.crel[j], wsum, H, ws, kTileRows);
      for (int i = 0; i < kTileRows; ++i) wix[j * kTileRows + i] = slot * kTileRows + i;
    }
    for (int64_t h = 0; h < H; ++h) {
      const T* tab_h = tab + h * ntab * kTileRows;
      HWY_ALIGN T lsep[N];
      HWY_ALIGN T delp[N];
      for (int t = 0; t < N; ++t) lsep[t] = lse[row[t % kTileRows] + h], delp[t] = delta[row[t % kTileRows] + h];
      const V lsev = hn::Load(d, lsep);
      const V delv = hn::Load(d, delp);
      for (int j0 = 0; j0 < padded; j0 += J) {
        const V s = tile_scores(d, p, rels, src, q_u, h, tab_h, j0);
        const auto valid = hn::Gt(hn::Load(d, src.ok + j0 * kTileRows), hn::Zero(d));
        // Masked lanes weigh 0 (an empty row has lse = -inf, and -inf - -inf would be NaN).
        const V pr = hn::IfThenElseZero(valid, vexp(d, hn::Sub(hn::Mul(s, scale), lsev)));
        const V dp = tile_dots(d, do_u, h * p.d_o_strides.head, vp + j0, h * p.v_strides.head, Dm);
        hn::Store(pr, d, pw + j0 * kTileRows);
        hn::Store(hn::Mul(pr, hn::Sub(dp, delv)), d, dsw + j0 * kTileRows);
      }
      if (pds != nullptr) {
        T* seg_h = pds_seg + h * 2 * S * kTileRows;
        std::copy(pw, pw + ns * kTileRows, seg_h);
        std::copy(dsw, dsw + ns * kTileRows, seg_h + S * kTileRows);
      }
      for (int t = 0; REL && t < ns * kTileRows; ++t) {
        if (un.at[t] >= 0) wsum[h * ws + wix[t]] += dsw[t];
      }
      tile_axpy_rows(d, dq_acc + h * Dm, H * Dm, ones, dsw, ns, kp, h * p.k_strides.head, Dm);
    }
    if (pds != nullptr) store_edge_cache(pds_seg, S * kTileRows, un.at, ns * kTileRows, H, pds + b * g.n_edges * H * 2);
  }
  if constexpr (REL) {  // the relation sums, slots in order (by column, the zero slot's index may hold a relation)
    const int nslot = rels.count();
    for (int i = 0; i < grp.n; ++i) add_slot_rows(d, p, rels, nslot, wsum, ws, i, dq_acc + i * H * Dm, Dm);
    wide_slot_grads(d, p, rels, nslot, wsum, ws, kTileRows, grp.n, q_u, rel_part);
  }
  return true;
#else
  (void)p, (void)b, (void)grp, (void)unions, (void)dq_acc, (void)rel_part, (void)pds, (void)scratch;
  return false;
#endif
}

#if !(HWY_HAVE_SCALABLE || HWY_TARGET == HWY_SCALAR)
// Backward by destination of a group of lanes rows as a wide tile (see forward_wide), relation terms as there (one
// table, or by column): per segment and head the scores and dP = dO_i . v_j are wide_dots against the rows' queries
// and output gradients held transposed, P and dS lane-wise, then dq^T += dS_j k_j as wide_axpy. Every edge's dS
// also goes to W, its sum per row and relation (agreeing columns' relations take slots past the table's), and at
// the end dq^T += W r_s per slot (a wide_axpy over the relation rows) and d_rel_emb[rel] += scale sum_i,h W q_i,h.
// Writes P and dS of the rows' edges into pds when given. Scratch: as forward_wide's, with dO^T and dq^T beside qt
// (gsa_cpu_scratch_elems).
template <bool REL, typename T>
bool dq_wide(const GsaParams& p, int64_t b, const WideGroup<T>& grp, int64_t unions, T* rel_part, T* pds,
             T* scratch) {
  TileRelations rels;
  if (REL && !wide_relations<T>(p, grp, unions, rels)) return false;
  const hn::ScalableTag<T> d;
  using Vec = hn::Vec<decltype(d)>;
  constexpr int N = static_cast<int>(hn::MaxLanes(decltype(d)()));
  constexpr int V = wide_vecs<T>();
  constexpr int R = V * N;
  const In<T> in(p);
  const GsaGraphView& g = p.graph;
  const int64_t H = p.H, Dm = p.D, HDR = H * Dm * R;
  const int ntab = rels.count();
  const int64_t ws = p.R * R;      // W's head stride: room for every relation's slot
  T* qt = wide_scratch(scratch);   // [H][D][R]
  T* dot = qt + HDR;               // [H][D][R]: dO transposed
  T* dqt = dot + HDR;              // [H][D][R]: unscaled dq transposed
  T* lsev = dqt + HDR;             // [H][R]
  T* delv = lsev + H * R;          // [H][R]
  T* tab = delv + H * R;           // [H][ntab][R] = q_i,h . r of the table's relations
  T* wsum = tab + H * ntab * R;    // [H][p.R][R]: sum of dS per slot, the slots in use zeroed
  T* kr = wsum + H * ws;           // [kWideSeg][D]: key rows plus their column's relation row (by column)
  T* pds_seg = kr + kWideSeg * Dm; // [H][2][kWideSeg * R]: a segment's P, then dS, written to pds after its heads
  wide_transpose(p, b, grp, in.q, p.q_strides, qt);
  wide_transpose(p, b, grp, static_cast<const T*>(p.d_o), p.d_o_strides, dot);
  for (int i = 0; i < R; ++i) {
    const bool has = i < grp.n;
    const int64_t st = has ? (b * p.N + grp.u[i]) * H : 0;
    for (int64_t h = 0; h < H; ++h) {
      // Rows without edges have lse = -inf; their lanes are masked, so 0 keeps the arithmetic finite.
      const T lse_ih = has ? static_cast<const T*>(p.lse)[st + h] : T(0);
      lsev[h * R + i] = lse_ih == gsa_neg_inf<T>() ? T(0) : lse_ih;
      delv[h * R + i] = has ? static_cast<const T*>(p.delta)[st + h] : T(0);
    }
  }
  std::fill(dqt, dqt + HDR, T(0));
  for (int64_t h = 0; h < H; ++h) std::fill(wsum + h * ws, wsum + h * ws + ntab * R, T(0));
  if constexpr (REL) wide_table<V>(d, p, rels, qt, tab);
  using Cols = WideColumns<T, R>;
  TileUnion<kWideSeg, R> un(grp, g.col);
  Cols col;
  int32_t wslot[kWideSeg];  // W's slot of kSlot and kKeyRel columns
  const T* xk[kWideSeg];
  const T* xv[kWideSeg];
  HWY_ALIGN T pw[kWideSeg * R];
  HWY_ALIGN T dsw[kWideSeg * R];
  Vec ones[V];
  for (int v = 0; v < V; ++v) ones[v] = hn::Set(d, T(1));
  const Vec scale = hn::Set(d, static_cast<T>(p.scale));
  while (un.next(kWideTail)) {
    const int ns = un.n, padded = un.padded;
    col.fill(p, in, b, un, rels);
    for (int j = 0; REL && j < ns; ++j) {
      if (col.kind[j] == Cols::kSlot) wslot[j] = col.slot[j];
      if (col.kind[j] == Cols::kKeyRel) wslot[j] = rels.w_slot(col.slot[j], wsum, H, ws, R);
    }
    for (int64_t h = 0; h < H; ++h) {
      const T* qt_h = qt + h * Dm * R;
      const T* dot_h = dot + h * Dm * R;
      const T* tab_h = tab + h * ntab * R;
      col.key_rows(padded, h * p.k_strides.head, Dm, kr, xk);
      for (int j = 0; j < padded; ++j) xv[j] = col.vp[j] + h * p.v_strides.head;
      Vec s[kWideAcc];
      Vec s2[kWideAcc];
      wide_blocks<V>(padded, [&](int j0, auto cols) {
        constexpr int C = decltype(cols)::value;
        wide_dots<C, V>(d, qt_h, xk + j0, Dm, s);
        wide_dots<C, V>(d, dot_h, xv + j0, Dm, s2);
        for (int c = 0; c < C; ++c) {
          const int j = j0 + c;
          for (int v = 0; v < V; ++v) {
            const int t = j * R + v * N;
            Vec x = s[c * V + v];
            if (REL) x = col.add_relation(d, x, tab_h, j, t, v);
            const auto valid = hn::Gt(hn::Load(d, col.ok + t), hn::Zero(d));
            const Vec lse_v = hn::Load(d, lsev + h * R + v * N);
            const Vec pr = hn::IfThenElseZero(valid, vexp(d, hn::Sub(hn::Mul(x, scale), lse_v)));
            hn::Store(pr, d, pw + t);
            const Vec ds = hn::Mul(pr, hn::Sub(s2[c * V + v], hn::Load(d, delv + h * R + v * N)));
            hn::Store(hn::IfThenElseZero(valid, ds), d, dsw + t);
          }
        }
      });
      T* seg_h = pds_seg + h * 2 * kWideSeg * R;
      if (pds != nullptr) {
        std::copy(pw, pw + ns * R, seg_h);
        std::copy(dsw, dsw + ns * R, seg_h + kWideSeg * R);
      }
      if constexpr (REL) {  // dS summed per relation: a column whose rows agree as vectors, the others per lane
        T* w_h = wsum + h * ws;
        for (int j = 0; j < ns; ++j) {
          if (col.kind[j] == Cols::kGather) {
            for (int i = 0; i < R; ++i) w_h[col.tix[j * R + i]] += dsw[j * R + i];
            continue;
          }
          if (col.kind[j] == Cols::kNone) continue;
          for (int v = 0; v < V; ++v) {
            T* w = w_h + wslot[j] * R + v * N;
            hn::Store(hn::Add(hn::Load(d, w), hn::Load(d, dsw + j * R + v * N)), d, w);
          }
        }
      }
      wide_axpy_rows<V>(d, dqt + h * Dm * R, ones, dsw, ns, col.kp, h * p.k_strides.head, Dm);
    }
    if (pds != nullptr) store_edge_cache(pds_seg, kWideSeg * R, un.at, ns * R, H, pds + b * g.n_edges * H * 2);
  }
  // dq_i,h = scale (dq^T + sum_s W r_s); then d_rel_emb[rel] += scale sum_i,h W q_i,h, slots in order.
  const int nslot = rels.count();
  if constexpr (REL) {
    thread_local std::vector<const T*> rrows;
    rrows.resize(static_cast<size_t>(nslot));
    for (int s = 0; s < nslot; ++s) rrows[s] = in.rel + rels.relation(s) * p.rel_stride;
    for (int64_t h = 0; h < H; ++h) {
      wide_axpy_rows<V>(d, dqt + h * Dm * R, ones, wsum + h * ws, nslot, rrows.data(), 0, Dm);
    }
  }
  T* dq = static_cast<T*>(p.dq);
  const T* q_rows[R];
  for (int i = 0; i < grp.n; ++i) {
    q_rows[i] = in.q + at(p.q_strides, b, grp.u[i]);
    wide_row_out<R>(dqt, i, H, Dm, static_cast<T>(p.scale), dq + at(p.dq_strides, b, grp.u[i]), p.dq_strides.head);
  }
  if constexpr (REL) wide_slot_grads(d, p, rels, nslot, wsum, ws, R, grp.n, q_rows, rel_part);
  return true;
}
#else
template <bool REL, typename T, class G>
bool dq_wide(const GsaParams&, int64_t, const G&, int64_t, T*, T*, T*) {
  return false;
}
#endif

// Unscaled dq of a group's rows (or pieces) into dq_acc [kGsaCpuRowGroup][H, D] (scratch beyond it): a tile where
// one applies, else per row.
template <bool REL, typename T>
void dq_group(const GsaParams& p, int64_t b, const RowGroup& grp, T* dq_acc, T* rel_part, T* pds, T* scratch) {
  std::fill(dq_acc, dq_acc + kGsaCpuRowGroup * p.H * p.D, T(0));  // all rows: the tile also runs missing ones
  const int64_t unions = tile_union(hn::ScalableTag<T>(), p, grp, p.graph.col);
  if (unions == 0 || !dq_tile<REL>(p, b, grp, unions, dq_acc, rel_part, pds, scratch)) {
    dq_accumulate<REL>(p, b, grp, dq_acc, rel_part, pds, scratch);
  }
}

template <bool REL, typename T>
void dq_rows_t(const GsaParams& p, int64_t u0, int64_t u1, const uint8_t* skip, T* rel_part, T* pds, T* scratch) {
  const hn::ScalableTag<T> d;
  const int64_t H = p.H, D = p.D;
  T* dq_acc = scratch;
  T* dq_scratch = dq_acc + kGsaCpuRowGroup * H * D;
  T* dq = static_cast<T*>(p.dq);
  for (int64_t b = 0; b < p.B; ++b) {
    const auto four = [&](const RowGroup& grp) {
      dq_group<REL>(p, b, grp, dq_acc, rel_part, pds, dq_scratch);
      for (int i = 0; i < grp.n; ++i) {
        T* dq_u = dq + at(p.dq_strides, b, grp.u[i]);
        for (int64_t h = 0; h < H; ++h) {
          scale_copy(d, dq_u + h * p.dq_strides.head, dq_acc + (i * H + h) * D, static_cast<T>(p.scale), D);
        }
      }
    };
    for_wide_groups<T>(
        p, u0, u1, skip,
        [&](const auto& wg, int64_t unions) { return dq_wide<REL>(p, b, wg, unions, rel_part, pds, scratch); },
        four);
  }
}

template <typename T>
void dq_rows(const GsaParams& p, int64_t u0, int64_t u1, const uint8_t* skip, void* rel_part, void* pds,
             void* scratch) {
  T* part = static_cast<T*>(rel_part);
  T* cache = static_cast<T*>(pds);
  if (p.rel_emb != nullptr) dq_rows_t<true>(p, u0, u1, skip, part, cache, static_cast<T*>(scratch));
  else dq_rows_t<false>(p, u0, u1, skip, part, cache, static_cast<T*>(scratch));
}

template <bool REL, typename T>
void dq_tile_pieces_t(const GsaParams& p, int64_t b, const RowGroup& grp, void* const* dq_acc, T* rel_part, T* pds,
                      T* scratch) {
  const int64_t HD = p.H * p.D;
  T* acc = scratch;
  dq_group<REL>(p, b, grp, acc, rel_part, pds, acc + kGsaCpuRowGroup * HD);
  for (int i = 0; i < grp.n; ++i) std::copy(acc + i * HD, acc + (i + 1) * HD, static_cast<T*>(dq_acc[i]));
}

template <typename T>
void dq_tile_pieces(const GsaParams& p, int64_t b, int n, const int64_t* u, const int64_t* e0, const int64_t* e1,
                    void* const* dq_acc, void* rel_part, void* pds, void* scratch) {
  const RowGroup grp = piece_group(n, u, e0, e1);
  T* part = static_cast<T*>(rel_part);
  T* cache = static_cast<T*>(pds);
  T* s = static_cast<T*>(scratch);
  if (p.rel_emb != nullptr) dq_tile_pieces_t<true>(p, b, grp, dq_acc, part, cache, s);
  else dq_tile_pieces_t<false>(p, b, grp, dq_acc, part, cache, s);
}

template <typename T>
void dq_piece(const GsaParams& p, int64_t b, int64_t u, int64_t e0, int64_t e1, void* dq_acc, void* rel_part,
              void* pds, void* scratch) {
  T* acc = static_cast<T*>(dq_acc);
  T* s = static_cast<T*>(scratch);
  std::fill(acc, acc + p.H * p.D, T(0));
  const RowGroup grp = single_row(u, e0, e1);
  T* part = static_cast<T*>(rel_part);
  T* cache = static_cast<T*>(pds);
  if (p.rel_emb != nullptr) dq_accumulate<true>(p, b, grp, acc, part, cache, s);
  else dq_accumulate<false>(p, b, grp, acc, part, cache, s);
}

// Destination rows of one segment of a source's transposed edges (padding as EdgeSeg).
template <typename T>
struct DestSeg {
  const T* q[kSegMax];
  const T* d_o[kSegMax];
  const T* r[kSegMax];
  int64_t row[kSegMax];   // (b * N + u) * H: the row's lse and delta
  int64_t edge[kSegMax];  // (b * E + e) * H * 2: the edge's entries in the edge cache
  int n = 0;
  void gather(const GsaParams& p, const In<T>& in, int64_t b, int64_t t, int count, int nl) {
    const GsaGraphView& g = p.graph;
    n = count;
    const int padded = (count + nl - 1) / nl * nl;
    for (int j = 0; j < padded; ++j) {
      const int64_t tj = t + (j < count ? j : j / nl * nl);
      const int64_t u = g.t_col[tj];
      q[j] = in.q + at(p.q_strides, b, u);
      d_o[j] = static_cast<const T*>(p.d_o) + at(p.d_o_strides, b, u);
      r[j] = in.rel != nullptr ? in.rel + g.rel[g.t_edge[tj]] * p.rel_stride : nullptr;
      row[j] = (b * p.N + u) * p.H;
      edge[j] = (b * g.n_edges + g.t_edge[tj]) * p.H * 2;
    }
  }
};

// Backward by source: adds the transposed edges of each source of the group (batch b) to its dk_acc (unscaled)
// and dv_acc [H, D] (source i's at + i*H*D), with P and dS read from the edge cache pds when given, else
// recomputed from q, k, v, dO, lse and delta.
template <bool REL, typename T>
void dkv_accumulate(const GsaParams& p, int64_t b, const RowGroup& grp, T* dk_acc, T* dv_acc, const T* pds) {
  const hn::ScalableTag<T> d;
  using V = hn::Vec<decltype(d)>;
  const int nl = static_cast<int>(hn::Lanes(d));
  const In<T> in(p);
  const int64_t H = p.H, D = p.D;
  const V scale = hn::Set(d, static_cast<T>(p.scale));
  const T* lse = static_cast<const T*>(p.lse);
  const T* delta = static_cast<const T*>(p.delta);
  DestSeg<T> segs[kGsaCpuRowGroup];
  HWY_ALIGN T lse_buf[kSegMax];
  HWY_ALIGN T delta_buf[kSegMax];
  HWY_ALIGN T ds[kSegMax];
  HWY_ALIGN T probs[kSegMax];
  for_group_segments(p, in, b, grp, nl * kSegChunks, nl, segs, [&](int64_t) {
    for (int64_t h = 0; h < H; ++h) {
      for (int i = 0; i < grp.n; ++i) {
        const DestSeg<T>& sg = segs[i];
        if (sg.n == 0) continue;
        if (pds != nullptr) {
          for (int j = 0; j < sg.n; ++j) {
            probs[j] = pds[sg.edge[j] + h * 2];
            ds[j] = pds[sg.edge[j] + h * 2 + 1];
          }
        } else {
          const T* k_v[1] = {in.k + at(p.k_strides, b, grp.u[i])};
          const T* v_v[1] = {in.v + at(p.v_strides, b, grp.u[i])};
          const int padded = (sg.n + nl - 1) / nl * nl;
          for (int j = 0; j < padded; ++j) {
            lse_buf[j] = lse[sg.row[j] + h];
            delta_buf[j] = delta[sg.row[j] + h];
          }
          for (int c = 0; c < sg.n; c += nl) {
            const auto valid = hn::FirstN(d, static_cast<size_t>(std::min(nl, sg.n - c)));
            const V sd = group_dot<kFixedB, REL>(d, sg.q + c, h * p.q_strides.head, k_v, h * p.k_strides.head,
                                                 sg.r + c, D);
            const V s = hn::IfThenElse(valid, hn::Mul(sd, scale), hn::Set(d, gsa_neg_inf<T>()));
            const V pr = vexp(d, hn::Sub(s, hn::Load(d, lse_buf + c)));
            const V dp = group_dot<kFixedB, false>(d, sg.d_o + c, h * p.d_o_strides.head, v_v,
                                                   h * p.v_strides.head, sg.r + c, D);
            hn::Store(hn::Mul(pr, hn::Sub(dp, hn::Load(d, delta_buf + c))), d, ds + c);
            hn::Store(pr, d, probs + c);
          }
        }
        group_axpy<false>(d, dk_acc + (i * H + h) * D, T(1), ds, sg.n, sg.q, h * p.q_strides.head, sg.q, D);
        group_axpy<false>(d, dv_acc + (i * H + h) * D, T(1), probs, sg.n, sg.d_o, h * p.d_o_strides.head, sg.d_o, D);
      }
    }
  });
}

// Backward by source as a register tile (see forward_tile): the group's sources walk the sorted union of their
// destinations, and each destination's q and dO rows, loaded once, serve every source of the group. P and dS come
// from the edge cache.
template <typename T>
void dkv_tile(const GsaParams& p, int64_t b, const RowGroup& grp, T* dk_acc, T* dv_acc, const T* pds) {
#if !(HWY_HAVE_SCALABLE || HWY_TARGET == HWY_SCALAR)
  const hn::ScalableTag<T> d;
  constexpr int N = static_cast<int>(hn::MaxLanes(decltype(d)()));
  constexpr int S = N * kSegChunks;
  const In<T> in(p);
  const GsaGraphView& g = p.graph;
  const int64_t H = p.H, Dm = p.D;
  const T* qp[S];
  const T* dop[S];
  int64_t eoff[S * kTileRows];  // (b * E + e) * H * 2 of (union destination j, source i); -1: no edge
  HWY_ALIGN T pw[S * kTileRows];
  HWY_ALIGN T dsw[S * kTileRows];
  const T ones[kTileRows] = {T(1), T(1), T(1), T(1)};
  TileUnion<S> un(grp, g.t_col);
  while (un.next(1)) {
    const int ns = un.n;
    for (int j = 0; j < ns; ++j) {
      qp[j] = in.q + at(p.q_strides, b, un.node[j]);
      dop[j] = static_cast<const T*>(p.d_o) + at(p.d_o_strides, b, un.node[j]);
    }
    for (int t = 0; t < ns * kTileRows; ++t) eoff[t] = un.at[t] < 0 ? -1 : (b * g.n_edges + g.t_edge[un.at[t]]) * H * 2;
    for (int64_t h = 0; h < H; ++h) {
      for (int t = 0; t < ns * kTileRows; ++t) {
        pw[t] = eoff[t] >= 0 ? pds[eoff[t] + h * 2] : T(0);
        dsw[t] = eoff[t] >= 0 ? pds[eoff[t] + h * 2 + 1] : T(0);
      }
      tile_axpy_rows(d, dk_acc + h * Dm, H * Dm, ones, dsw, ns, qp, h * p.q_strides.head, Dm);
      tile_axpy_rows(d, dv_acc + h * Dm, H * Dm, ones, pw, ns, dop, h * p.d_o_strides.head, Dm);
    }
  }
#else
  (void)p, (void)b, (void)grp, (void)dk_acc, (void)dv_acc, (void)pds;
#endif
}

#if !(HWY_HAVE_SCALABLE || HWY_TARGET == HWY_SCALAR)
constexpr int kPrefetchAhead = 16;  // edge-cache lines asked for ahead of their use

// Backward by source of a group of lanes sources as a wide tile (see forward_wide): the sources walk the union of
// their destinations, each segment's P and dS read from the edge cache for all heads at once (an edge's heads share
// a line), then per head dk^T += dS_j q_j and dv^T += P_j dO_j as wide_axpy over the destinations' rows, source i
// in lane i. Scratch: dk^T and dv^T [H][D][R] and a segment's P and dS [H][2][kWideSeg * R] (gsa_cpu_scratch_elems).
template <typename T>
bool dkv_wide(const GsaParams& p, int64_t b, const WideGroup<T>& grp, const T* pds, T* scratch) {
  const hn::ScalableTag<T> d;
  using Vec = hn::Vec<decltype(d)>;
  constexpr int N = static_cast<int>(hn::MaxLanes(decltype(d)()));
  constexpr int V = wide_vecs<T>();
  constexpr int R = V * N;
  constexpr int SR = kWideSeg * R;
  const In<T> in(p);
  const GsaGraphView& g = p.graph;
  const int64_t H = p.H, Dm = p.D, HDR = H * Dm * R;
  T* dkt = wide_scratch(scratch);  // [H][D][R]: unscaled dk transposed
  T* dvt = dkt + HDR;              // [H][D][R]
  T* seg = dvt + HDR;              // [H][2][kWideSeg * R]: P, then dS, of (destination j, source i) at j*R + i
  std::fill(dkt, dkt + 2 * HDR, T(0));
  const T* d_o = static_cast<const T*>(p.d_o);
  const T* qp[kWideSeg];
  const T* dop[kWideSeg];
  Vec ones[V];
  for (int v = 0; v < V; ++v) ones[v] = hn::Set(d, T(1));
  TileUnion<kWideSeg, R> un(grp, g.t_col);
  while (un.next(1)) {
    const int ns = un.n;
    for (int j = 0; j < ns; ++j) {
      qp[j] = in.q + at(p.q_strides, b, un.node[j]);
      dop[j] = d_o + at(p.d_o_strides, b, un.node[j]);
    }
    // The cache lines come in the transposed graph's order, scattered: a load was a quarter of this tile's time,
    // so the lines kPrefetchAhead edges on are asked for first.
    const auto line = [&](int t) { return pds + (b * g.n_edges + g.t_edge[un.at[t]]) * H * 2; };
    for (int t = 0; t < std::min(ns * R, kPrefetchAhead); ++t) {
      if (un.at[t] >= 0) hwy::Prefetch(line(t));
    }
    for (int t = 0; t < ns * R; ++t) {
      if (t + kPrefetchAhead < ns * R && un.at[t + kPrefetchAhead] >= 0) hwy::Prefetch(line(t + kPrefetchAhead));
      const T* cache = un.at[t] < 0 ? nullptr : line(t);
      for (int64_t h = 0; h < H; ++h) {
        seg[h * 2 * SR + t] = cache != nullptr ? cache[2 * h] : T(0);
        seg[(h * 2 + 1) * SR + t] = cache != nullptr ? cache[2 * h + 1] : T(0);
      }
    }
    for (int64_t h = 0; h < H; ++h) {
      wide_axpy_rows<V>(d, dkt + h * Dm * R, ones, seg + (h * 2 + 1) * SR, ns, qp, h * p.q_strides.head, Dm);
      wide_axpy_rows<V>(d, dvt + h * Dm * R, ones, seg + h * 2 * SR, ns, dop, h * p.d_o_strides.head, Dm);
    }
  }
  T* dk = static_cast<T*>(p.dk);
  T* dv = static_cast<T*>(p.dv);
  for (int i = 0; i < grp.n; ++i) {
    wide_row_out<R>(dkt, i, H, Dm, static_cast<T>(p.scale), dk + at(p.dk_strides, b, grp.u[i]), p.dk_strides.head);
    wide_row_out<R>(dvt, i, H, Dm, T(1), dv + at(p.dv_strides, b, grp.u[i]), p.dv_strides.head);
  }
  return true;
}
#else
template <typename T, class G>
bool dkv_wide(const GsaParams&, int64_t, const G&, const T*, T*) {
  return false;
}
#endif

// dk, dv of a group of sources into zeroed accumulators [kGsaCpuRowGroup][H][D] (dk unscaled): as one register tile
// where the edge cache is there and the group's union pays, else source by source.
template <bool REL, typename T>
void dkv_group(const GsaParams& p, int64_t b, const RowGroup& grp, T* dk_acc, T* dv_acc, const T* pds) {
  if (pds != nullptr && tile_union(hn::ScalableTag<T>(), p, grp, p.graph.t_col, kTileWaste, kDkvTileMinRow) > 0) {
    dkv_tile(p, b, grp, dk_acc, dv_acc, pds);
  } else {
    dkv_accumulate<REL>(p, b, grp, dk_acc, dv_acc, pds);
  }
}

template <bool REL, typename T>
void dkv_rows_t(const GsaParams& p, int64_t b, int64_t v0, int64_t v1, const uint8_t* skip, const T* pds,
                T* scratch) {
  const hn::ScalableTag<T> d;
  const int64_t H = p.H, D = p.D;
  T* dk_acc = scratch;
  T* dv_acc = dk_acc + kGsaCpuRowGroup * H * D;
  T* dk = static_cast<T*>(p.dk);
  T* dv = static_cast<T*>(p.dv);
  const auto four = [&](const RowGroup& grp) {
    std::fill(dk_acc, dk_acc + kGsaCpuRowGroup * H * D, T(0));  // all rows: the tile also runs missing ones
    std::fill(dv_acc, dv_acc + kGsaCpuRowGroup * H * D, T(0));
    dkv_group<REL>(p, b, grp, dk_acc, dv_acc, pds);
    for (int i = 0; i < grp.n; ++i) {
      T* dk_v = dk + at(p.dk_strides, b, grp.u[i]);
      T* dv_v = dv + at(p.dv_strides, b, grp.u[i]);
      for (int64_t h = 0; h < H; ++h) {
        scale_copy(d, dk_v + h * p.dk_strides.head, dk_acc + (i * H + h) * D, static_cast<T>(p.scale), D);
        scale_copy(d, dv_v + h * p.dv_strides.head, dv_acc + (i * H + h) * D, T(1), D);
      }
    }
  };
  if (pds == nullptr) {
    for_row_groups(p.graph.t_row_ptr, v0, v1, skip, four);
    return;
  }
  for_wide_groups<T>(
      p, v0, v1, skip, [&](const auto& wg, int64_t) { return dkv_wide(p, b, wg, pds, scratch); }, four, true);
}

template <typename T>
void dkv_rows(const GsaParams& p, int64_t b, int64_t v0, int64_t v1, const uint8_t* skip, const void* pds,
              void* scratch) {
  const T* cache = static_cast<const T*>(pds);
  if (p.rel_emb != nullptr) dkv_rows_t<true>(p, b, v0, v1, skip, cache, static_cast<T*>(scratch));
  else dkv_rows_t<false>(p, b, v0, v1, skip, cache, static_cast<T*>(scratch));
}

template <typename T>
void dkv_piece(const GsaParams& p, int64_t b, int64_t v, int64_t t0, int64_t t1, void* dk_acc, void* dv_acc,
               const void* pds, void*) {
  T* dk = static_cast<T*>(dk_acc);
  T* dv = static_cast<T*>(dv_acc);
  std::fill(dk, dk + p.H * p.D, T(0));
  std::fill(dv, dv + p.H * p.D, T(0));
  const RowGroup grp = single_row(v, t0, t1);
  const T* cache = static_cast<const T*>(pds);
  if (p.rel_emb != nullptr) dkv_accumulate<true>(p, b, grp, dk, dv, cache);
  else dkv_accumulate<false>(p, b, grp, dk, dv, cache);
}

// A column tile of the sources' plan: pieces of different sources over the same destinations, as one register
// tile when the edge cache is there (else source by source); dk_acc[i], dv_acc[i] as dkv_piece gives them.
template <typename T>
void dkv_tile_pieces(const GsaParams& p, int64_t b, int n, const int64_t* u, const int64_t* e0, const int64_t* e1,
                     void* const* dk_acc, void* const* dv_acc, const void* pds, void* scratch) {
  const RowGroup grp = piece_group(n, u, e0, e1);
  const int64_t HD = p.H * p.D;
  T* dk = static_cast<T*>(scratch);
  T* dv = dk + kGsaCpuRowGroup * HD;
  std::fill(dk, dv + kGsaCpuRowGroup * HD, T(0));  // all rows: the tile also runs missing ones
  const T* cache = static_cast<const T*>(pds);
  if (p.rel_emb != nullptr) dkv_group<true>(p, b, grp, dk, dv, cache);
  else dkv_group<false>(p, b, grp, dk, dv, cache);
  for (int i = 0; i < n; ++i) {
    std::copy(dk + i * HD, dk + (i + 1) * HD, static_cast<T*>(dk_acc[i]));
    std::copy(dv + i * HD, dv + (i + 1) * HD, static_cast<T*>(dv_acc[i]));
  }
}

template <typename T>
void exp_inplace(void* x, int64_t n) {
  const hn::ScalableTag<T> d;
  T* xt = static_cast<T*>(x);
  const int64_t nl = static_cast<int64_t>(hn::Lanes(d));
  int64_t i = 0;
  for (; i + nl <= n; i += nl) hn::StoreU(vexp(d, hn::LoadU(d, xt + i)), d, xt + i);
  if (i < n) {
    HWY_ALIGN T buf[kMaxLanes * 2] = {};
    std::memcpy(buf, xt + i, static_cast<size_t>(n - i) * sizeof(T));
    hn::Store(vexp(d, hn::Load(d, buf)), d, buf);
    std::memcpy(xt + i, buf, static_cast<size_t>(n - i) * sizeof(T));
  }
}

template <typename T>
constexpr GsaCpuCores cores_for() {
  return {forward_rows<T>, forward_piece<T>, delta_rows<T>, dq_rows<T>, dq_piece<T>, dkv_rows<T>, dkv_piece<T>,
          exp_inplace<T>, forward_groups<T>, forward_tile_pieces<T>, group_kind<T>, dq_tile_pieces<T>,
          dkv_tile_pieces<T>};
}

}  // namespace

const GsaCpuTargetCores* target_cores() {
  static const GsaCpuTargetCores cores{hwy::TargetName(HWY_TARGET), cores_for<float>(), cores_for<double>()};
  return &cores;
}

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace sb
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace sb {

HWY_EXPORT(target_cores);

GsaCpuTargetList gsa_cpu_runnable_targets() {
  GsaCpuTargetList list;
#if (HWY_TARGETS & (HWY_TARGETS - 1)) == 0
  list.cores[list.count++] = HWY_STATIC_DISPATCH(target_cores)();
#else
  // Lowest bit first: Highway numbers better targets with lower bits.
  for (int64_t left = hwy::SupportedTargets() & HWY_TARGETS; left != 0; left &= left - 1) {
    const int64_t target = left & -left;
    hwy::ChosenTarget one;  // a private chooser, so picking a target never changes Highway's global choice
    one.Update(target);
    list.cores[list.count++] = HWY_DISPATCH_TABLE(target_cores)[one.GetIndex()]();
  }
#endif
  return list;
}

}  // namespace sb
#endif  // HWY_ONCE
