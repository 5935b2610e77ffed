// CUDA graph self-attention kernels: a warp per (batch, node, head); forward with an online softmax,
// backward by destination (dq) and by source through the transposed graph (dk, dv), no atomics, and
// d(rel_emb) by relation over a saved per-edge dS, in slices summed in a fixed order (recomputed per
// relation for fp64). Built only when CMake finds CUDA (SB_WITH_CUDA).
//
// Kernel variants: 1 (this file): warp per row-head, D / 32 values per lane in registers; fp32
// accumulation for fp32/fp16/bf16, fp64 for fp64.
#include "kernels/cuda/gsa_cuda.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
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

// The workspace with rel_emb: edge dS [B, E, H] (fp32), then the d_rel_emb partial sums [R, slices, D].
__host__ __device__ __forceinline__ float* edge_ds(const GsaParams& p) { return static_cast<float*>(p.workspace); }

__device__ __forceinline__ int64_t offset(const GsaStrides& s, int64_t b, int64_t n, int64_t h) {
  return b * s.batch + n * s.node + h * s.head;
}

// The (b, u, h) a warp works on; false when the warp is past the end.
__device__ __forceinline__ bool warp_task(const GsaParams& p, int64_t& b, int64_t& u, int64_t& h) {
  const int64_t w = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp;
  if (w >= p.B * p.N * p.H) return false;
  h = w % p.H;
  u = (w / p.H) % p.N;
  b = w / (p.H * p.N);
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

template <int P, typename T>
__global__ void forward_kernel(GsaParams p) {
  using A = typename GsaAcc<T>::type;
  int64_t b, u, h;
  if (!warp_task(p, b, u, h)) return;
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
  for (int64_t e = p.graph.row_ptr[u]; e < p.graph.row_ptr[u + 1]; ++e) {
    const int64_t src = p.graph.col[e];
    const T* r = rel_emb != nullptr ? rel_emb + p.graph.rel[e] * p.rel_stride : nullptr;
    const A s = edge_score<P>(qr, k + offset(p.k_strides, b, src, h), r, p.D, lane, scale);
    const A m_new = s > st.m ? s : st.m;
    const A alpha = gsa_rescale(st.m, m_new);
    const A pr = gsa_exp(s - m_new);
    st.l = st.l * alpha + pr;
    st.m = m_new;
    const T* v_src = v + offset(p.v_strides, b, src, h);
#pragma unroll
    for (int i = 0; i < P; ++i) {
      const int64_t d = lane + kWarp * i;
      acc[i] = acc[i] * alpha + (d < p.D ? pr * load(v_src + d) : A(0));
    }
  }
  const A inv = gsa_inv_norm(st);
  T* o = static_cast<T*>(p.o) + offset(p.o_strides, b, u, h);
#pragma unroll
  for (int i = 0; i < P; ++i) {
    const int64_t d = lane + kWarp * i;
    if (d < p.D) store(o + d, acc[i] * inv);
  }
  if (lane == 0) static_cast<A*>(p.lse)[(b * p.N + u) * p.H + h] = gsa_lse(st);
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

// dq by destination rows; with rel_emb also each edge's dS into edge_ds [B, E, H].
template <int P, typename T>
__global__ void dq_kernel(GsaParams p) {
  using A = typename GsaAcc<T>::type;
  int64_t b, u, h;
  if (!warp_task(p, b, u, h)) return;
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
  for (int64_t e = p.graph.row_ptr[u]; e < p.graph.row_ptr[u + 1]; ++e) {
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
    if (p.rel_emb != nullptr && lane == 0) edge_ds(p)[(b * p.graph.n_edges + e) * p.H + h] = static_cast<float>(ds);
  }
  T* out = static_cast<T*>(p.dq) + offset(p.dq_strides, b, u, h);
#pragma unroll
  for (int i = 0; i < P; ++i) {
    const int64_t d = lane + kWarp * i;
    if (d < p.D) store(out + d, dq[i] * scale);
  }
}

// dk, dv by source rows through the transposed graph.
template <int P, typename T>
__global__ void dkv_kernel(GsaParams p) {
  using A = typename GsaAcc<T>::type;
  int64_t b, src, h;
  if (!warp_task(p, b, src, h)) return;
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
  for (int64_t t = p.graph.t_row_ptr[src]; t < p.graph.t_row_ptr[src + 1]; ++t) {
    const int64_t u = p.graph.t_col[t];
    const int64_t e = p.graph.t_edge[t];
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
  T* dk_out = static_cast<T*>(p.dk) + offset(p.dk_strides, b, src, h);
  T* dv_out = static_cast<T*>(p.dv) + offset(p.dv_strides, b, src, h);
#pragma unroll
  for (int i = 0; i < P; ++i) {
    const int64_t d = lane + kWarp * i;
    if (d < p.D) {
      store(dk_out + d, dk[i] * scale);
      store(dv_out + d, dv[i]);
    }
  }
}

// d_rel_emb[r] = scale * sum over the edges of relation r (ascending), batches, heads of dS * q_dst.
// A relation can hold most edges (clipped distances of a dense graph), so its edge list is cut into
// `slices` equal parts: block (r, s) sums part s into partial [R, slices, D] (threads over D), and
// drel_reduce_kernel adds the parts in order: a fixed summation order, so deterministic.
template <typename T>
__global__ void drel_slice_kernel(GsaParams p, float* partial, int64_t slices) {
  using A = typename GsaAcc<T>::type;
  static_assert(std::is_same_v<A, float>, "fp64 takes drel_recompute_kernel");
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
          acc += edge_ds(p)[(b * p.graph.n_edges + e) * p.H + h] * load(q + offset(p.q_strides, b, u, h) + d);
        }
      }
    }
    partial[(r * slices + s) * p.D + d] = acc;
  }
}

template <typename T>
__global__ void drel_reduce_kernel(GsaParams p, const float* partial, int64_t slices) {
  const int64_t r = blockIdx.x;
  for (int64_t d = threadIdx.x; d < p.D; d += blockDim.x) {
    float sum = 0;
    for (int64_t s = 0; s < slices; ++s) sum += partial[(r * slices + s) * p.D + d];
    store(static_cast<T*>(p.d_rel_emb) + r * p.rel_stride + d, sum * static_cast<float>(p.scale));
  }
}

// fp64: edge_ds is an fp32 workspace, too coarse for fp64 d_rel_emb, so dS is recomputed per edge in fp64.
// One block per relation; warp w takes items w, w + kDrelWarps, ... of (edge, batch, head), and the warps'
// partial sums are added in warp order: a fixed summation order, so deterministic.
constexpr int kDrelWarps = 8;

template <int P, typename T>
__global__ void drel_recompute_kernel(GsaParams p) {
  using A = typename GsaAcc<T>::type;
  __shared__ A partial[kDrelWarps][P * kWarp];
  const int64_t r = blockIdx.x;
  const int lane = threadIdx.x % kWarp;
  const int warp = threadIdx.x / kWarp;
  const T* rr = static_cast<const T*>(p.rel_emb) + r * p.rel_stride;
  const A* lse = static_cast<const A*>(p.lse);
  const A* delta = static_cast<const A*>(p.delta);
  const A scale = static_cast<A>(p.scale);
  const int64_t first = p.graph.rel_ptr[r];
  const int64_t items = (p.graph.rel_ptr[r + 1] - first) * p.B * p.H;
  A acc[P];
#pragma unroll
  for (int i = 0; i < P; ++i) acc[i] = 0;
  for (int64_t j = warp; j < items; j += kDrelWarps) {
    const int64_t h = j % p.H;
    const int64_t b = (j / p.H) % p.B;
    const int64_t i = first + j / (p.H * p.B);
    const int64_t e = p.graph.rel_edge[i];
    const int64_t u = p.graph.rel_dst[i];
    const int64_t src = p.graph.col[e];
    const int64_t row = (b * p.N + u) * p.H + h;
    A qu[P], dou[P];
    load_row<P>(qu, static_cast<const T*>(p.q) + offset(p.q_strides, b, u, h), p.D, lane);
    load_row<P>(dou, static_cast<const T*>(p.d_o) + offset(p.d_o_strides, b, u, h), p.D, lane);
    const T* k_src = static_cast<const T*>(p.k) + offset(p.k_strides, b, src, h);
    const A pr = gsa_prob(edge_score<P>(qu, k_src, rr, p.D, lane, scale), lse[row]);
    const A dp = warp_dot<P>(dou, static_cast<const T*>(p.v) + offset(p.v_strides, b, src, h), p.D, lane);
    const A ds = gsa_dscore(pr, dp, delta[row]);
#pragma unroll
    for (int k = 0; k < P; ++k) acc[k] += ds * qu[k];
  }
#pragma unroll
  for (int i = 0; i < P; ++i) partial[warp][lane + kWarp * i] = acc[i];
  __syncthreads();
  if (warp != 0) return;
  T* out = static_cast<T*>(p.d_rel_emb) + r * p.rel_stride;
#pragma unroll
  for (int i = 0; i < P; ++i) {
    const int64_t d = lane + kWarp * i;
    A sum = 0;
    for (int w = 0; w < kDrelWarps; ++w) sum += partial[w][lane + kWarp * i];
    if (d < p.D) store(out + d, sum * scale);
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
constexpr int64_t kDrelPartialBudget = int64_t{1} << 22;  // fp32 elements of [R, slices, D]

int64_t drel_slices(const GsaParams& p) {
  const int64_t by_edges = (p.graph.n_edges + kDrelSliceEdges - 1) / kDrelSliceEdges;
  const int64_t by_budget = kDrelPartialBudget / std::max<int64_t>(1, p.R * p.D);
  return std::max<int64_t>(1, std::min({by_edges, by_budget, kDrelMaxSlices}));
}

// fp32 elements of the partial sums kept after edge_ds (0 for fp64, which recomputes dS per relation).
int64_t drel_partial_elems(const GsaParams& p) {
  return p.dtype == GsaDtype::f64 ? 0 : p.R * drel_slices(p) * p.D;
}

unsigned warp_blocks(const GsaParams& p) {
  const int64_t warps = p.B * p.N * p.H;
  return static_cast<unsigned>((warps + kWarpsPerBlock - 1) / kWarpsPerBlock);
}

template <int P, typename T>
void forward_launch(const GsaParams& p, cudaStream_t stream) {
  forward_kernel<P, T><<<warp_blocks(p), kWarp * kWarpsPerBlock, 0, stream>>>(p);
  check_launch("graph_attention forward");
}

template <int P, typename T>
void backward_launch(const GsaParams& p, cudaStream_t stream) {
  const unsigned threads = kWarp * kWarpsPerBlock;
  delta_kernel<P, T><<<warp_blocks(p), threads, 0, stream>>>(p);
  check_launch("graph_attention backward (delta)");
  dq_kernel<P, T><<<warp_blocks(p), threads, 0, stream>>>(p);
  check_launch("graph_attention backward (dq)");
  dkv_kernel<P, T><<<warp_blocks(p), threads, 0, stream>>>(p);
  check_launch("graph_attention backward (dk, dv)");
  if (p.rel_emb != nullptr && p.R > 0) {
    if constexpr (std::is_same_v<T, double>) {
      drel_recompute_kernel<P, T><<<static_cast<unsigned>(p.R), kWarp * kDrelWarps, 0, stream>>>(p);
    } else {
      const int64_t slices = drel_slices(p);
      float* partial = edge_ds(p) + p.B * p.graph.n_edges * p.H;
      const dim3 grid(static_cast<unsigned>(p.R), static_cast<unsigned>(slices));
      drel_slice_kernel<T><<<grid, 64, 0, stream>>>(p, partial, slices);
      check_launch("graph_attention backward (d_rel_emb slices)");
      drel_reduce_kernel<T><<<static_cast<unsigned>(p.R), 64, 0, stream>>>(p, partial, slices);
    }
    check_launch("graph_attention backward (d_rel_emb)");
  }
}

// Calls F<P, T> with P = values per lane for p.D and T the element type.
template <template <int, typename> class F>
void dispatch(const GsaParams& p, cudaStream_t stream) {
  if (p.D > kGsaCudaMaxD || p.D < 1) {
    throw Error("graph_attention on CUDA: head dimension D = " + std::to_string(p.D) + " not supported (1 to " +
                std::to_string(kGsaCudaMaxD) + ")");
  }
  auto by_dtype = [&](auto per_lane) {
    constexpr int P = decltype(per_lane)::value;
    switch (p.dtype) {
      case GsaDtype::f32: F<P, float>::run(p, stream); break;
      case GsaDtype::f64: F<P, double>::run(p, stream); break;
      case GsaDtype::f16: F<P, __half>::run(p, stream); break;
      case GsaDtype::bf16: F<P, __nv_bfloat16>::run(p, stream); break;
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
  static void run(const GsaParams& p, cudaStream_t s) { forward_launch<P, T>(p, s); }
};
template <int P, typename T>
struct Backward {
  static void run(const GsaParams& p, cudaStream_t s) { backward_launch<P, T>(p, s); }
};

}  // namespace

int64_t gsa_cuda_delta_elems(const GsaParams& p) { return p.B * p.N * p.H; }

int64_t gsa_cuda_workspace_bytes(const GsaParams& p) {
  const int64_t elems = p.rel_emb != nullptr ? p.B * p.graph.n_edges * p.H + drel_partial_elems(p) : 0;
  return elems * static_cast<int64_t>(sizeof(float));
}

void gsa_forward_cuda(const GsaParams& p, void* stream) {
  if (p.B * p.N * p.H == 0) return;
  dispatch<Forward>(p, static_cast<cudaStream_t>(stream));
}

void gsa_backward_cuda(const GsaParams& p, void* stream) {
  if (p.B * p.N * p.H == 0) return;
  if (p.rel_emb != nullptr && (p.workspace_bytes < gsa_cuda_workspace_bytes(p) || p.graph.rel_ptr == nullptr)) {
    throw Error("graph_attention backward on CUDA: rel_emb needs a workspace of gsa_cuda_workspace_bytes and the "
                "relation grouping");
  }
  dispatch<Backward>(p, static_cast<cudaStream_t>(stream));
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
