// Shared by the CUDA kernel files: element loads and stores, warp and lane-group reductions, the schedule's
// task of a warp, and the host side of a launch (lane-group choice, grid sizes, the dispatch over D and dtype).
// Built only when CMake finds CUDA (SB_WITH_CUDA).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>

#include "common/error.h"
#include "kernels/cuda/gsa_cuda.h"
#include "kernels/gsa_math.h"

namespace sb {
namespace gsa_cuda {

constexpr int kWarp = 32;
constexpr int kWarpsPerBlock = 4;

// Element type <-> accumulation type
template <typename T> __device__ __forceinline__ typename GsaAcc<T>::type load(const T* p) { return *p; }
template <> __device__ __forceinline__ float load<__half>(const __half* p) { return __half2float(*p); }
template <> __device__ __forceinline__ float load<__nv_bfloat16>(const __nv_bfloat16* p) { return __bfloat162float(*p); }
template <typename T, typename A> __device__ __forceinline__ void store(T* p, A x) { *p = static_cast<T>(x); }
template <> __device__ __forceinline__ void store<__half, float>(__half* p, float x) { *p = __float2half(x); }
template <> __device__ __forceinline__ void store<__nv_bfloat16, float>(__nv_bfloat16* p, float x) {
  *p = __float2bfloat16(x);
}

template <typename A> __device__ __forceinline__ A warp_sum(A x) {
#pragma unroll
  for (int off = kWarp / 2; off > 0; off /= 2) x += __shfl_xor_sync(0xffffffffu, x, off);
  return x;
}

__device__ __forceinline__ int64_t offset(const GsaStrides& s, int64_t b, int64_t n, int64_t h) {
  return b * s.batch + n * s.node + h * s.head;
}

__device__ __forceinline__ int64_t global_warp() {
  return (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp;
}

// The (b, u, h) a warp works on in a pass over every row; false when the warp is past the end.
__device__ __forceinline__ bool warp_task(const GsaParams& p, int64_t& b, int64_t& u, int64_t& h) {
  const int64_t w = global_warp();
  if (w >= p.B * p.N * p.H) return false;
  h = w % p.H;
  u = (w / p.H) % p.N;
  b = w / (p.H * p.N);
  return true;
}

// One warp's share of a scheduled pass: edges [e0, e1) of row u (destination, or source in the transpose), for
// batch b and head h; piece >= 0 when they are one piece of a split row.
struct Task {
  int64_t b, u, h, e0, e1, piece;
  int lane;  // this thread's lane in the warp
};

// p's arrays as the kernels read them, cast once: q, k, v, rel_emb and d_o in the element type T, lse and delta in
// the accumulation type, and the softmax scale.
template <typename T>
struct Arrays {
  using A = typename GsaAcc<T>::type;
  const T* q;
  const T* k;
  const T* v;
  const T* rel_emb;
  const T* d_o;
  const A* lse;
  const A* delta;
  A scale;
  __device__ __forceinline__ explicit Arrays(const GsaParams& p)
      : q(static_cast<const T*>(p.q)), k(static_cast<const T*>(p.k)), v(static_cast<const T*>(p.v)),
        rel_emb(static_cast<const T*>(p.rel_emb)), d_o(static_cast<const T*>(p.d_o)),
        lse(static_cast<const A*>(p.lse)), delta(static_cast<const A*>(p.delta)), scale(static_cast<A>(p.scale)) {}
};

// Warps [0, n_pieces B H) take the pieces (the longest items, so they start first), then the unsplit rows
// heaviest first; heads fastest, then batches. Without a schedule (s.order null), every row in order.
__device__ __forceinline__ bool scheduled_task(const GsaParams& p, const GsaScheduleView& s, const int64_t* ptr,
                                               Task& t) {
  const int64_t w = global_warp();
  t.lane = threadIdx.x % kWarp;
  const bool scheduled = s.order != nullptr;
  const int64_t piece_tasks = scheduled ? s.n_pieces * p.B * p.H : 0;
  const int64_t rows = scheduled ? s.n_order : p.N;
  t.h = w % p.H;
  if (w < piece_tasks) {
    t.b = (w / p.H) % p.B;
    t.piece = w / (p.H * p.B);
    t.u = s.piece_row[t.piece];
    t.e0 = s.piece_begin[t.piece];
    t.e1 = s.piece_end[t.piece];
    return true;
  }
  const int64_t r = w - piece_tasks;
  if (r >= rows * p.B * p.H) return false;
  t.b = (r / p.H) % p.B;
  const int64_t i = r / (p.H * p.B);
  t.u = scheduled ? s.order[i] : i;
  t.e0 = ptr[t.u];
  t.e1 = ptr[t.u + 1];
  t.piece = -1;
  return true;
}

// A warp kernel's share of a scheduled pass: the warp's Task and p's arrays (Arrays).
template <typename T>
struct WarpTask : Task, Arrays<T> {
  __device__ __forceinline__ explicit WarpTask(const GsaParams& p) : Arrays<T>(p) {}
  // Takes the warp's task of pass s (ptr: its CSR row pointers); false when the warp is past the pass's end.
  __device__ __forceinline__ bool take(const GsaParams& p, const GsaScheduleView& s, const int64_t* ptr) {
    return scheduled_task(p, s, ptr, *this);
  }
};

// The forward's lse and the backward's delta of row u of batch b and head h.
template <typename A>
struct RowStats {
  A lse, delta;
};
template <typename A>
__device__ __forceinline__ RowStats<A> row_stats(const GsaParams& p, const A* lse, const A* delta, int64_t b, int64_t u,
                                                 int64_t h) {
  const int64_t row = (b * p.N + u) * p.H + h;
  return {lse[row], delta[row]};
}

// The split row a merge warp works on (the i-th of s, row u, its pieces [c0, c1)), for batch b and head h; false past
// the end.
struct MergeTask {
  int64_t i, u, c0, c1, b, h;
  int lane;  // this thread's lane in the warp
};
__device__ __forceinline__ bool merge_task(const GsaParams& p, const GsaScheduleView& s, MergeTask& t) {
  const int64_t w = global_warp();
  t.lane = threadIdx.x % kWarp;
  if (w >= s.n_split * p.B * p.H) return false;
  t.h = w % p.H;
  t.b = (w / p.H) % p.B;
  t.i = w / (p.H * p.B);
  t.u = s.split_rows[t.i];
  t.c0 = s.piece_ptr[t.i];
  t.c1 = s.piece_ptr[t.i + 1];
  return true;
}

// Loads D values at x (lane holds d = lane + 32 i), zero past D.
template <int P, typename T, typename A>
__device__ __forceinline__ void load_row(A (&dst)[P], const T* x, int64_t D, int lane) {
#pragma unroll
  for (int i = 0; i < P; ++i) {
    const int64_t d = lane + kWarp * i;
    dst[i] = d < D ? load(x + d) : A(0);
  }
}

// score of one edge: (a . (k + r)) * scale over the warp
template <int P, typename T, typename A>
__device__ __forceinline__ A edge_score(const A (&a)[P], const T* k, const T* r, int64_t D, int lane, A scale) {
  A part = 0;
#pragma unroll
  for (int i = 0; i < P; ++i) {
    const int64_t d = lane + kWarp * i;
    if (d < D) part += a[i] * (load(k + d) + (r != nullptr ? load(r + d) : A(0)));
  }
  return warp_sum(part) * scale;
}

template <int P, typename T, typename A>
__device__ __forceinline__ A warp_dot(const A (&a)[P], const T* x, int64_t D, int lane) {
  A part = 0;
#pragma unroll
  for (int i = 0; i < P; ++i) {
    const int64_t d = lane + kWarp * i;
    if (d < D) part += a[i] * load(x + d);
  }
  return warp_sum(part);
}

// Stores x * scale to the D values at out (lane holds d = lane + 32 i).
template <int P, typename T, typename A>
__device__ __forceinline__ void store_row(T* out, const A (&x)[P], A scale, int64_t D, int lane) {
#pragma unroll
  for (int i = 0; i < P; ++i) {
    const int64_t d = lane + kWarp * i;
    if (d < D) store(out + d, x[i] * scale);
  }
}

// A finished row's o = acc / l and its lse.
template <int P, typename T, typename A>
__device__ __forceinline__ void finish_row(const GsaParams& p, int64_t b, int64_t u, int64_t h,
                                           const GsaSoftmaxState<A>& st, const A (&acc)[P], int lane) {
  store_row<P>(static_cast<T*>(p.o) + offset(p.o_strides, b, u, h), acc, gsa_inv_norm(st), p.D, lane);
  if (lane == 0) static_cast<A*>(p.lse)[(b * p.N + u) * p.H + h] = gsa_lse(st);
}

// ---- Lane-group kernels: L lanes per edge, each loading 16 bytes (V values) of a row at once, so a warp works on
// G = 32 / L edges together (D = L V: bf16/fp16 D = 64 gives 8 lanes and 4 edges). The warp-per-edge kernels above
// load 2 or 4 bytes per lane and reduce every dot over 32 lanes; these issue one 16-byte load per lane and row and
// reduce over L lanes. Each group keeps its own partial state for its edges (e0 + g, e0 + g + G, ...), merged
// across groups at the end in a fixed butterfly order, so results stay bitwise identical from run to run. Used
// when D = L V for L in 2..32 and every row starts on 16 bytes (group_lanes); fp64 keeps the warp kernels.

template <typename T> constexpr int kVec = 16 / static_cast<int>(sizeof(T));

// The packed pair of a half type and its conversions to and from two floats.
template <typename T> struct HalfPair;
template <> struct HalfPair<__half> {
  using type = __half2;
  static __device__ __forceinline__ float2 unpack(type x) { return __half22float2(x); }
  static __device__ __forceinline__ type pack(float a, float b) { return __floats2half2_rn(a, b); }
};
template <> struct HalfPair<__nv_bfloat16> {
  using type = __nv_bfloat162;
  static __device__ __forceinline__ float2 unpack(type x) { return __bfloat1622float2(x); }
  static __device__ __forceinline__ type pack(float a, float b) { return __floats2bfloat162_rn(a, b); }
};

// Loads the V values at p (16 bytes): a half type as four packed pairs.
template <typename T> __device__ __forceinline__ void load_vec(float (&x)[kVec<T>], const T* p) {
  const uint4 u = *reinterpret_cast<const uint4*>(p);
  const auto* h2 = reinterpret_cast<const typename HalfPair<T>::type*>(&u);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = HalfPair<T>::unpack(h2[i]);
    x[2 * i] = f.x;
    x[2 * i + 1] = f.y;
  }
}
template <> __device__ __forceinline__ void load_vec<float>(float (&x)[4], const float* p) {
  const float4 f = *reinterpret_cast<const float4*>(p);
  x[0] = f.x; x[1] = f.y; x[2] = f.z; x[3] = f.w;
}

// Stores x * scale to the V values at p (16 bytes).
template <typename T> __device__ __forceinline__ void store_vec(T* p, const float (&x)[kVec<T>], float scale) {
  uint4 u;
  auto* h2 = reinterpret_cast<typename HalfPair<T>::type*>(&u);
#pragma unroll
  for (int i = 0; i < 4; ++i) h2[i] = HalfPair<T>::pack(x[2 * i] * scale, x[2 * i + 1] * scale);
  *reinterpret_cast<uint4*>(p) = u;
}
template <> __device__ __forceinline__ void store_vec<float>(float* p, const float (&x)[4], float scale) {
  *reinterpret_cast<float4*>(p) = make_float4(x[0] * scale, x[1] * scale, x[2] * scale, x[3] * scale);
}

// Sum over the L lanes of a group (lanes differ in their low log2 L bits).
template <int L> __device__ __forceinline__ float group_sum(float x) {
#pragma unroll
  for (int off = L / 2; off > 0; off /= 2) x += __shfl_xor_sync(0xffffffffu, x, off);
  return x;
}

// The score and dP dots of a step's U edges, each summed over the L lanes of its group.
template <int L, int U> __device__ __forceinline__ void group_sums(float (&score)[U], float (&dp)[U]) {
#pragma unroll
  for (int j = 0; j < U; ++j) {
    score[j] = group_sum<L>(score[j]);
    dp[j] = group_sum<L>(dp[j]);
  }
}

// Sum over the G groups of the values each lane holds for its slice of D: afterwards every lane holds the sum.
template <int L, int V> __device__ __forceinline__ void across_groups(float (&x)[V]) {
#pragma unroll
  for (int off = L; off < kWarp; off *= 2) {
#pragma unroll
    for (int i = 0; i < V; ++i) x[i] += __shfl_xor_sync(0xffffffffu, x[i], off);
  }
}

template <int V> __device__ __forceinline__ float dot(const float (&a)[V], const float (&b)[V]) {
  float s = 0;
#pragma unroll
  for (int i = 0; i < V; ++i) s += a[i] * b[i];
  return s;
}

// A lane-group kernel's share of a scheduled pass: the warp's Task; this lane's group g (edges e0 + g, e0 + g + G, ...)
// and the first value d0 of its slice of D; and p's arrays at the task's batch and head, so row n of x is at
// x + n * strides.node: q, v and d_o already at d0, k not (key_slice adds d0 after the edge's relation row); lse and
// delta [B, N, H] and the softmax scale.
template <int L, typename T>
struct GroupTask : Task {
  static constexpr int V = kVec<T>, G = kWarp / L;
  int g, d0;
  const T* q;
  const T* k;
  const T* v;
  const T* d_o;  // null in the forward
  const float* lse;
  const float* delta;
  float scale;
  // Takes the warp's task of pass s (ptr: its CSR row pointers); false when the warp is past the pass's end.
  __device__ __forceinline__ bool take(const GsaParams& p, const GsaScheduleView& s, const int64_t* ptr) {
    if (!scheduled_task(p, s, ptr, *this)) return false;
    g = lane / L;
    d0 = (lane % L) * V;
    q = static_cast<const T*>(p.q) + offset(p.q_strides, b, 0, h) + d0;
    k = static_cast<const T*>(p.k) + offset(p.k_strides, b, 0, h);
    v = static_cast<const T*>(p.v) + offset(p.v_strides, b, 0, h) + d0;
    d_o = p.d_o != nullptr ? static_cast<const T*>(p.d_o) + offset(p.d_o_strides, b, 0, h) + d0 : nullptr;
    lse = static_cast<const float*>(p.lse);
    delta = static_cast<const float*>(p.delta);
    scale = static_cast<float>(p.scale);
    return true;
  }
};

// This lane's V values of k_src (+ the edge's relation row); relation rows start on 16 bytes (rel_stride % V == 0).
template <typename T>
__device__ __forceinline__ void key_slice(float (&kr)[kVec<T>], const GsaParams& p, const T* k_src, int64_t e,
                                          int d0) {
  load_vec<T>(kr, k_src + d0);
  if (p.rel_emb != nullptr) {
    float r[kVec<T>];
    load_vec<T>(r, static_cast<const T*>(p.rel_emb) + p.graph.rel[e] * p.rel_stride + d0);
#pragma unroll
    for (int i = 0; i < kVec<T>; ++i) kr[i] += r[i];
  }
}

// Edge j of group g's step at base (base + g + j G), or the row's last edge when that lies past e1: every load
// stays in bounds without a branch, and `valid` says whether the edge counts.
template <int G>
__device__ __forceinline__ int64_t step_edge(int64_t base, int g, int j, int64_t e1, bool& valid) {
  const int64_t e = base + g + j * G;
  valid = e < e1;
  return valid ? e : e1 - 1;
}

// Edges per group and step (e, e + G, ...), their loads all issued before the first reduction: more requests in
// flight per warp, but more registers, so fewer warps. Measured with ncu on an H200 (bpt k=4, n=16384, bf16): two
// edges made dq 14% faster and the forward 9% slower, and left dk, dv as they were, so only dq takes two.
constexpr int kForwardUnroll = 1;
constexpr int kDqUnroll = 2;
constexpr int kDkvUnroll = 1;

inline void check_launch(const char* what) {
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) throw Error(std::string(what) + ": CUDA error: " + cudaGetErrorString(err));
}

inline bool scheduled(const GsaScheduleView& s) { return s.order != nullptr; }

inline int64_t acc_bytes(const GsaParams& p) { return p.dtype == GsaDtype::f64 ? 8 : 4; }

// Blocks of a scheduled pass (pieces and rows) and of a merge pass over `s`.
inline unsigned blocks_for_warps(int64_t warps) {
  return static_cast<unsigned>(std::max<int64_t>(1, (warps + kWarpsPerBlock - 1) / kWarpsPerBlock));
}
inline unsigned scheduled_blocks(const GsaParams& p, const GsaScheduleView& s) {
  const int64_t items = scheduled(s) ? s.n_pieces + s.n_order : p.N;
  return blocks_for_warps(items * p.B * p.H);
}
inline unsigned merge_blocks(const GsaParams& p, const GsaScheduleView& s) { return blocks_for_warps(s.n_split * p.B * p.H); }
inline bool has_merges(const GsaScheduleView& s) { return scheduled(s) && s.n_split > 0; }

constexpr unsigned kThreads = kWarp * kWarpsPerBlock;

inline bool aligned16(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }
inline bool rows_aligned(const void* ptr, const GsaStrides& s, int64_t V) {
  return aligned16(ptr) && s.batch % V == 0 && s.node % V == 0 && s.head % V == 0;
}

// Lanes per edge of the lane-group kernels for p (0: they do not apply, the warp kernels run).
inline int group_lanes(const GsaParams& p, bool backward, GsaCudaKernels kernels) {
  if (kernels != GsaCudaKernels::lane_groups || p.dtype == GsaDtype::f64) return 0;
  const int64_t V = p.dtype == GsaDtype::f32 ? 4 : 8;
  const int64_t L = p.D / V;
  if (p.D % V != 0 || L < 2 || L > kWarp || (L & (L - 1)) != 0) return 0;
  bool ok = rows_aligned(p.q, p.q_strides, V) && rows_aligned(p.k, p.k_strides, V) &&
            rows_aligned(p.v, p.v_strides, V) && rows_aligned(p.o, p.o_strides, V) &&
            (p.rel_emb == nullptr || (aligned16(p.rel_emb) && p.rel_stride % V == 0));
  if (backward) {
    ok = ok && rows_aligned(p.d_o, p.d_o_strides, V) && rows_aligned(p.dq, p.dq_strides, V) &&
         rows_aligned(p.dk, p.dk_strides, V) && rows_aligned(p.dv, p.dv_strides, V);
  }
  return ok ? static_cast<int>(L) : 0;
}

// Launches through f(std::integral_constant<int, L>) for lanes = L > 0 and element type T; false (nothing launched,
// the warp kernels' turn) for lanes = 0 and for fp64, which has no lane-group kernels.
template <typename T, typename F>
bool with_lanes(int lanes, F&& f) {
  if constexpr (std::is_same_v<T, double>) {
    return false;
  } else {
    switch (lanes) {
      case 0: return false;
      case 2: f(std::integral_constant<int, 2>{}); break;
      case 4: f(std::integral_constant<int, 4>{}); break;
      case 8: f(std::integral_constant<int, 8>{}); break;
      case 16: f(std::integral_constant<int, 16>{}); break;
      default: f(std::integral_constant<int, 32>{}); break;
    }
    return true;
  }
}

// A type as a value, for the generic lambdas dispatch calls: decltype(tag)::type.
template <typename T>
struct TypeTag {
  using type = T;
};

// Calls launch(std::integral_constant<int, P>, TypeTag<T>) with P = values per lane for p.D and T the element type.
template <class F>
void dispatch(const GsaParams& p, F&& launch) {
  if (p.D > kGsaCudaMaxD || p.D < 1) {
    throw Error("graph_attention on CUDA: head dimension D = " + std::to_string(p.D) + " not supported (1 to " +
                std::to_string(kGsaCudaMaxD) + ")");
  }
  auto by_dtype = [&](auto per_lane) {
    switch (p.dtype) {
      case GsaDtype::f32: launch(per_lane, TypeTag<float>{}); break;
      case GsaDtype::f64: launch(per_lane, TypeTag<double>{}); break;
      case GsaDtype::f16: launch(per_lane, TypeTag<__half>{}); break;
      case GsaDtype::bf16: launch(per_lane, TypeTag<__nv_bfloat16>{}); break;
    }
  };
  if (p.D <= 32) {
    by_dtype(std::integral_constant<int, 1>{});
  } else if (p.D <= 64) {
    by_dtype(std::integral_constant<int, 2>{});
  } else if (p.D <= 128) {
    by_dtype(std::integral_constant<int, 4>{});
  } else {
    by_dtype(std::integral_constant<int, 8>{});
  }
}

}  // namespace gsa_cuda
}  // namespace sb
