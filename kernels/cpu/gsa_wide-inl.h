// Wide tiles (a row per vector lane, GEMM-like register blocks; forward_wide) and packed short rows (forward_short).
// A part of the CPU cores (kernels/gsa_cpu_simd.cpp), compiled once per SIMD target: Highway includes it
// inside foreach_target's loop, so its guard toggles with HWY_TARGET_TOGGLE instead of blocking a second pass.

#if defined(SB_KERNELS_CPU_GSA_WIDE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef SB_KERNELS_CPU_GSA_WIDE_INL_H_
#undef SB_KERNELS_CPU_GSA_WIDE_INL_H_
#else
#define SB_KERNELS_CPU_GSA_WIDE_INL_H_
#endif

#include <hwy/highway.h>
#include "kernels/cpu/gsa_tiles-inl.h"

HWY_BEFORE_NAMESPACE();
namespace sb::HWY_NAMESPACE {
namespace {

#if !(HWY_HAVE_SCALABLE || HWY_TARGET == HWY_SCALAR)
// Wide tiles: the forward of a group of up to R = V*N rows (V vectors of N lanes) that share most of their sources,
// row i in lane i, as flash attention lays out a block. A union column's scores are V vectors over the rows: its
// key row's elements, broadcast, times the rows' queries held transposed (qt [D][R]). Like a GEMM micro-kernel, a
// register block of C columns x V row vectors takes C*V FMAs per C broadcasts and V loads (AVX2: 6 x 2, the 4-row
// tile takes 4*J FMAs per 4 + J loads plus a reduce_parts per J columns). Max, rescale, exp and the row sums are
// lane-wise, with no horizontal step; the output accumulates transposed (ot [D][R]), a block of C elements of D by
// V row vectors in registers while the segment's weight vectors stream through against broadcast value elements.
// Relation terms: one table of every relation of the group where that costs little (window's clipped distances):
// columns read their slot's vectors (gathered per lane where the rows of a column disagree); else by column (bpt):
// a column whose rows agree adds its relation row to the key row once per head (into kr) and only the disagreeing
// columns read the table.
// Accumulators per register block, C*V: 12 FMA chains keep two pipes of latency 4 busy, and with V row vectors and
// a broadcast fit 16 registers (24 on AVX-512's 32 measured 2x slower: the C key row pointers no longer fit the
// general registers).
constexpr int kWideAcc = 12;
constexpr int kWideTail = 2;   // the smaller blocks after the full ones (segments are padded to a multiple of it)
constexpr int kWideSeg = kGsaCpuWideSeg;
static_assert(kWideSeg % kWideAcc == 0 && kWideSeg % kWideTail == 0, "segments hold whole blocks");

// Row vectors of a wide tile of T on this target (two where their rows still fit a row block), and its rows.
template <typename T>
constexpr int wide_vecs() {
  return 2 * static_cast<int>(hn::MaxLanes(hn::ScalableTag<T>())) <= kGsaCpuRowBlock ? 2 : 1;
}
template <typename T>
constexpr int wide_rows() {
  return wide_vecs<T>() * static_cast<int>(hn::MaxLanes(hn::ScalableTag<T>()));
}
template <typename T>
using WideGroup = RowGroupT<wide_rows<T>()>;

// Calls f(j0, std::integral_constant<int, C>) over [0, n) in blocks of C = kWideAcc / V, then kWideTail (n: a
// multiple of kWideTail).
template <int V, typename F>
HWY_INLINE void wide_blocks(int n, F&& f) {
  constexpr int C = kWideAcc / V;
  int j0 = 0;
  for (; j0 + C <= n; j0 += C) f(j0, std::integral_constant<int, C>());
  for (; j0 < n; j0 += kWideTail) f(j0, std::integral_constant<int, kWideTail>());
}

// s[c*V + v] = sum_e qt[e*R + v*N ..] * x[c][e], e < len, for C columns: lane i of vector v holds row v*N + i's dot
// with column c.
template <int C, int V, class D, typename T = hn::TFromD<D>>
HWY_INLINE void wide_dots(D d, const T* HWY_RESTRICT qt, const T* const* x, int64_t len, hn::Vec<D>* s) {
  using Vec = hn::Vec<D>;
  constexpr int N = static_cast<int>(hn::MaxLanes(D()));
  Vec a[C * V];
  for (int t = 0; t < C * V; ++t) a[t] = hn::Zero(d);
  for (int64_t e = 0; e < len; ++e) {
    Vec qv[V];
    for (int v = 0; v < V; ++v) qv[v] = hn::Load(d, qt + (e * V + v) * N);
    for (int c = 0; c < C; ++c) {
      const Vec xb = hn::Set(d, x[c][e]);
      for (int v = 0; v < V; ++v) a[c * V + v] = hn::MulAdd(xb, qv[v], a[c * V + v]);
    }
  }
  for (int t = 0; t < C * V; ++t) s[t] = a[t];
}

// ot[e*R ..] = alpha * ot + sum_{j < ns} w[j*R ..] * x_j[e] for K elements e from e0 (x_j = x[j] + x_off), the K*V
// accumulators in registers while the columns stream through.
template <int K, int V, class D, typename T = hn::TFromD<D>>
HWY_INLINE void wide_axpy(D d, T* HWY_RESTRICT ot, const hn::Vec<D>* alpha, const T* HWY_RESTRICT w, int ns,
                          const T* const* x, int64_t x_off, int64_t e0) {
  using Vec = hn::Vec<D>;
  constexpr int N = static_cast<int>(hn::MaxLanes(D()));
  Vec a[K * V];
  for (int k = 0; k < K; ++k) {
    for (int v = 0; v < V; ++v) a[k * V + v] = hn::Mul(hn::Load(d, ot + ((e0 + k) * V + v) * N), alpha[v]);
  }
  for (int j = 0; j < ns; ++j) {
    Vec wv[V];
    for (int v = 0; v < V; ++v) wv[v] = hn::Load(d, w + (j * V + v) * N);
    const T* xj = x[j] + x_off + e0;
    for (int k = 0; k < K; ++k) {
      const Vec xb = hn::Set(d, xj[k]);
      for (int v = 0; v < V; ++v) a[k * V + v] = hn::MulAdd(xb, wv[v], a[k * V + v]);
    }
  }
  for (int k = 0; k < K; ++k) {
    for (int v = 0; v < V; ++v) hn::Store(a[k * V + v], d, ot + ((e0 + k) * V + v) * N);
  }
}

// wide_axpy over the whole of D (x_off: the head's offset in the rows x): blocks of kWideAcc / V, then smaller.
template <int V, class D, typename T = hn::TFromD<D>>
HWY_INLINE void wide_axpy_rows(D d, T* HWY_RESTRICT ot, const hn::Vec<D>* alpha, const T* HWY_RESTRICT w, int ns,
                               const T* const* x, int64_t x_off, int64_t len) {
  constexpr int K = kWideAcc / V;
  int64_t e = 0;
  for (; e + K <= len; e += K) wide_axpy<K, V>(d, ot, alpha, w, ns, x, x_off, e);
  for (; e + kWideTail <= len; e += kWideTail) wide_axpy<kWideTail, V>(d, ot, alpha, w, ns, x, x_off, e);
  for (; e < len; ++e) wide_axpy<1, V>(d, ot, alpha, w, ns, x, x_off, e);
}

// Scratch of a wide tile from `scratch`, aligned for vector loads.
template <typename T>
T* wide_scratch(T* scratch) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(scratch), align = 64;
  return reinterpret_cast<T*>((a + align - 1) / align * align);
}

// 16-lane targets (AVX-512 fp32) keep wide tiles to groups whose union is within kWideWaste16 of their mean row and
// whose relation terms come from one table (or none): the 4-row tiles there load four key rows per vector already,
// and measured faster for window 64 (union 1.23x its rows at 16 rows) and bpt k=16, 64 (relations by column).
constexpr double kWideWaste16 = 1.15;
template <typename T>
constexpr bool wide_16() {
  return hn::MaxLanes(hn::ScalableTag<T>()) >= 16;
}

// Before the union's merge, on 16-lane targets: a group with more distinct relations than half the largest union a
// wide tile accepts there cannot take one table (bpt k=64's 16-row groups: the merge alone cost 5%).
template <typename T, class G>
bool wide_feasible(const GsaParams& p, const G& grp) {
  if (!wide_16<T>() || p.rel_emb == nullptr || grp.n == 0) return true;
  int64_t total = 0;
  for (int i = 0; i < grp.n; ++i) total += grp.e1[i] - grp.e0[i];
  TileRelations rels;
  return rels.pays(p, grp, static_cast<int64_t>(kWideWaste16 * static_cast<double>(total) / grp.n));
}

// xt[(h*D + e)*R + i] = x_i,h[e] of the group's rows (zeros for lanes past them): rows held transposed.
template <int R, typename T>
void wide_transpose(const GsaParams& p, int64_t b, const RowGroupT<R>& grp, const T* x, const GsaStrides& st,
                    T* xt) {
  const T* x_i[R];
  for (int i = 0; i < grp.n; ++i) x_i[i] = x + at(st, b, grp.u[i]);
  // Row by row within each element: the stores stay contiguous (by column they strided the whole of xt, L1's size).
  for (int64_t h = 0; h < p.H; ++h) {
    for (int64_t e = 0; e < p.D; ++e) {
      T* out = xt + (h * p.D + e) * R;
      const int64_t off = h * st.head + e;
      for (int i = 0; i < grp.n; ++i) out[i] = x_i[i][off];
      for (int i = grp.n; i < R; ++i) out[i] = T(0);
    }
  }
}

// out[h * head + e] = factor * xt[(h*D + e)*R + i] for h < H: lane i of rows held transposed, written back as a row.
template <int R, typename T>
void wide_row_out(const T* xt, int i, int64_t H, int64_t Dm, T factor, T* out, int64_t head) {
  for (int64_t h = 0; h < H; ++h) {
    for (int64_t e = 0; e < Dm; ++e) out[h * head + e] = xt[(h * Dm + e) * R + i] * factor;
  }
}

// tab [H][slot][R] = q_i,h . r of each slot's relation, from the rows' queries held transposed (qt [H][D][R]).
template <int V, class D, typename T = hn::TFromD<D>>
void wide_table(D d, const GsaParams& p, const TileRelations& rels, const T* qt, T* tab) {
  constexpr int N = static_cast<int>(hn::MaxLanes(D()));
  constexpr int R = V * N;
  const T* rel = static_cast<const T*>(p.rel_emb);
  const int nslot = rels.count();
  const T* rp[kWideAcc];
  hn::Vec<D> s[kWideAcc];
  for (int64_t h = 0; h < p.H; ++h) {
    wide_blocks<V>((nslot + kWideTail - 1) / kWideTail * kWideTail, [&](int s0, auto cols) {
      constexpr int C = decltype(cols)::value;
      for (int c = 0; c < C; ++c) rp[c] = rel + rels.relation(std::min(s0 + c, nslot - 1)) * p.rel_stride;
      wide_dots<C, V>(d, qt + h * p.D * R, rp, p.D, s);
      for (int c = 0; c < C && s0 + c < nslot; ++c) {
        for (int v = 0; v < V; ++v) hn::Store(s[c * V + v], d, tab + (h * nslot + s0 + c) * R + v * N);
      }
    });
  }
}

// One segment of a wide tile's union as both wide tiles read it: each column's key and value rows, the mask ok
// (1 where row i has an edge to column j, at j*R + i), and how its relation term comes: none (also padding), a
// slot's vectors (kSlot), gathered per lane (kGather, lane indices in tix), or added to the key row (kKeyRel,
// relation row rrow and the relation in slot; by column only). Written before the head loop.
template <typename T, int R>
struct WideColumns {
  using TI = hn::TFromD<hn::RebindToSigned<hn::ScalableTag<T>>>;
  enum Kind : uint8_t { kNone, kSlot, kGather, kKeyRel };
  const T* kp[kWideSeg];
  const T* vp[kWideSeg];
  const T* rrow[kWideSeg];
  uint8_t kind[kWideSeg];
  int32_t slot[kWideSeg];
  HWY_ALIGN T ok[kWideSeg * R];
  HWY_ALIGN TI tix[kWideSeg * R];
  // x plus column j's relation term for row vector v (t = j*R + v*N) from the head's table tab_h.
  template <class D>
  HWY_INLINE hn::Vec<D> add_relation(D d, hn::Vec<D> x, const T* tab_h, int j, int t, int v) const {
    constexpr int N = static_cast<int>(hn::MaxLanes(D()));
    if (kind[j] == kSlot) return hn::Add(x, hn::Load(d, tab_h + slot[j] * R + v * N));
    if (kind[j] == kGather) {
      return hn::Add(x, hn::GatherIndex(d, tab_h, hn::Load(hn::RebindToSigned<D>(), tix + t)));
    }
    return x;
  }
  // xp[j] = column j's key row in the head at k_off, kKeyRel columns' plus their relation row (written to kr [j][D]).
  void key_rows(int padded, int64_t k_off, int64_t Dm, T* kr, const T** xp) const {
    for (int j = 0; j < padded; ++j) {
      if (kind[j] != kKeyRel) {
        xp[j] = kp[j] + k_off;
        continue;
      }
      T* krj = kr + j * Dm;
      for (int64_t e = 0; e < Dm; ++e) krj[e] = kp[j][k_off + e] + rrow[j][e];
      xp[j] = krj;
    }
  }
  void fill(const GsaParams& p, const In<T>& in, int64_t b, const TileUnion<kWideSeg, R>& un,
            const TileRelations& rels) {
    for (int j = 0; j < un.padded; ++j) {
      const int64_t* a = un.at + j * R;
      kp[j] = in.k + at(p.k_strides, b, un.node[j]);
      vp[j] = in.v + at(p.v_strides, b, un.node[j]);
      for (int i = 0; i < R; ++i) ok[j * R + i] = a[i] >= 0 ? T(1) : T(0);
      kind[j] = kNone;
      if (in.rel == nullptr || j >= un.n) continue;
      const int32_t c = TileRelations::column_relation<R>(p, a);
      if (c >= 0 && rels.by_column()) {
        kind[j] = kKeyRel;
        rrow[j] = in.rel + c * p.rel_stride;
        slot[j] = c;
      } else if (c >= 0) {
        kind[j] = kSlot;
        slot[j] = rels.slot(c);
      } else {
        kind[j] = kGather;
        for (int i = 0; i < R; ++i) {
          tix[j * R + i] = static_cast<TI>((a[i] >= 0 ? rels.slot(p.graph.rel[a[i]]) : 0) * R + i);
        }
      }
    }
  }
};

// Whether a wide tile takes the group, with rels' slots: relation terms as the 4-row tile takes them (not by
// column on 16-lane targets).
template <typename T, class G>
bool wide_relations(const GsaParams& p, const G& grp, int64_t unions, TileRelations& rels) {
  if (wide_16<T>()) return p.rel_emb == nullptr || rels.pays(p, grp, unions);
  return tile_relations(p, grp, unions, rels);
}

// Runs the group as a wide tile when its relation terms allow (false: nothing done), writing o and lse of its rows.
// Scratch: gsa_cpu_scratch_elems covers qt, ot [H][D][R], m, l [H][R], kr [kWideSeg][D] and the table [H][slot][R].
template <bool REL, typename T>
bool forward_wide(const GsaParams& p, int64_t b, const WideGroup<T>& grp, int64_t unions, T* scratch) {
  const hn::ScalableTag<T> d;
  using Vec = hn::Vec<decltype(d)>;
  constexpr int N = static_cast<int>(hn::MaxLanes(decltype(d)()));
  constexpr int V = wide_vecs<T>();
  constexpr int R = V * N;
  static_assert(R <= kGsaCpuWideRows, "scratch covers the rows");
  TileRelations rels;
  if (!wide_relations<T>(p, grp, unions, rels)) return false;
  const In<T> in(p);
  const int64_t H = p.H, Dm = p.D, HDR = H * Dm * R;
  T* qt = wide_scratch(scratch);  // [H][D][R]
  T* ot = qt + HDR;               // [H][D][R]
  T* m = ot + HDR;                // [H][R]
  T* l = m + H * R;               // [H][R]
  T* kr = l + H * R;              // [kWideSeg][D]: key rows plus their column's relation row (by column)
  T* tab = kr + kWideSeg * Dm;    // [H][slot][R] = q_i,h . r of the slot's relation
  const int nslot = rels.count();
  wide_transpose(p, b, grp, in.q, p.q_strides, qt);
  std::fill(ot, ot + HDR, T(0));
  std::fill(m, m + H * R, gsa_neg_inf<T>());
  std::fill(l, l + H * R, T(0));
  if constexpr (REL) wide_table<V>(d, p, rels, qt, tab);
  using Cols = WideColumns<T, R>;
  TileUnion<kWideSeg, R> un(grp, p.graph.col);
  Cols col;
  const T* xp[kWideSeg];
  HWY_ALIGN T sc[kWideSeg * R];  // scores, then weights, at j*R + i
  const Vec scale = hn::Set(d, static_cast<T>(p.scale));
  const Vec neg_inf = hn::Set(d, gsa_neg_inf<T>());
  while (un.next(kWideTail)) {
    const int ns = un.n, padded = un.padded;
    col.fill(p, in, b, un, rels);
    for (int64_t h = 0; h < H; ++h) {
      const int64_t k_off = h * p.k_strides.head;
      const T* qt_h = qt + h * Dm * R;
      const T* tab_h = tab + h * nslot * R;
      col.key_rows(padded, k_off, Dm, kr, xp);
      Vec mx[V];
      Vec s[kWideAcc];
      for (int v = 0; v < V; ++v) mx[v] = neg_inf;
      wide_blocks<V>(padded, [&](int j0, auto cols) {
        constexpr int C = decltype(cols)::value;
        wide_dots<C, V>(d, qt_h, xp + j0, Dm, s);
        for (int c = 0; c < C; ++c) {
          const int j = j0 + c;
          for (int v = 0; v < V; ++v) {
            Vec x = s[c * V + v];
            const int t = j * R + v * N;
            if (REL) x = col.add_relation(d, x, tab_h, j, t, v);
            x = hn::IfThenElse(hn::Gt(hn::Load(d, col.ok + t), hn::Zero(d)), hn::Mul(x, scale), neg_inf);
            hn::Store(x, d, sc + t);
            mx[v] = hn::Max(mx[v], x);
          }
        }
      });
      // Lane-wise: the new max, the rescale of the state (0 where nothing was seen yet), exp over the segment.
      Vec alpha[V], m_use[V], sum[V];
      for (int v = 0; v < V; ++v) {
        T* m_hv = m + h * R + v * N;
        const Vec m_old = hn::Load(d, m_hv);
        const Vec m_new = hn::Max(m_old, mx[v]);
        m_use[v] = hn::IfThenElse(hn::Eq(m_new, neg_inf), hn::Zero(d), m_new);
        alpha[v] = hn::IfThenElse(hn::Eq(m_old, neg_inf), hn::Zero(d), vexp(d, hn::Sub(m_old, m_use[v])));
        hn::Store(m_new, d, m_hv);
        sum[v] = hn::Zero(d);
      }
      for (int j = 0; j < padded; ++j) {
        for (int v = 0; v < V; ++v) {
          const int t = j * R + v * N;
          const Vec pr = vexp(d, hn::Sub(hn::Load(d, sc + t), m_use[v]));
          hn::Store(pr, d, sc + t);
          sum[v] = hn::Add(sum[v], pr);
        }
      }
      for (int v = 0; v < V; ++v) {
        T* l_hv = l + h * R + v * N;
        hn::Store(hn::MulAdd(hn::Load(d, l_hv), alpha[v], sum[v]), d, l_hv);
      }
      wide_axpy_rows<V>(d, ot + h * Dm * R, alpha, sc, ns, col.vp, h * p.v_strides.head, Dm);
    }
  }
  finish_rows<T>(
      p, b, grp, [&](int i, int64_t h) { return GsaSoftmaxState<T>{m[h * R + i], l[h * R + i]}; },
      [&](int i, int64_t h, T* o_ih, T inv) { wide_row_out<R>(ot + h * Dm * R, i, 1, Dm, inv, o_ih, 0); });
  return true;
}

// Whether forward_wide runs a group whose sources tile.
template <typename T, class G>
bool wide_applies(const GsaParams& p, const G& grp, int64_t unions) {
  TileRelations rels;
  return wide_relations<T>(p, grp, unions, rels);
}
#else
template <bool REL, typename T, class G>
bool forward_wide(const GsaParams&, int64_t, const G&, int64_t, T*) {
  return false;
}
template <typename T, class G>
bool wide_applies(const GsaParams&, const G&, int64_t) {
  return false;
}
#endif

// Rows too short to fill a vector alone (bpt's and segtree's lowest span nodes: 2 to 4 sources each), packed: the
// group's edges side by side in the lanes of up to kShortVecs vectors, each lane with its own row's query, so one
// chunk of dots serves every row where the per-row path pads each row to a whole vector (bpt k=4 at n=8192: 6,144
// rows of 2 or 4 edges, 3/4 and 1/2 of their lanes padding). Every edge fits one pass: no rescale.
constexpr int kShortVecs = 2;

// Whether forward_short runs the group: 2 or more edges, all within kShortVecs vectors, and some row shorter than a
// vector.
template <typename T>
bool short_applies(const GsaParams& p, const RowGroup& grp) {
#if HWY_HAVE_SCALABLE || HWY_TARGET == HWY_SCALAR
  (void)p, (void)grp;
  return false;
#else
  constexpr int64_t N = static_cast<int64_t>(hn::MaxLanes(hn::ScalableTag<T>()));
  int64_t total = 0, shortest = N;
  for (int i = 0; i < grp.n; ++i) {
    total += grp.e1[i] - grp.e0[i];
    if (grp.e1[i] > grp.e0[i]) shortest = std::min(shortest, grp.e1[i] - grp.e0[i]);
  }
  return p.D % N == 0 && total >= 2 && total <= kShortVecs * N && shortest < N;
#endif
}

template <bool REL, typename T>
bool forward_short(const GsaParams& p, int64_t b, const RowGroup& grp, T* m, T* l, T* acc) {
#if HWY_HAVE_SCALABLE || HWY_TARGET == HWY_SCALAR
  (void)p, (void)b, (void)grp, (void)m, (void)l, (void)acc;
  return false;
#else
  if (!short_applies<T>(p, grp)) return false;
  const hn::ScalableTag<T> d;
  constexpr int N = static_cast<int>(hn::MaxLanes(decltype(d)()));
  constexpr int L = kShortVecs * N;
  const In<T> in(p);
  const GsaGraphView& g = p.graph;
  const int64_t H = p.H, Dm = p.D;
  const T* qp[L];
  const T* kp[L];
  const T* vp[L];
  const T* rp[L];
  int first[kGsaCpuRowGroup + 1];
  int row_of[L];
  int total = 0;
  for (int i = 0; i < grp.n; ++i) {
    first[i] = total;
    const T* q_i = in.q + at(p.q_strides, b, grp.u[i]);
    for (int64_t e = grp.e0[i]; e < grp.e1[i]; ++e, ++total) {
      qp[total] = q_i;
      kp[total] = in.k + at(p.k_strides, b, g.col[e]);
      vp[total] = in.v + at(p.v_strides, b, g.col[e]);
      rp[total] = REL ? in.rel + g.rel[e] * p.rel_stride : nullptr;
      row_of[total] = i;
    }
  }
  first[grp.n] = total;
  const int nv = (total + N - 1) / N;
  for (int t = total; t < nv * N; ++t) qp[t] = qp[0], kp[t] = kp[0], rp[t] = rp[0];  // padding lanes, masked
  HWY_ALIGN T sc[L];
  HWY_ALIGN T msub[L];
  for (int64_t h = 0; h < H; ++h) {
    for (int v = 0; v < nv; ++v) {
      const auto valid = hn::FirstN(d, static_cast<size_t>(total - v * N));
      hn::Store(chunk_scores<REL, kFixedNone>(d, p, qp + v * N, h, kp + v * N, rp + v * N, valid), d, sc + v * N);
    }
    for (int i = 0; i < grp.n; ++i) {
      T mx = gsa_neg_inf<T>();
      for (int t = first[i]; t < first[i + 1]; ++t) mx = std::max(mx, sc[t]);
      m[i * H + h] = mx;
    }
    for (int t = 0; t < nv * N; ++t) {
      const T mx = t < total ? m[row_of[t] * H + h] : T(0);
      msub[t] = mx == gsa_neg_inf<T>() ? T(0) : mx;  // a row of -inf scores: exp(-inf) = 0
    }
    for (int v = 0; v < nv; ++v) {
      hn::Store(vexp(d, hn::Sub(hn::Load(d, sc + v * N), hn::Load(d, msub + v * N))), d, sc + v * N);
    }
    for (int i = 0; i < grp.n; ++i) {
      const int n_i = first[i + 1] - first[i];
      if (n_i == 0) continue;
      T sum = 0;
      for (int t = first[i]; t < first[i + 1]; ++t) sum += sc[t];
      l[i * H + h] = sum;
      group_axpy<false>(d, acc + (i * H + h) * Dm, T(1), sc + first[i], n_i, vp + first[i], h * p.v_strides.head,
                        static_cast<const T* const*>(nullptr), Dm);
    }
  }
  return true;
#endif
}

}  // namespace
}  // namespace sb::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // SB_KERNELS_CPU_GSA_WIDE_INL_H_ toggle
