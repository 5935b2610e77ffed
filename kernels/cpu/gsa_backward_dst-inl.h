// Backward by destination: delta, dq and d_rel_emb per row, 4-row tile and wide tile, the edge cache, pieces.
// A part of the CPU cores (kernels/gsa_cpu_simd.cpp), compiled once per SIMD target: Highway includes it
// inside foreach_target's loop, so its guard toggles with HWY_TARGET_TOGGLE instead of blocking a second pass.

#if defined(SB_KERNELS_CPU_GSA_BACKWARD_DST_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef SB_KERNELS_CPU_GSA_BACKWARD_DST_INL_H_
#undef SB_KERNELS_CPU_GSA_BACKWARD_DST_INL_H_
#else
#define SB_KERNELS_CPU_GSA_BACKWARD_DST_INL_H_
#endif

#include <hwy/highway.h>
#include "kernels/cpu/gsa_forward-inl.h"

HWY_BEFORE_NAMESPACE();
namespace sb::HWY_NAMESPACE {
namespace {

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

}  // namespace
}  // namespace sb::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // SB_KERNELS_CPU_GSA_BACKWARD_DST_INL_H_ toggle
