// SIMD helpers of the CPU cores: exp, dot groups reduced by a fixed transpose tree, register-held axpy.
// A part of the CPU cores (kernels/gsa_cpu_simd.cpp), compiled once per SIMD target: Highway includes it
// inside foreach_target's loop, so its guard toggles with HWY_TARGET_TOGGLE instead of blocking a second pass.

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "kernels/gsa_cpu_kernels.h"
#include "kernels/gsa_math.h"
#include "kernels/gsa_split_plan.h"

#if defined(SB_KERNELS_CPU_GSA_SIMD_HELPERS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef SB_KERNELS_CPU_GSA_SIMD_HELPERS_INL_H_
#undef SB_KERNELS_CPU_GSA_SIMD_HELPERS_INL_H_
#else
#define SB_KERNELS_CPU_GSA_SIMD_HELPERS_INL_H_
#endif

#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace sb::HWY_NAMESPACE {
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

}  // namespace
}  // namespace sb::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // SB_KERNELS_CPU_GSA_SIMD_HELPERS_INL_H_ toggle
