// CUDA graph self-attention forward: a warp per (batch, row, head) over a prepared graph's schedule (rows of many
// edges cut into pieces merged in a fixed order, the Flash-Decoding split; the other rows heaviest first), with an
// online softmax; lane-group kernels where D and the rows' alignment allow, else one warp per edge. Also the
// device count. Built only when CMake finds CUDA (SB_WITH_CUDA).
//
// A warp keeps D / 32 values per lane in registers; fp32 accumulation for fp32/fp16/bf16, fp64 for fp64.
#include "kernels/cuda/gsa_cuda_common.cuh"

namespace sb {
namespace gsa_cuda {
namespace {

// Forward of scheduled tasks: a whole row writes o and lse; a piece its unnormalised state into
// pieces [n_pieces, B, H, D + 2] (acc, then m and l), merged by forward_merge_kernel.
template <int P, typename T>
__global__ void forward_kernel(GsaParams p, typename GsaAcc<T>::type* pieces) {
  using A = typename GsaAcc<T>::type;
  WarpTask<T> t(p);
  if (!t.take(p, p.graph.rows, p.graph.row_ptr)) return;
  const int64_t b = t.b, u = t.u, h = t.h;
  A qr[P], acc[P];
  load_row<P>(qr, t.q + offset(p.q_strides, b, u, h), p.D, t.lane);
#pragma unroll
  for (int i = 0; i < P; ++i) acc[i] = 0;
  GsaSoftmaxState<A> st = gsa_softmax_init<A>();
  for (int64_t e = t.e0; e < t.e1; ++e) {
    const int64_t src = p.graph.col[e];
    const T* r = t.rel_emb != nullptr ? t.rel_emb + p.graph.rel[e] * p.rel_stride : nullptr;
    const A score = edge_score<P>(qr, t.k + offset(p.k_strides, b, src, h), r, p.D, t.lane, t.scale);
    const GsaPush<A> f = gsa_push(st, score);
    const T* v_src = t.v + offset(p.v_strides, b, src, h);
#pragma unroll
    for (int i = 0; i < P; ++i) {
      const int64_t d = t.lane + kWarp * i;
      acc[i] = acc[i] * f.alpha + (d < p.D ? f.weight * load(v_src + d) : A(0));
    }
  }
  if (t.piece < 0) {
    finish_row<P, T>(p, b, u, h, st, acc, t.lane);
    return;
  }
  A* out = pieces + ((t.piece * p.B + b) * p.H + h) * (p.D + 2);
  store_row<P>(out, acc, A(1), p.D, t.lane);
  if (t.lane == 0) {
    out[p.D] = st.m;
    out[p.D + 1] = st.l;
  }
}

// A split row's o and lse from its pieces' states, in piece order (the CPU kernels' merge).
template <int P, typename T>
__global__ void forward_merge_kernel(GsaParams p, const typename GsaAcc<T>::type* pieces) {
  using A = typename GsaAcc<T>::type;
  MergeTask mt;
  if (!merge_task(p, p.graph.rows, mt)) return;
  const int64_t n = mt.c1 - mt.c0, stride = p.B * p.H * (p.D + 2);
  const A* first = pieces + (mt.c0 * p.B * p.H + mt.b * p.H + mt.h) * (p.D + 2);
  GsaSoftmaxState<A> st = gsa_softmax_init<A>();
  for (int64_t c = 0; c < n; ++c) {
    const A m = first[c * stride + p.D];
    st.m = m > st.m ? m : st.m;
  }
  A acc[P];
#pragma unroll
  for (int k = 0; k < P; ++k) acc[k] = 0;
  for (int64_t c = 0; c < n; ++c) {
    const A* pc = first + c * stride;
    const A alpha = gsa_rescale(pc[p.D], st.m);
    st.l += alpha * pc[p.D + 1];
#pragma unroll
    for (int k = 0; k < P; ++k) {
      const int64_t d = mt.lane + kWarp * k;
      if (d < p.D) acc[k] += alpha * pc[d];
    }
  }
  finish_row<P, T>(p, mt.b, mt.u, mt.h, st, acc, mt.lane);
}

template <int L, typename T>
__global__ void forward_group_kernel(GsaParams p, float* pieces) {
  constexpr int V = kVec<T>, G = kWarp / L, U = kForwardUnroll;
  GroupTask<L, T> t;
  if (!t.take(p, p.graph.rows, p.graph.row_ptr)) return;
  const int64_t b = t.b, u = t.u, h = t.h;
  float qr[V], acc[V];
  load_vec<T>(qr, t.q + u * p.q_strides.node);
#pragma unroll
  for (int i = 0; i < V; ++i) acc[i] = 0;
  GsaSoftmaxState<float> st = gsa_softmax_init<float>();
  for (int64_t base = t.e0; base < t.e1; base += G * U) {
    bool valid[U];
    float s[U], kr[U][V], vr[U][V];
#pragma unroll
    for (int j = 0; j < U; ++j) {
      const int64_t e = step_edge<G>(base, t.g, j, t.e1, valid[j]);
      const int64_t src = p.graph.col[e];
      key_slice<T>(kr[j], p, t.k + src * p.k_strides.node, e, t.d0);
      load_vec<T>(vr[j], t.v + src * p.v_strides.node);
    }
#pragma unroll
    for (int j = 0; j < U; ++j) s[j] = dot(qr, kr[j]);
#pragma unroll
    for (int j = 0; j < U; ++j) s[j] = group_sum<L>(s[j]) * t.scale;
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
  if (t.g != 0) return;  // group 0 writes (every group holds the merged state, group 0's is the one kept)
  if (t.piece < 0) {
    store_vec<T>(static_cast<T*>(p.o) + offset(p.o_strides, b, u, h) + t.d0, acc, gsa_inv_norm(st));
    if (t.lane == 0) static_cast<float*>(p.lse)[(b * p.N + u) * p.H + h] = gsa_lse(st);
    return;
  }
  float* out = pieces + ((t.piece * p.B + b) * p.H + h) * (p.D + 2);
#pragma unroll
  for (int i = 0; i < V; ++i) out[t.d0 + i] = acc[i];
  if (t.lane == 0) {
    out[p.D] = st.m;
    out[p.D + 1] = st.l;
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

}  // namespace
}  // namespace gsa_cuda

int64_t gsa_cuda_forward_workspace_bytes(const GsaParams& p) {
  const int64_t pieces = gsa_cuda::scheduled(p.graph.rows) ? p.graph.rows.n_pieces : 0;
  return pieces * p.B * p.H * (p.D + 2) * gsa_cuda::acc_bytes(p);
}

void gsa_forward_cuda(const GsaParams& p, void* stream, GsaCudaKernels kernels) {
  if (p.B * p.N * p.H == 0) return;
  if (p.workspace_bytes < gsa_cuda_forward_workspace_bytes(p)) {
    throw Error("graph_attention forward on CUDA: a graph with split rows needs a workspace of "
                "gsa_cuda_forward_workspace_bytes");
  }
  gsa_cuda::dispatch(p, [&](auto per_lane, auto type) {
    gsa_cuda::forward_launch<decltype(per_lane)::value, typename decltype(type)::type>(
        p, static_cast<cudaStream_t>(stream), kernels);
  });
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
