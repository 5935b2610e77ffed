// Row groups and the per-row forward: edge segments, online softmax per (segment, head, row), per-row relation tables.
// A part of the CPU cores (kernels/gsa_cpu_simd.cpp), compiled once per SIMD target: Highway includes it
// inside foreach_target's loop, so its guard toggles with HWY_TARGET_TOGGLE instead of blocking a second pass.

#if defined(SB_KERNELS_CPU_GSA_ROWS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef SB_KERNELS_CPU_GSA_ROWS_INL_H_
#undef SB_KERNELS_CPU_GSA_ROWS_INL_H_
#else
#define SB_KERNELS_CPU_GSA_ROWS_INL_H_
#endif

#include <hwy/cache_control.h>
#include <hwy/highway.h>
#include "kernels/cpu/gsa_simd_helpers-inl.h"

HWY_BEFORE_NAMESPACE();
namespace sb::HWY_NAMESPACE {
namespace {

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

// Writes o and lse of a group's finished rows, the same for every way a group runs: state(i, h) is row i's softmax
// state of head h, and out(i, h, o_ih, inv) writes that row and head's accumulator times inv to o_ih.
template <typename T, class G, class State, class Out>
HWY_INLINE void finish_rows(const GsaParams& p, int64_t b, const G& grp, State&& state, Out&& out) {
  T* o = static_cast<T*>(p.o);
  T* lse = static_cast<T*>(p.lse);
  for (int i = 0; i < grp.n; ++i) {
    const int64_t u = grp.u[i];
    T* o_u = o + at(p.o_strides, b, u);
    T* lse_u = lse + (b * p.N + u) * p.H;
    for (int64_t h = 0; h < p.H; ++h) {
      const GsaSoftmaxState<T> st = state(i, h);
      out(i, h, o_u + h * p.o_strides.head, gsa_inv_norm(st));
      lse_u[h] = gsa_lse(st);
    }
  }
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

}  // namespace
}  // namespace sb::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // SB_KERNELS_CPU_GSA_ROWS_INL_H_ toggle
