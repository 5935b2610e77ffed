// Forward drivers: row groups of a block, the choice of wide tile, 4-row tile, packed or per-row path, pieces.
// A part of the CPU cores (kernels/gsa_cpu_simd.cpp), compiled once per SIMD target: Highway includes it
// inside foreach_target's loop, so its guard toggles with HWY_TARGET_TOGGLE instead of blocking a second pass.

#if defined(SB_KERNELS_CPU_GSA_FORWARD_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef SB_KERNELS_CPU_GSA_FORWARD_INL_H_
#undef SB_KERNELS_CPU_GSA_FORWARD_INL_H_
#else
#define SB_KERNELS_CPU_GSA_FORWARD_INL_H_
#endif

#include <hwy/highway.h>
#include "kernels/cpu/gsa_wide-inl.h"

HWY_BEFORE_NAMESPACE();
namespace sb::HWY_NAMESPACE {
namespace {

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
  const auto run = [&](const RowGroup& grp) {
    forward_group<REL>(p, b, grp, m, l, acc, tab);
    finish_rows<T>(
        p, b, grp, [&](int i, int64_t h) { return GsaSoftmaxState<T>{m[i * H + h], l[i * H + h]}; },
        [&](int i, int64_t h, T* o_ih, T inv) { scale_copy(d, o_ih, acc + (i * H + h) * D, inv, D); });
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

}  // namespace
}  // namespace sb::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // SB_KERNELS_CPU_GSA_FORWARD_INL_H_ toggle
