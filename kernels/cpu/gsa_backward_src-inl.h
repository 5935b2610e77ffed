// Backward by source: dk and dv per source, 4-row tile and wide tile (P and dS from the edge cache), pieces.
// A part of the CPU cores (kernels/gsa_cpu_simd.cpp), compiled once per SIMD target: Highway includes it
// inside foreach_target's loop, so its guard toggles with HWY_TARGET_TOGGLE instead of blocking a second pass.

#if defined(SB_KERNELS_CPU_GSA_BACKWARD_SRC_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef SB_KERNELS_CPU_GSA_BACKWARD_SRC_INL_H_
#undef SB_KERNELS_CPU_GSA_BACKWARD_SRC_INL_H_
#else
#define SB_KERNELS_CPU_GSA_BACKWARD_SRC_INL_H_
#endif

#include <hwy/highway.h>
#include "kernels/cpu/gsa_backward_dst-inl.h"

HWY_BEFORE_NAMESPACE();
namespace sb::HWY_NAMESPACE {
namespace {

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

}  // namespace
}  // namespace sb::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // SB_KERNELS_CPU_GSA_BACKWARD_SRC_INL_H_ toggle
