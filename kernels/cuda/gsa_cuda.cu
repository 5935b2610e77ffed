// CUDA graph self-attention kernels: a warp per (batch, row, head) over a prepared graph's schedule (rows of many
// edges cut into pieces merged in a fixed order, the Flash-Decoding split; the other rows heaviest first); forward
// with an online softmax, backward by destination (dq) and by source through the transposed graph (dk, dv), no
// atomics, and d(rel_emb) by relation over a saved per-edge dS, in slices summed in a fixed order. Built only when
// CMake finds CUDA (SB_WITH_CUDA).
//
// A warp keeps D / 32 values per lane in registers; fp32 accumulation for fp32/fp16/bf16, fp64 for fp64.
#include "kernels/cuda/gsa_cuda.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>

#include "kernels/gsa_math.h"
#include "common/error.h"

namespace sb {

namespace {

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
};

// Warps [0, n_pieces B H) take the pieces (the longest items, so they start first), then the unsplit rows
// heaviest first; heads fastest, then batches. Without a schedule (s.order null), every row in order.
__device__ __forceinline__ bool scheduled_task(const GsaParams& p, const GsaScheduleView& s, const int64_t* ptr,
                                               Task& t) {
  const int64_t w = global_warp();
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

// The (split row i, b, h) a merge warp works on; false past the end.
__device__ __forceinline__ bool merge_task(const GsaParams& p, const GsaScheduleView& s, int64_t& i, int64_t& b,
                                           int64_t& h) {
  const int64_t w = global_warp();
  if (w >= s.n_split * p.B * p.H) return false;
  h = w % p.H;
  b = (w / p.H) % p.B;
  i = w / (p.H * p.B);
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

// Forward of scheduled tasks: a whole row writes o and lse; a piece its unnormalised state into
// pieces [n_pieces, B, H, D + 2] (acc, then m and l), merged by forward_merge_kernel.
template <int P, typename T>
__global__ void forward_kernel(GsaParams p, typename GsaAcc<T>::type* pieces) {
  using A = typename GsaAcc<T>::type;
  Task t;
  if (!scheduled_task(p, p.graph.rows, p.graph.row_ptr, t)) return;
  const int64_t b = t.b, u = t.u, h = t.h;
  const int lane = threadIdx.x % kWarp;
  const T* q = static_cast<const T*>(p.q);
  const T* k = static_cast<const T*>(p.k);
  const T* v = static_cast<const T*>(p.v);
  const T* rel_emb = static_cast<const T*>(p.rel_emb);
  const A scale = static_cast<A>(p.scale);
  A qr[P], acc[P];
  load_row<P>(qr, q + offset(p.q_strides, b, u, h), p.D, lane);
#pragma unroll
  for (int i = 0; i < P; ++i) acc[i] = 0;
  GsaSoftmaxState<A> st = gsa_softmax_init<A>();
  for (int64_t e = t.e0; e < t.e1; ++e) {
    const int64_t src = p.graph.col[e];
    const T* r = rel_emb != nullptr ? rel_emb + p.graph.rel[e] * p.rel_stride : nullptr;
    const GsaPush<A> f = gsa_push(st, edge_score<P>(qr, k + offset(p.k_strides, b, src, h), r, p.D, lane, scale));
    const T* v_src = v + offset(p.v_strides, b, src, h);
#pragma unroll
    for (int i = 0; i < P; ++i) {
      const int64_t d = lane + kWarp * i;
      acc[i] = acc[i] * f.alpha + (d < p.D ? f.weight * load(v_src + d) : A(0));
    }
  }
  if (t.piece < 0) {
    finish_row<P, T>(p, b, u, h, st, acc, lane);
    return;
  }
  A* out = pieces + ((t.piece * p.B + b) * p.H + h) * (p.D + 2);
  store_row<P>(out, acc, A(1), p.D, lane);
  if (lane == 0) {
    out[p.D] = st.m;
    out[p.D + 1] = st.l;
  }
}

// A split row's o and lse from its pieces' states, in piece order (the CPU kernels' merge).
template <int P, typename T>
__global__ void forward_merge_kernel(GsaParams p, const typename GsaAcc<T>::type* pieces) {
  using A = typename GsaAcc<T>::type;
  const GsaScheduleView& s = p.graph.rows;
  int64_t i, b, h;
  if (!merge_task(p, s, i, b, h)) return;
  const int lane = threadIdx.x % kWarp;
  const int64_t u = s.split_rows[i], c0 = s.piece_ptr[i], c1 = s.piece_ptr[i + 1];
  const int64_t stride = p.B * p.H * (p.D + 2);
  const A* first = pieces + (c0 * p.B * p.H + b * p.H + h) * (p.D + 2);
  GsaSoftmaxState<A> st = gsa_softmax_init<A>();
  for (int64_t c = 0; c < c1 - c0; ++c) {
    const A m = first[c * stride + p.D];
    st.m = m > st.m ? m : st.m;
  }
  A acc[P];
#pragma unroll
  for (int k = 0; k < P; ++k) acc[k] = 0;
  for (int64_t c = 0; c < c1 - c0; ++c) {
    const A* pc = first + c * stride;
    const A alpha = gsa_rescale(pc[p.D], st.m);
    st.l += alpha * pc[p.D + 1];
#pragma unroll
    for (int k = 0; k < P; ++k) {
      const int64_t d = lane + kWarp * k;
      if (d < p.D) acc[k] += alpha * pc[d];
    }
  }
  finish_row<P, T>(p, b, u, h, st, acc, lane);
}

// delta = dO . O per (b, u, h)
template <int P, typename T>
__global__ void delta_kernel(GsaParams p) {
  using A = typename GsaAcc<T>::type;
  int64_t b, u, h;
  if (!warp_task(p, b, u, h)) return;
  const int lane = threadIdx.x % kWarp;
  A d_o[P];
  load_row<P>(d_o, static_cast<const T*>(p.d_o) + offset(p.d_o_strides, b, u, h), p.D, lane);
  const A delta = warp_dot<P>(d_o, static_cast<const T*>(p.o) + offset(p.o_strides, b, u, h), p.D, lane);
  if (lane == 0) static_cast<A*>(p.delta)[(b * p.N + u) * p.H + h] = delta;
}

// Where the backward's scratch lives (element offsets into the workspace, in the accumulation type): each edge's
// dS [B, E, H] and the d_rel_emb slice sums [R, slices, D] (with rel_emb), the row pieces' dq [P_rows, B, H, D]
// and the source pieces' dk, dv [P_srcs, B, H, 2 D].
struct BackwardLayout {
  int64_t edge_ds = 0, drel = 0, dq_pieces = 0, dkv_pieces = 0, total = 0;
};

// dq of scheduled tasks: a whole row stores scale * dq, a piece its unscaled sum into dq_pieces (merged by
// dq_merge_kernel); with rel_emb each edge's dS goes to edge_ds [B, E, H].
template <int P, typename T>
__global__ void dq_kernel(GsaParams p, typename GsaAcc<T>::type* edge_ds, typename GsaAcc<T>::type* dq_pieces) {
  using A = typename GsaAcc<T>::type;
  Task t;
  if (!scheduled_task(p, p.graph.rows, p.graph.row_ptr, t)) return;
  const int64_t b = t.b, u = t.u, h = t.h;
  const int lane = threadIdx.x % kWarp;
  const T* k = static_cast<const T*>(p.k);
  const T* v = static_cast<const T*>(p.v);
  const T* rel_emb = static_cast<const T*>(p.rel_emb);
  const A scale = static_cast<A>(p.scale);
  const int64_t row = (b * p.N + u) * p.H + h;
  const A lse = static_cast<const A*>(p.lse)[row];
  const A delta = static_cast<const A*>(p.delta)[row];
  A qr[P], d_o[P], dq[P];
  load_row<P>(qr, static_cast<const T*>(p.q) + offset(p.q_strides, b, u, h), p.D, lane);
  load_row<P>(d_o, static_cast<const T*>(p.d_o) + offset(p.d_o_strides, b, u, h), p.D, lane);
#pragma unroll
  for (int i = 0; i < P; ++i) dq[i] = 0;
  for (int64_t e = t.e0; e < t.e1; ++e) {
    const int64_t src = p.graph.col[e];
    const T* r = rel_emb != nullptr ? rel_emb + p.graph.rel[e] * p.rel_stride : nullptr;
    const T* k_src = k + offset(p.k_strides, b, src, h);
    const A pr = gsa_prob(edge_score<P>(qr, k_src, r, p.D, lane, scale), lse);
    const A ds = gsa_dscore(pr, warp_dot<P>(d_o, v + offset(p.v_strides, b, src, h), p.D, lane), delta);
#pragma unroll
    for (int i = 0; i < P; ++i) {
      const int64_t d = lane + kWarp * i;
      if (d < p.D) dq[i] += ds * (load(k_src + d) + (r != nullptr ? load(r + d) : A(0)));
    }
    if (edge_ds != nullptr && lane == 0) edge_ds[(b * p.graph.n_edges + e) * p.H + h] = ds;
  }
  if (t.piece >= 0) {
    store_row<P>(dq_pieces + ((t.piece * p.B + b) * p.H + h) * p.D, dq, A(1), p.D, lane);
  } else {
    store_row<P>(static_cast<T*>(p.dq) + offset(p.dq_strides, b, u, h), dq, scale, p.D, lane);
  }
}

// dk, dv of scheduled tasks over sources (the transposed graph): a whole source stores them, a piece its sums into
// dkv_pieces (dk unscaled, then dv), merged by dkv_merge_kernel.
template <int P, typename T>
__global__ void dkv_kernel(GsaParams p, typename GsaAcc<T>::type* dkv_pieces) {
  using A = typename GsaAcc<T>::type;
  Task t;
  if (!scheduled_task(p, p.graph.srcs, p.graph.t_row_ptr, t)) return;
  const int64_t b = t.b, src = t.u, h = t.h;
  const int lane = threadIdx.x % kWarp;
  const T* q = static_cast<const T*>(p.q);
  const T* d_o = static_cast<const T*>(p.d_o);
  const T* rel_emb = static_cast<const T*>(p.rel_emb);
  const A* lse = static_cast<const A*>(p.lse);
  const A* delta = static_cast<const A*>(p.delta);
  const A scale = static_cast<A>(p.scale);
  const T* k_src = static_cast<const T*>(p.k) + offset(p.k_strides, b, src, h);
  A vr[P], dk[P], dv[P];
  load_row<P>(vr, static_cast<const T*>(p.v) + offset(p.v_strides, b, src, h), p.D, lane);
#pragma unroll
  for (int i = 0; i < P; ++i) dk[i] = dv[i] = 0;
  for (int64_t j = t.e0; j < t.e1; ++j) {
    const int64_t u = p.graph.t_col[j];
    const int64_t e = p.graph.t_edge[j];
    const int64_t row = (b * p.N + u) * p.H + h;
    const T* r = rel_emb != nullptr ? rel_emb + p.graph.rel[e] * p.rel_stride : nullptr;
    A qu[P], dou[P];
    load_row<P>(qu, q + offset(p.q_strides, b, u, h), p.D, lane);
    load_row<P>(dou, d_o + offset(p.d_o_strides, b, u, h), p.D, lane);
    const A pr = gsa_prob(edge_score<P>(qu, k_src, r, p.D, lane, scale), lse[row]);
    A dp_part = 0;
#pragma unroll
    for (int i = 0; i < P; ++i) dp_part += dou[i] * vr[i];
    const A ds = gsa_dscore(pr, warp_sum(dp_part), delta[row]);
#pragma unroll
    for (int i = 0; i < P; ++i) {
      dk[i] += ds * qu[i];
      dv[i] += pr * dou[i];
    }
  }
  if (t.piece >= 0) {
    A* out = dkv_pieces + ((t.piece * p.B + b) * p.H + h) * 2 * p.D;
    store_row<P>(out, dk, A(1), p.D, lane);
    store_row<P>(out + p.D, dv, A(1), p.D, lane);
  } else {
    store_row<P>(static_cast<T*>(p.dk) + offset(p.dk_strides, b, src, h), dk, scale, p.D, lane);
    store_row<P>(static_cast<T*>(p.dv) + offset(p.dv_strides, b, src, h), dv, A(1), p.D, lane);
  }
}

// Sum over the pieces of split row i, in piece order, of `width` values per (piece, b, h) starting at `first`.
template <int P, typename A>
__device__ __forceinline__ void sum_pieces(A (&sum)[P], const A* first, int64_t n, int64_t stride, int64_t D,
                                           int lane) {
#pragma unroll
  for (int k = 0; k < P; ++k) sum[k] = 0;
  for (int64_t c = 0; c < n; ++c) {
#pragma unroll
    for (int k = 0; k < P; ++k) {
      const int64_t d = lane + kWarp * k;
      if (d < D) sum[k] += first[c * stride + d];
    }
  }
}

template <int P, typename T>
__global__ void dq_merge_kernel(GsaParams p, const typename GsaAcc<T>::type* dq_pieces) {
  using A = typename GsaAcc<T>::type;
  const GsaScheduleView& s = p.graph.rows;
  int64_t i, b, h;
  if (!merge_task(p, s, i, b, h)) return;
  const int lane = threadIdx.x % kWarp;
  const int64_t c0 = s.piece_ptr[i];
  A dq[P];
  sum_pieces<P>(dq, dq_pieces + ((c0 * p.B + b) * p.H + h) * p.D, s.piece_ptr[i + 1] - c0, p.B * p.H * p.D, p.D,
                lane);
  store_row<P>(static_cast<T*>(p.dq) + offset(p.dq_strides, b, s.split_rows[i], h), dq, static_cast<A>(p.scale), p.D,
               lane);
}

template <int P, typename T>
__global__ void dkv_merge_kernel(GsaParams p, const typename GsaAcc<T>::type* dkv_pieces) {
  using A = typename GsaAcc<T>::type;
  const GsaScheduleView& s = p.graph.srcs;
  int64_t i, b, h;
  if (!merge_task(p, s, i, b, h)) return;
  const int lane = threadIdx.x % kWarp;
  const int64_t c0 = s.piece_ptr[i], n = s.piece_ptr[i + 1] - c0, stride = p.B * p.H * 2 * p.D;
  const A* first = dkv_pieces + ((c0 * p.B + b) * p.H + h) * 2 * p.D;
  A dk[P], dv[P];
  sum_pieces<P>(dk, first, n, stride, p.D, lane);
  sum_pieces<P>(dv, first + p.D, n, stride, p.D, lane);
  const int64_t src = s.split_rows[i];
  store_row<P>(static_cast<T*>(p.dk) + offset(p.dk_strides, b, src, h), dk, static_cast<A>(p.scale), p.D, lane);
  store_row<P>(static_cast<T*>(p.dv) + offset(p.dv_strides, b, src, h), dv, A(1), p.D, lane);
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

template <int L, typename T>
__global__ void forward_group_kernel(GsaParams p, float* pieces) {
  constexpr int V = kVec<T>, G = kWarp / L, U = kForwardUnroll;
  Task t;
  if (!scheduled_task(p, p.graph.rows, p.graph.row_ptr, t)) return;
  const int64_t b = t.b, u = t.u, h = t.h;
  const int lane = threadIdx.x % kWarp, g = lane / L, d0 = (lane % L) * V;
  const T* k = static_cast<const T*>(p.k) + offset(p.k_strides, b, 0, h);
  const T* v = static_cast<const T*>(p.v) + offset(p.v_strides, b, 0, h) + d0;
  const float scale = static_cast<float>(p.scale);
  float qr[V], acc[V];
  load_vec<T>(qr, static_cast<const T*>(p.q) + offset(p.q_strides, b, u, h) + d0);
#pragma unroll
  for (int i = 0; i < V; ++i) acc[i] = 0;
  GsaSoftmaxState<float> st = gsa_softmax_init<float>();
  for (int64_t base = t.e0; base < t.e1; base += G * U) {
    bool valid[U];
    float s[U], kr[U][V], vr[U][V];
#pragma unroll
    for (int j = 0; j < U; ++j) {
      const int64_t e = step_edge<G>(base, g, j, t.e1, valid[j]);
      const int64_t src = p.graph.col[e];
      key_slice<T>(kr[j], p, k + src * p.k_strides.node, e, d0);
      load_vec<T>(vr[j], v + src * p.v_strides.node);
    }
#pragma unroll
    for (int j = 0; j < U; ++j) s[j] = dot(qr, kr[j]);
#pragma unroll
    for (int j = 0; j < U; ++j) s[j] = group_sum<L>(s[j]) * scale;
    float w[U];
    const float alpha = gsa_push_block<U>(st, s, valid, w);
#pragma unroll
    for (int i = 0; i < V; ++i) {
      float x = acc[i] * alpha;
#pragma unroll
      for (int j = 0; j < U; ++j) x += valid[j] ? w[j] * vr[j][i] : 0.0f;
      acc[i] = x;
    }
  }
#pragma unroll
  for (int off = L; off < kWarp; off *= 2) {
    const GsaSoftmaxState<float> other{__shfl_xor_sync(0xffffffffu, st.m, off),
                                       __shfl_xor_sync(0xffffffffu, st.l, off)};
    float acc_other[V];
#pragma unroll
    for (int i = 0; i < V; ++i) acc_other[i] = __shfl_xor_sync(0xffffffffu, acc[i], off);
    const GsaMerge<float> f = gsa_merge(st, other);
#pragma unroll
    for (int i = 0; i < V; ++i) acc[i] = acc[i] * f.self + acc_other[i] * f.other;
  }
  if (g != 0) return;  // group 0 writes (every group holds the merged state, group 0's is the one kept)
  if (t.piece < 0) {
    store_vec<T>(static_cast<T*>(p.o) + offset(p.o_strides, b, u, h) + d0, acc, gsa_inv_norm(st));
    if (lane == 0) static_cast<float*>(p.lse)[(b * p.N + u) * p.H + h] = gsa_lse(st);
    return;
  }
  float* out = pieces + ((t.piece * p.B + b) * p.H + h) * (p.D + 2);
#pragma unroll
  for (int i = 0; i < V; ++i) out[d0 + i] = acc[i];
  if (lane == 0) {
    out[p.D] = st.m;
    out[p.D + 1] = st.l;
  }
}

template <int L, typename T>
__global__ void dq_group_kernel(GsaParams p, float* edge_ds, float* dq_pieces) {
  constexpr int V = kVec<T>, G = kWarp / L, U = kDqUnroll;
  Task t;
  if (!scheduled_task(p, p.graph.rows, p.graph.row_ptr, t)) return;
  const int64_t b = t.b, u = t.u, h = t.h;
  const int lane = threadIdx.x % kWarp, g = lane / L, d0 = (lane % L) * V;
  const T* k = static_cast<const T*>(p.k) + offset(p.k_strides, b, 0, h);
  const T* v = static_cast<const T*>(p.v) + offset(p.v_strides, b, 0, h) + d0;
  const float scale = static_cast<float>(p.scale);
  const int64_t row = (b * p.N + u) * p.H + h;
  const float lse = static_cast<const float*>(p.lse)[row];
  const float delta = static_cast<const float*>(p.delta)[row];
  float qr[V], d_o[V], dq[V];
  load_vec<T>(qr, static_cast<const T*>(p.q) + offset(p.q_strides, b, u, h) + d0);
  load_vec<T>(d_o, static_cast<const T*>(p.d_o) + offset(p.d_o_strides, b, u, h) + d0);
#pragma unroll
  for (int i = 0; i < V; ++i) dq[i] = 0;
  for (int64_t base = t.e0; base < t.e1; base += G * U) {
    bool valid[U];
    int64_t e[U];
    float kr[U][V], vr[U][V], score[U], dp[U];
#pragma unroll
    for (int j = 0; j < U; ++j) {
      e[j] = step_edge<G>(base, g, j, t.e1, valid[j]);
      const int64_t src = p.graph.col[e[j]];
      key_slice<T>(kr[j], p, k + src * p.k_strides.node, e[j], d0);
      load_vec<T>(vr[j], v + src * p.v_strides.node);
    }
#pragma unroll
    for (int j = 0; j < U; ++j) {
      score[j] = dot(qr, kr[j]);
      dp[j] = dot(d_o, vr[j]);
    }
#pragma unroll
    for (int j = 0; j < U; ++j) {
      score[j] = group_sum<L>(score[j]);
      dp[j] = group_sum<L>(dp[j]);
    }
#pragma unroll
    for (int j = 0; j < U; ++j) {
      if (!valid[j]) continue;
      const float ds = gsa_dscore(gsa_prob(score[j] * scale, lse), dp[j], delta);
#pragma unroll
      for (int i = 0; i < V; ++i) dq[i] += ds * kr[j][i];
      if (edge_ds != nullptr && lane % L == 0) edge_ds[(b * p.graph.n_edges + e[j]) * p.H + h] = ds;
    }
  }
  across_groups<L, V>(dq);
  if (g != 0) return;
  if (t.piece >= 0) {
    float* out = dq_pieces + ((t.piece * p.B + b) * p.H + h) * p.D + d0;
#pragma unroll
    for (int i = 0; i < V; ++i) out[i] = dq[i];
  } else {
    store_vec<T>(static_cast<T*>(p.dq) + offset(p.dq_strides, b, u, h) + d0, dq, scale);
  }
}

template <int L, typename T>
__global__ void dkv_group_kernel(GsaParams p, float* dkv_pieces) {
  constexpr int V = kVec<T>, G = kWarp / L, U = kDkvUnroll;
  Task t;
  if (!scheduled_task(p, p.graph.srcs, p.graph.t_row_ptr, t)) return;
  const int64_t b = t.b, src = t.u, h = t.h;
  const int lane = threadIdx.x % kWarp, g = lane / L, d0 = (lane % L) * V;
  const T* q = static_cast<const T*>(p.q) + offset(p.q_strides, b, 0, h) + d0;
  const T* d_o = static_cast<const T*>(p.d_o) + offset(p.d_o_strides, b, 0, h) + d0;
  const float* lse = static_cast<const float*>(p.lse);
  const float* delta = static_cast<const float*>(p.delta);
  const float scale = static_cast<float>(p.scale);
  const T* k_src = static_cast<const T*>(p.k) + offset(p.k_strides, b, src, h);
  float vr[V], dk[V], dv[V];
  load_vec<T>(vr, static_cast<const T*>(p.v) + offset(p.v_strides, b, src, h) + d0);
#pragma unroll
  for (int i = 0; i < V; ++i) dk[i] = dv[i] = 0;
  for (int64_t base = t.e0; base < t.e1; base += G * U) {
    bool valid[U];
    float kr[U][V], qu[U][V], dou[U][V], score[U], dp[U], row_lse[U], row_delta[U];
#pragma unroll
    for (int j = 0; j < U; ++j) {
      const int64_t i_edge = step_edge<G>(base, g, j, t.e1, valid[j]);
      const int64_t u = p.graph.t_col[i_edge];
      const int64_t row = (b * p.N + u) * p.H + h;
      row_lse[j] = lse[row];
      row_delta[j] = delta[row];
      key_slice<T>(kr[j], p, k_src, p.graph.t_edge[i_edge], d0);
      load_vec<T>(qu[j], q + u * p.q_strides.node);
      load_vec<T>(dou[j], d_o + u * p.d_o_strides.node);
    }
#pragma unroll
    for (int j = 0; j < U; ++j) {
      score[j] = dot(qu[j], kr[j]);
      dp[j] = dot(dou[j], vr);
    }
#pragma unroll
    for (int j = 0; j < U; ++j) {
      score[j] = group_sum<L>(score[j]);
      dp[j] = group_sum<L>(dp[j]);
    }
#pragma unroll
    for (int j = 0; j < U; ++j) {
      if (!valid[j]) continue;
      const float pr = gsa_prob(score[j] * scale, row_lse[j]);
      const float ds = gsa_dscore(pr, dp[j], row_delta[j]);
#pragma unroll
      for (int i = 0; i < V; ++i) {
        dk[i] += ds * qu[j][i];
        dv[i] += pr * dou[j][i];
      }
    }
  }
  across_groups<L, V>(dk);
  across_groups<L, V>(dv);
  if (g != 0) return;
  if (t.piece >= 0) {
    float* out = dkv_pieces + ((t.piece * p.B + b) * p.H + h) * 2 * p.D + d0;
#pragma unroll
    for (int i = 0; i < V; ++i) {
      out[i] = dk[i];
      out[p.D + i] = dv[i];
    }
  } else {
    store_vec<T>(static_cast<T*>(p.dk) + offset(p.dk_strides, b, src, h) + d0, dk, scale);
    store_vec<T>(static_cast<T*>(p.dv) + offset(p.dv_strides, b, src, h) + d0, dv, 1.0f);
  }
}

// d_rel_emb[r] = scale * sum over the edges of relation r (ascending), batches, heads of dS * q_dst.
// A relation can hold most edges (clipped distances of a dense graph), so its edge list is cut into
// `slices` equal parts: block (r, s) sums part s into partial [R, slices, D] (threads over D), and
// drel_reduce_kernel adds the parts in order: a fixed summation order, so deterministic. dS is kept in the
// accumulation type (fp64 for fp64), so fp64 needs no recomputation.
template <typename T>
__global__ void drel_slice_kernel(GsaParams p, const typename GsaAcc<T>::type* edge_ds,
                                  typename GsaAcc<T>::type* partial, int64_t slices) {
  using A = typename GsaAcc<T>::type;
  const int64_t r = blockIdx.x, s = blockIdx.y;
  const int64_t first = p.graph.rel_ptr[r], len = p.graph.rel_ptr[r + 1] - first;
  const int64_t lo = first + len * s / slices, hi = first + len * (s + 1) / slices;
  const T* q = static_cast<const T*>(p.q);
  for (int64_t d = threadIdx.x; d < p.D; d += blockDim.x) {
    A acc = 0;
    for (int64_t i = lo; i < hi; ++i) {
      const int64_t e = p.graph.rel_edge[i];
      const int64_t u = p.graph.rel_dst[i];
      for (int64_t b = 0; b < p.B; ++b) {
        for (int64_t h = 0; h < p.H; ++h) {
          acc += edge_ds[(b * p.graph.n_edges + e) * p.H + h] * load(q + offset(p.q_strides, b, u, h) + d);
        }
      }
    }
    partial[(r * slices + s) * p.D + d] = acc;
  }
}

template <typename T>
__global__ void drel_reduce_kernel(GsaParams p, const typename GsaAcc<T>::type* partial, int64_t slices) {
  using A = typename GsaAcc<T>::type;
  const int64_t r = blockIdx.x;
  for (int64_t d = threadIdx.x; d < p.D; d += blockDim.x) {
    A sum = 0;
    for (int64_t s = 0; s < slices; ++s) sum += partial[(r * slices + s) * p.D + d];
    store(static_cast<T*>(p.d_rel_emb) + r * p.rel_stride + d, sum * static_cast<A>(p.scale));
  }
}

void check_launch(const char* what) {
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) throw Error(std::string(what) + ": CUDA error: " + cudaGetErrorString(err));
}

// Slices per relation for drel_slice_kernel: about kDrelSliceEdges edges of the whole graph per slice
// (a relation holding every edge still gets E / kDrelSliceEdges blocks), within a partial-sum budget.
constexpr int64_t kDrelSliceEdges = 512;
constexpr int64_t kDrelMaxSlices = 1024;
constexpr int64_t kDrelPartialBudget = int64_t{1} << 22;  // elements of [R, slices, D]

int64_t drel_slices(const GsaParams& p) {
  const int64_t by_edges = (p.graph.n_edges + kDrelSliceEdges - 1) / kDrelSliceEdges;
  const int64_t by_budget = kDrelPartialBudget / std::max<int64_t>(1, p.R * p.D);
  return std::max<int64_t>(1, std::min({by_edges, by_budget, kDrelMaxSlices}));
}

bool scheduled(const GsaScheduleView& s) { return s.order != nullptr; }

BackwardLayout backward_layout(const GsaParams& p) {
  BackwardLayout l;
  const bool rel = p.rel_emb != nullptr && p.R > 0;
  l.edge_ds = 0;
  l.drel = rel ? p.B * p.graph.n_edges * p.H : 0;
  l.dq_pieces = l.drel + (rel ? p.R * drel_slices(p) * p.D : 0);
  l.dkv_pieces = l.dq_pieces + (scheduled(p.graph.rows) ? p.graph.rows.n_pieces * p.B * p.H * p.D : 0);
  l.total = l.dkv_pieces + (scheduled(p.graph.srcs) ? p.graph.srcs.n_pieces * p.B * p.H * 2 * p.D : 0);
  return l;
}

int64_t acc_bytes(const GsaParams& p) { return p.dtype == GsaDtype::f64 ? 8 : 4; }

// Blocks of a scheduled pass (pieces and rows) and of a merge pass over `s`.
unsigned blocks_for_warps(int64_t warps) {
  return static_cast<unsigned>(std::max<int64_t>(1, (warps + kWarpsPerBlock - 1) / kWarpsPerBlock));
}
unsigned scheduled_blocks(const GsaParams& p, const GsaScheduleView& s) {
  const int64_t items = scheduled(s) ? s.n_pieces + s.n_order : p.N;
  return blocks_for_warps(items * p.B * p.H);
}
unsigned merge_blocks(const GsaParams& p, const GsaScheduleView& s) { return blocks_for_warps(s.n_split * p.B * p.H); }
bool has_merges(const GsaScheduleView& s) { return scheduled(s) && s.n_split > 0; }

constexpr unsigned kThreads = kWarp * kWarpsPerBlock;

bool aligned16(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }
bool rows_aligned(const void* ptr, const GsaStrides& s, int64_t V) {
  return aligned16(ptr) && s.batch % V == 0 && s.node % V == 0 && s.head % V == 0;
}

// Lanes per edge of the lane-group kernels for p (0: they do not apply, the warp kernels run).
int group_lanes(const GsaParams& p, bool backward, GsaCudaKernels kernels) {
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

template <int P, typename T>
void forward_launch(const GsaParams& p, cudaStream_t stream, GsaCudaKernels kernels) {
  using A = typename GsaAcc<T>::type;
  A* pieces = static_cast<A*>(p.workspace);
  const bool grouped = with_lanes<T>(group_lanes(p, false, kernels), [&](auto l) {
    forward_group_kernel<decltype(l)::value, T><<<scheduled_blocks(p, p.graph.rows), kThreads, 0, stream>>>(p, pieces);
  });
  if (!grouped) forward_kernel<P, T><<<scheduled_blocks(p, p.graph.rows), kThreads, 0, stream>>>(p, pieces);
  check_launch("graph_attention forward");
  if (has_merges(p.graph.rows)) {
    forward_merge_kernel<P, T><<<merge_blocks(p, p.graph.rows), kThreads, 0, stream>>>(p, pieces);
    check_launch("graph_attention forward (merge of split rows)");
  }
}

template <int P, typename T>
void backward_launch(const GsaParams& p, cudaStream_t stream, GsaCudaKernels kernels) {
  using A = typename GsaAcc<T>::type;
  const BackwardLayout l = backward_layout(p);
  A* ws = static_cast<A*>(p.workspace);
  const bool rel = p.rel_emb != nullptr && p.R > 0;
  A* edge_ds = rel ? ws + l.edge_ds : nullptr;
  delta_kernel<P, T><<<blocks_for_warps(p.B * p.N * p.H), kThreads, 0, stream>>>(p);
  check_launch("graph_attention backward (delta)");
  const int lanes = group_lanes(p, true, kernels);
  const bool grouped = with_lanes<T>(lanes, [&](auto n) {
    dq_group_kernel<decltype(n)::value, T><<<scheduled_blocks(p, p.graph.rows), kThreads, 0, stream>>>(
        p, edge_ds, ws + l.dq_pieces);
  });
  if (!grouped) {
    dq_kernel<P, T><<<scheduled_blocks(p, p.graph.rows), kThreads, 0, stream>>>(p, edge_ds, ws + l.dq_pieces);
  }
  check_launch("graph_attention backward (dq)");
  if (has_merges(p.graph.rows)) {
    dq_merge_kernel<P, T><<<merge_blocks(p, p.graph.rows), kThreads, 0, stream>>>(p, ws + l.dq_pieces);
    check_launch("graph_attention backward (dq merge)");
  }
  const bool dkv_grouped = with_lanes<T>(lanes, [&](auto n) {
    dkv_group_kernel<decltype(n)::value, T><<<scheduled_blocks(p, p.graph.srcs), kThreads, 0, stream>>>(
        p, ws + l.dkv_pieces);
  });
  if (!dkv_grouped) {
    dkv_kernel<P, T><<<scheduled_blocks(p, p.graph.srcs), kThreads, 0, stream>>>(p, ws + l.dkv_pieces);
  }
  check_launch("graph_attention backward (dk, dv)");
  if (has_merges(p.graph.srcs)) {
    dkv_merge_kernel<P, T><<<merge_blocks(p, p.graph.srcs), kThreads, 0, stream>>>(p, ws + l.dkv_pieces);
    check_launch("graph_attention backward (dk, dv merge)");
  }
  if (rel) {
    const int64_t slices = drel_slices(p);
    const dim3 grid(static_cast<unsigned>(p.R), static_cast<unsigned>(slices));
    drel_slice_kernel<T><<<grid, 64, 0, stream>>>(p, edge_ds, ws + l.drel, slices);
    check_launch("graph_attention backward (d_rel_emb slices)");
    drel_reduce_kernel<T><<<static_cast<unsigned>(p.R), 64, 0, stream>>>(p, ws + l.drel, slices);
    check_launch("graph_attention backward (d_rel_emb)");
  }
}

// Calls F<P, T> with P = values per lane for p.D and T the element type.
template <template <int, typename> class F>
void dispatch(const GsaParams& p, cudaStream_t stream, GsaCudaKernels kernels) {
  if (p.D > kGsaCudaMaxD || p.D < 1) {
    throw Error("graph_attention on CUDA: head dimension D = " + std::to_string(p.D) + " not supported (1 to " +
                std::to_string(kGsaCudaMaxD) + ")");
  }
  auto by_dtype = [&](auto per_lane) {
    constexpr int P = decltype(per_lane)::value;
    switch (p.dtype) {
      case GsaDtype::f32: F<P, float>::run(p, stream, kernels); break;
      case GsaDtype::f64: F<P, double>::run(p, stream, kernels); break;
      case GsaDtype::f16: F<P, __half>::run(p, stream, kernels); break;
      case GsaDtype::bf16: F<P, __nv_bfloat16>::run(p, stream, kernels); break;
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

template <int P, typename T>
struct Forward {
  static void run(const GsaParams& p, cudaStream_t s, GsaCudaKernels k) { forward_launch<P, T>(p, s, k); }
};
template <int P, typename T>
struct Backward {
  static void run(const GsaParams& p, cudaStream_t s, GsaCudaKernels k) { backward_launch<P, T>(p, s, k); }
};

}  // namespace

int64_t gsa_cuda_delta_elems(const GsaParams& p) { return p.B * p.N * p.H; }

int64_t gsa_cuda_forward_workspace_bytes(const GsaParams& p) {
  const int64_t pieces = scheduled(p.graph.rows) ? p.graph.rows.n_pieces : 0;
  return pieces * p.B * p.H * (p.D + 2) * acc_bytes(p);
}

int64_t gsa_cuda_workspace_bytes(const GsaParams& p) { return backward_layout(p).total * acc_bytes(p); }

void gsa_forward_cuda(const GsaParams& p, void* stream, GsaCudaKernels kernels) {
  if (p.B * p.N * p.H == 0) return;
  if (p.workspace_bytes < gsa_cuda_forward_workspace_bytes(p)) {
    throw Error("graph_attention forward on CUDA: a graph with split rows needs a workspace of "
                "gsa_cuda_forward_workspace_bytes");
  }
  dispatch<Forward>(p, static_cast<cudaStream_t>(stream), kernels);
}

void gsa_backward_cuda(const GsaParams& p, void* stream, GsaCudaKernels kernels) {
  if (p.B * p.N * p.H == 0) return;
  if (p.workspace_bytes < gsa_cuda_workspace_bytes(p) || (p.rel_emb != nullptr && p.graph.rel_ptr == nullptr)) {
    throw Error("graph_attention backward on CUDA: needs a workspace of gsa_cuda_workspace_bytes (and the "
                "relation grouping with rel_emb)");
  }
  dispatch<Backward>(p, static_cast<cudaStream_t>(stream), kernels);
}

int gsa_cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return n;
}

}  // namespace sb
