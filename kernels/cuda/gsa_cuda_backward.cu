// CUDA graph self-attention backward over a prepared graph's schedules: delta, dq by destination and dk, dv by
// source through the transposed graph (pieces of split rows and sources merged in a fixed order, no atomics), and
// d(rel_emb) by relation over a saved per-edge dS, in slices summed in a fixed order. Lane-group kernels where
// D and the rows' alignment allow, else one warp per edge. Built only when CMake finds CUDA (SB_WITH_CUDA).
#include "kernels/cuda/gsa_cuda_common.cuh"

namespace sb {
namespace gsa_cuda {
namespace {

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
  WarpTask<T> t(p);
  if (!t.take(p, p.graph.rows, p.graph.row_ptr)) return;
  const int64_t b = t.b, u = t.u, h = t.h;
  const auto [lse, delta] = row_stats(p, t.lse, t.delta, b, u, h);
  A qr[P], d_o[P], dq[P];
  load_row<P>(qr, t.q + offset(p.q_strides, b, u, h), p.D, t.lane);
  load_row<P>(d_o, t.d_o + offset(p.d_o_strides, b, u, h), p.D, t.lane);
#pragma unroll
  for (int i = 0; i < P; ++i) dq[i] = 0;
  for (int64_t e = t.e0; e < t.e1; ++e) {
    const int64_t src = p.graph.col[e];
    const T* r = t.rel_emb != nullptr ? t.rel_emb + p.graph.rel[e] * p.rel_stride : nullptr;
    const T* k_src = t.k + offset(p.k_strides, b, src, h);
    const A pr = gsa_prob(edge_score<P>(qr, k_src, r, p.D, t.lane, t.scale), lse);
    const A ds = gsa_dscore(pr, warp_dot<P>(d_o, t.v + offset(p.v_strides, b, src, h), p.D, t.lane), delta);
#pragma unroll
    for (int i = 0; i < P; ++i) {
      const int64_t d = t.lane + kWarp * i;
      if (d < p.D) dq[i] += ds * (load(k_src + d) + (r != nullptr ? load(r + d) : A(0)));
    }
    if (edge_ds != nullptr && t.lane == 0) edge_ds[(b * p.graph.n_edges + e) * p.H + h] = ds;
  }
  if (t.piece >= 0) {
    store_row<P>(dq_pieces + ((t.piece * p.B + b) * p.H + h) * p.D, dq, A(1), p.D, t.lane);
  } else {
    store_row<P>(static_cast<T*>(p.dq) + offset(p.dq_strides, b, u, h), dq, t.scale, p.D, t.lane);
  }
}

// dk, dv of scheduled tasks over sources (the transposed graph): a whole source stores them, a piece its sums into
// dkv_pieces (dk unscaled, then dv), merged by dkv_merge_kernel.
template <int P, typename T>
__global__ void dkv_kernel(GsaParams p, typename GsaAcc<T>::type* dkv_pieces) {
  using A = typename GsaAcc<T>::type;
  WarpTask<T> t(p);
  if (!t.take(p, p.graph.srcs, p.graph.t_row_ptr)) return;
  const int64_t b = t.b, src = t.u, h = t.h;
  const T* k_src = t.k + offset(p.k_strides, b, src, h);
  A vr[P], dk[P], dv[P];
  load_row<P>(vr, t.v + offset(p.v_strides, b, src, h), p.D, t.lane);
#pragma unroll
  for (int i = 0; i < P; ++i) dk[i] = dv[i] = 0;
  for (int64_t j = t.e0; j < t.e1; ++j) {
    const int64_t u = p.graph.t_col[j];
    const int64_t e = p.graph.t_edge[j];
    const int64_t row = (b * p.N + u) * p.H + h;
    const T* r = t.rel_emb != nullptr ? t.rel_emb + p.graph.rel[e] * p.rel_stride : nullptr;
    A qu[P], dou[P];
    load_row<P>(qu, t.q + offset(p.q_strides, b, u, h), p.D, t.lane);
    load_row<P>(dou, t.d_o + offset(p.d_o_strides, b, u, h), p.D, t.lane);
    const A pr = gsa_prob(edge_score<P>(qu, k_src, r, p.D, t.lane, t.scale), t.lse[row]);
    A dp_part = 0;
#pragma unroll
    for (int i = 0; i < P; ++i) dp_part += dou[i] * vr[i];
    const A ds = gsa_dscore(pr, warp_sum(dp_part), t.delta[row]);
#pragma unroll
    for (int i = 0; i < P; ++i) {
      dk[i] += ds * qu[i];
      dv[i] += pr * dou[i];
    }
  }
  if (t.piece >= 0) {
    A* out = dkv_pieces + ((t.piece * p.B + b) * p.H + h) * 2 * p.D;
    store_row<P>(out, dk, A(1), p.D, t.lane);
    store_row<P>(out + p.D, dv, A(1), p.D, t.lane);
  } else {
    store_row<P>(static_cast<T*>(p.dk) + offset(p.dk_strides, b, src, h), dk, t.scale, p.D, t.lane);
    store_row<P>(static_cast<T*>(p.dv) + offset(p.dv_strides, b, src, h), dv, A(1), p.D, t.lane);
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
  MergeTask mt;
  if (!merge_task(p, p.graph.rows, mt)) return;
  A dq[P];
  sum_pieces<P>(dq, dq_pieces + ((mt.c0 * p.B + mt.b) * p.H + mt.h) * p.D, mt.c1 - mt.c0, p.B * p.H * p.D, p.D,
                mt.lane);
  store_row<P>(static_cast<T*>(p.dq) + offset(p.dq_strides, mt.b, mt.u, mt.h), dq, static_cast<A>(p.scale), p.D,
               mt.lane);
}

template <int P, typename T>
__global__ void dkv_merge_kernel(GsaParams p, const typename GsaAcc<T>::type* dkv_pieces) {
  using A = typename GsaAcc<T>::type;
  MergeTask mt;
  if (!merge_task(p, p.graph.srcs, mt)) return;
  const int64_t n = mt.c1 - mt.c0, stride = p.B * p.H * 2 * p.D;
  const A* first = dkv_pieces + ((mt.c0 * p.B + mt.b) * p.H + mt.h) * 2 * p.D;
  A dk[P], dv[P];
  sum_pieces<P>(dk, first, n, stride, p.D, mt.lane);
  sum_pieces<P>(dv, first + p.D, n, stride, p.D, mt.lane);
  store_row<P>(static_cast<T*>(p.dk) + offset(p.dk_strides, mt.b, mt.u, mt.h), dk, static_cast<A>(p.scale), p.D,
               mt.lane);
  store_row<P>(static_cast<T*>(p.dv) + offset(p.dv_strides, mt.b, mt.u, mt.h), dv, A(1), p.D, mt.lane);
}

template <int L, typename T>
__global__ void dq_group_kernel(GsaParams p, float* edge_ds, float* dq_pieces) {
  constexpr int V = kVec<T>, G = kWarp / L, U = kDqUnroll;
  GroupTask<L, T> t;
  if (!t.take(p, p.graph.rows, p.graph.row_ptr)) return;
  const int64_t b = t.b, u = t.u, h = t.h;
  const auto [lse, delta] = row_stats(p, t.lse, t.delta, b, u, h);
  float qr[V], d_o[V], dq[V];
  load_vec<T>(qr, t.q + u * p.q_strides.node);
  load_vec<T>(d_o, t.d_o + u * p.d_o_strides.node);
#pragma unroll
  for (int i = 0; i < V; ++i) dq[i] = 0;
  for (int64_t base = t.e0; base < t.e1; base += G * U) {
    bool valid[U];
    int64_t e[U];
    float kr[U][V], vr[U][V], score[U], dp[U];
#pragma unroll
    for (int j = 0; j < U; ++j) {
      e[j] = step_edge<G>(base, t.g, j, t.e1, valid[j]);
      const int64_t src = p.graph.col[e[j]];
      key_slice<T>(kr[j], p, t.k + src * p.k_strides.node, e[j], t.d0);
      load_vec<T>(vr[j], t.v + src * p.v_strides.node);
    }
#pragma unroll
    for (int j = 0; j < U; ++j) {
      score[j] = dot(qr, kr[j]);
      dp[j] = dot(d_o, vr[j]);
    }
    group_sums<L, U>(score, dp);
#pragma unroll
    for (int j = 0; j < U; ++j) {
      if (!valid[j]) continue;
      const float ds = gsa_dscore(gsa_prob(score[j] * t.scale, lse), dp[j], delta);
#pragma unroll
      for (int i = 0; i < V; ++i) dq[i] += ds * kr[j][i];
      if (edge_ds != nullptr && t.lane % L == 0) edge_ds[(b * p.graph.n_edges + e[j]) * p.H + h] = ds;
    }
  }
  across_groups<L, V>(dq);
  if (t.g != 0) return;
  if (t.piece >= 0) {
    float* out = dq_pieces + ((t.piece * p.B + b) * p.H + h) * p.D + t.d0;
#pragma unroll
    for (int i = 0; i < V; ++i) out[i] = dq[i];
  } else {
    store_vec<T>(static_cast<T*>(p.dq) + offset(p.dq_strides, b, u, h) + t.d0, dq, t.scale);
  }
}

template <int L, typename T>
__global__ void dkv_group_kernel(GsaParams p, float* dkv_pieces) {
  constexpr int V = kVec<T>, G = kWarp / L, U = kDkvUnroll;
  GroupTask<L, T> t;
  if (!t.take(p, p.graph.srcs, p.graph.t_row_ptr)) return;
  const int64_t b = t.b, src = t.u, h = t.h;
  const T* k_src = t.k + src * p.k_strides.node;
  float vr[V], dk[V], dv[V];
  load_vec<T>(vr, t.v + src * p.v_strides.node);
#pragma unroll
  for (int i = 0; i < V; ++i) dk[i] = dv[i] = 0;
  for (int64_t base = t.e0; base < t.e1; base += G * U) {
    bool valid[U];
    float kr[U][V], qu[U][V], dou[U][V], score[U], dp[U], row_lse[U], row_delta[U];
#pragma unroll
    for (int j = 0; j < U; ++j) {
      const int64_t i_edge = step_edge<G>(base, t.g, j, t.e1, valid[j]);
      const int64_t u = p.graph.t_col[i_edge];
      const int64_t row = (b * p.N + u) * p.H + h;
      row_lse[j] = t.lse[row];
      row_delta[j] = t.delta[row];
      key_slice<T>(kr[j], p, k_src, p.graph.t_edge[i_edge], t.d0);
      load_vec<T>(qu[j], t.q + u * p.q_strides.node);
      load_vec<T>(dou[j], t.d_o + u * p.d_o_strides.node);
    }
#pragma unroll
    for (int j = 0; j < U; ++j) {
      score[j] = dot(qu[j], kr[j]);
      dp[j] = dot(dou[j], vr);
    }
    group_sums<L, U>(score, dp);
#pragma unroll
    for (int j = 0; j < U; ++j) {
      if (!valid[j]) continue;
      const float pr = gsa_prob(score[j] * t.scale, row_lse[j]);
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
  if (t.g != 0) return;
  if (t.piece >= 0) {
    float* out = dkv_pieces + ((t.piece * p.B + b) * p.H + h) * 2 * p.D + t.d0;
#pragma unroll
    for (int i = 0; i < V; ++i) {
      out[i] = dk[i];
      out[p.D + i] = dv[i];
    }
  } else {
    store_vec<T>(static_cast<T*>(p.dk) + offset(p.dk_strides, b, src, h) + t.d0, dk, t.scale);
    store_vec<T>(static_cast<T*>(p.dv) + offset(p.dv_strides, b, src, h) + t.d0, dv, 1.0f);
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

bool has_rel(const GsaParams& p) { return p.rel_emb != nullptr && p.R > 0; }

// d_rel_emb from edge_ds (every edge's dS written): slices, then their sum per relation.
template <typename T>
void drel_launch(const GsaParams& p, cudaStream_t stream) {
  using A = typename GsaAcc<T>::type;
  const BackwardLayout l = backward_layout(p);
  A* ws = static_cast<A*>(p.workspace);
  const int64_t slices = drel_slices(p);
  const dim3 grid(static_cast<unsigned>(p.R), static_cast<unsigned>(slices));
  drel_slice_kernel<T><<<grid, 64, 0, stream>>>(p, ws + l.edge_ds, ws + l.drel, slices);
  check_launch("graph_attention backward (d_rel_emb slices)");
  drel_reduce_kernel<T><<<static_cast<unsigned>(p.R), 64, 0, stream>>>(p, ws + l.drel, slices);
  check_launch("graph_attention backward (d_rel_emb)");
}

template <int P, typename T>
void backward_launch(const GsaParams& p, cudaStream_t stream, GsaCudaKernels kernels, bool d_rel) {
  using A = typename GsaAcc<T>::type;
  const BackwardLayout l = backward_layout(p);
  A* ws = static_cast<A*>(p.workspace);
  const bool rel = has_rel(p);
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
  if (rel && d_rel) drel_launch<T>(p, stream);
}

}  // namespace
}  // namespace gsa_cuda

int64_t gsa_cuda_delta_elems(const GsaParams& p) { return p.B * p.N * p.H; }

int64_t gsa_cuda_workspace_bytes(const GsaParams& p) {
  return gsa_cuda::backward_layout(p).total * gsa_cuda::acc_bytes(p);
}

namespace {

void check_workspace(const GsaParams& p) {
  if (p.workspace_bytes < gsa_cuda_workspace_bytes(p) || (p.rel_emb != nullptr && p.graph.rel_ptr == nullptr)) {
    throw Error("graph_attention backward on CUDA: needs a workspace of gsa_cuda_workspace_bytes (and the "
                "relation grouping with rel_emb)");
  }
}

}  // namespace

void gsa_backward_cuda(const GsaParams& p, void* stream, GsaCudaKernels kernels, bool d_rel) {
  if (p.B * p.N * p.H == 0) return;
  check_workspace(p);
  gsa_cuda::dispatch(p, [&](auto per_lane, auto type) {
    gsa_cuda::backward_launch<decltype(per_lane)::value, typename decltype(type)::type>(
        p, static_cast<cudaStream_t>(stream), kernels, d_rel);
  });
}

void gsa_backward_cuda_rel(const GsaParams& p, void* stream) {
  if (p.B * p.N * p.H == 0 || !gsa_cuda::has_rel(p)) return;
  check_workspace(p);
  gsa_cuda::dispatch(p, [&](auto, auto type) {
    gsa_cuda::drel_launch<typename decltype(type)::type>(p, static_cast<cudaStream_t>(stream));
  });
}

void* gsa_cuda_edge_ds(const GsaParams& p) {
  if (!gsa_cuda::has_rel(p)) return nullptr;
  return static_cast<char*>(p.workspace) + gsa_cuda::backward_layout(p).edge_ds * gsa_cuda::acc_bytes(p);
}

}  // namespace sb
