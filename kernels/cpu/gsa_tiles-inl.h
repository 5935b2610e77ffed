// 4-row register tiles over the union of a group's sources: the union walk, relation terms, forward_tile.
// A part of the CPU cores (kernels/gsa_cpu_simd.cpp), compiled once per SIMD target: Highway includes it
// inside foreach_target's loop, so its guard toggles with HWY_TARGET_TOGGLE instead of blocking a second pass.

#if defined(SB_KERNELS_CPU_GSA_TILES_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef SB_KERNELS_CPU_GSA_TILES_INL_H_
#undef SB_KERNELS_CPU_GSA_TILES_INL_H_
#else
#define SB_KERNELS_CPU_GSA_TILES_INL_H_
#endif

#include <hwy/highway.h>
#include "kernels/cpu/gsa_rows-inl.h"

HWY_BEFORE_NAMESPACE();
namespace sb::HWY_NAMESPACE {
namespace {

// Forward of rows that share most of their sources (window rows, bigbird blocks), as a register tile: the
// group's rows (up to kTileRows; missing rows are empty) walk the sorted union of their sources in segments, and
// each key, value or relation row loaded serves every row of the group, where the per-row path loads it once per
// row. Dots of J = N/kTileRows rows x kTileRows query rows fill the N parts of one reduce_parts (lane
// j*kTileRows + i), so a chunk takes kTileRows*J FMAs for J + kTileRows loads per vector of D. Relation terms
// q_i . r_rel come from a table over the relations the group's edges use, built the same way. Union positions a
// row lacks score -inf and weigh 0 (a non-finite value row of such a source would still reach the row as 0 * inf).
constexpr int kTileRows = 4;
static_assert(kTileRows == kGsaCpuRowGroup, "the tile covers one row group");

// The tile pays while the union of the group's sources is at most kTileWaste times the mean row length.
constexpr double kTileWaste = kGsaTileWaste;
// Rows shorter than this on average do not pay for the merge (bpt k=4 causal at n=512 measured slower as tiles).
constexpr int64_t kTileMinRow = 32;
// The backward by source's tile (dkv_tile) reads P and dS from the edge cache and only accumulates, so it pays for
// shorter rows: bpt k=4's tokens, 23 destinations each on average.
constexpr int64_t kDkvTileMinRow = 8;

// The union of the row group whose merge tile_union finished last on this thread (one store per R): the tiles
// that then run the group, and the relation planning before them, replay it instead of merging again (the merge
// of R sorted rows took 6-9% of a bpt forward when it ran three times per group).
template <int R>
struct UnionStore {
  bool valid = false;
  const int32_t* col = nullptr;
  int n_rows = 0;
  int64_t e0[R], e1[R];
  std::vector<int64_t> node, at;  // every column of the union, and its entries at[j*R + i]
  static UnionStore& mine() {
    thread_local UnionStore s;
    return s;
  }
  // Whether the store holds the union of grp's rows over col (the merge depends on nothing else).
  bool holds(const RowGroupT<R>& grp, const int32_t* c) const {
    if (!valid || c != col || grp.n != n_rows) return false;
    for (int i = 0; i < grp.n; ++i) if (grp.e0[i] != e0[i] || grp.e1[i] != e1[i]) return false;
    return true;
  }
  void begin() {
    valid = false;
    node.clear();
    at.clear();
  }
  void finish(const RowGroupT<R>& grp, const int32_t* c) {
    valid = true, col = c, n_rows = grp.n;
    for (int i = 0; i < grp.n; ++i) e0[i] = grp.e0[i], e1[i] = grp.e1[i];
  }
};

// Walks the sorted union of a row group's columns (sources, or destinations in the backward by source) segment by
// segment: node[j] is the segment's j-th column, at[j*R + i] the position in col of row i's entry for it
// (-1: none). Columns from `padded` up to a multiple of `pad` repeat the first, with no entries. Replays the
// thread's UnionStore when it holds the group.
template <int S, int R = kTileRows>
struct TileUnion {
  int64_t node[S];
  int64_t at[S * R];
  int n = 0;       // columns in the segment
  int padded = 0;  // n rounded up to the multiple
  TileUnion(const RowGroupT<R>& grp, const int32_t* col) : grp_(grp), col_(col) {
    const UnionStore<R>& st = UnionStore<R>::mine();
    if (st.holds(grp, col)) stored_ = &st;
    for (int i = 0; i < R; ++i) c_[i] = i < grp.n ? grp.e0[i] : 0;
  }
  // The next segment of at most S columns; false at the end.
  bool next(int pad) {
    if (stored_ != nullptr) {
      n = static_cast<int>(std::min<int64_t>(S, static_cast<int64_t>(stored_->node.size()) - pos_));
      std::copy_n(stored_->node.begin() + pos_, n, node);
      std::copy_n(stored_->at.begin() + pos_ * R, n * R, at);
      pos_ += n;
    } else {
      merge();
    }
    padded = (n + pad - 1) / pad * pad;
    for (int j = n; j < padded; ++j) {
      node[j] = node[0];
      for (int i = 0; i < R; ++i) at[j * R + i] = -1;
    }
    return n > 0;
  }

 private:
  void merge() {
    for (n = 0; n < S; ++n) {
      int64_t lo = INT64_MAX;
      for (int i = 0; i < grp_.n; ++i) if (c_[i] < grp_.e1[i]) lo = std::min<int64_t>(lo, col_[c_[i]]);
      if (lo == INT64_MAX) break;
      for (int i = 0; i < R; ++i) {
        const bool has = i < grp_.n && c_[i] < grp_.e1[i] && col_[c_[i]] == lo;
        at[n * R + i] = has ? c_[i]++ : -1;
      }
      node[n] = lo;
    }
  }
  const RowGroupT<R>& grp_;
  const int32_t* col_;
  const UnionStore<R>* stored_ = nullptr;
  int64_t pos_ = 0;
  int64_t c_[R];
};

// The union of rows that each read a run of consecutive columns (window's rows), written straight into st without
// the R-way merge. Returns its size, 0 when it has more than `most` columns, -1 when some row is not one run (then
// the merge decides). Columns between the runs that no row reads are skipped, not walked.
template <int R>
int64_t contiguous_union(const RowGroupT<R>& grp, const int32_t* col, double most, UnionStore<R>& st) {
  int64_t first[R], last[R], lo = INT64_MAX, hi = INT64_MIN;  // row i's run: columns first[i]..last[i]
  for (int i = 0; i < R; ++i) {
    first[i] = INT64_MAX, last[i] = INT64_MIN;  // no row, or an empty one: reads nothing
    if (i >= grp.n || grp.e1[i] == grp.e0[i]) continue;
    first[i] = col[grp.e0[i]], last[i] = col[grp.e1[i] - 1];
    if (last[i] - first[i] != grp.e1[i] - grp.e0[i] - 1) return -1;  // sorted and distinct: a gap in the row
    lo = std::min(lo, first[i]), hi = std::max(hi, last[i]);
  }
  if (lo > hi) return -1;
  int64_t n = 0;
  for (int64_t c = lo; c <= hi; ++c) {
    st.at.resize(static_cast<size_t>((n + 1) * R));
    int64_t* at = st.at.data() + n * R;
    bool any = false;
    int64_t next = INT64_MAX;  // the first run starting after c
    for (int i = 0; i < R; ++i) {
      const bool has = c >= first[i] && c <= last[i];
      at[i] = has ? grp.e0[i] + (c - first[i]) : -1;
      any = any || has;
      if (first[i] > c) next = std::min(next, first[i]);
    }
    if (!any) {  // between the rows' runs: on to the next one (there is one, since c < hi)
      c = next - 1;
      continue;
    }
    st.node.push_back(c);
    if (static_cast<double>(++n) > most) return 0;
  }
  st.at.resize(static_cast<size_t>(n * R));
  return n;
}

// Returns the size of the union when the tile applies, else 0 (col: the sources of the rows, or the destinations of
// sources in the backward by source).
template <class D, int R>
int64_t tile_union(D d, const GsaParams& p, const RowGroupT<R>& grp, const int32_t* col, double waste = kTileWaste,
                   int64_t min_row = kTileMinRow) {
#if HWY_HAVE_SCALABLE || HWY_TARGET == HWY_SCALAR
  (void)d, (void)p, (void)grp, (void)col, (void)waste, (void)min_row;
  return 0;
#else
  (void)d;
  constexpr size_t N = hn::MaxLanes(D());
  if (N < static_cast<size_t>(kTileRows) || grp.n < 2 || p.D % static_cast<int64_t>(N) != 0) return 0;
  int64_t total = 0;
  for (int i = 0; i < grp.n; ++i) total += grp.e1[i] - grp.e0[i];
  if (total < min_row * grp.n) return 0;
  for (int i = 0; i < grp.n; ++i) {
    for (int64_t e = grp.e0[i] + 1; e < grp.e1[i]; ++e) if (col[e] <= col[e - 1]) return 0;  // merge needs order
  }
  const double most = waste * static_cast<double>(total) / grp.n;
  if constexpr (R > kTileRows) {
    // The first and last rows' union bounds the group's from below: a two-way count refuses most groups of a wide
    // tile that would not pay before the R-way merge (window 64's 16 rows on AVX-512, bpt's span sources).
    const int last = grp.n - 1;
    int64_t a = grp.e0[0], z = grp.e0[last], pair = 0;
    while (a < grp.e1[0] && z < grp.e1[last]) {
      ++pair;
      if (col[a] == col[z]) ++a, ++z;
      else if (col[a] < col[z]) ++a;
      else ++z;
    }
    pair += (grp.e1[0] - a) + (grp.e1[last] - z);
    if (static_cast<double>(pair) > most) return 0;
  }
  int64_t unions = 0;
  UnionStore<R>& st = UnionStore<R>::mine();
  st.begin();
  const int64_t runs = contiguous_union(grp, col, most, st);
  if (runs >= 0) {
    if (runs > 0) st.finish(grp, col);
    return runs;
  }
  TileUnion<64, R> un(grp, col);  // merges: the store is invalid
  while (un.next(1)) {
    unions += un.n;
    if (static_cast<double>(unions) > most) return 0;
    st.node.insert(st.node.end(), un.node, un.node + un.n);
    st.at.insert(st.at.end(), un.at, un.at + un.n * R);
  }
  st.finish(grp, col);
  return unions;
#endif
}

#if !(HWY_HAVE_SCALABLE || HWY_TARGET == HWY_SCALAR)
// Lane j*kTileRows + i = q_i . (x_j + y_j) (q_i = q[i] + q_off, x_j = x[j] + x_off, y_j = y[j]; y only when ADD)
// for the J = N/kTileRows rows x.
template <bool ADD = false, class D, typename T = hn::TFromD<D>>
HWY_INLINE hn::Vec<D> tile_dots(D d, const T* const* q, int64_t q_off, const T* const* x, int64_t x_off, int64_t len,
                                const T* const* y = nullptr) {
  using V = hn::Vec<D>;
  constexpr int N = static_cast<int>(hn::MaxLanes(D()));
  constexpr int J = N / kTileRows;
  V part[N];
  for (int t = 0; t < N; ++t) part[t] = hn::Zero(d);
  for (int64_t e = 0; e < len; e += N) {
    V xv[J];
    for (int j = 0; j < J; ++j) {
      xv[j] = hn::LoadU(d, x[j] + x_off + e);
      if constexpr (ADD) xv[j] = hn::Add(xv[j], hn::LoadU(d, y[j] + e));
    }
    for (int i = 0; i < kTileRows; ++i) {
      const V qv = in_register(hn::LoadU(d, q[i] + q_off + e));
      for (int j = 0; j < J; ++j) part[j * kTileRows + i] = hn::MulAdd(qv, xv[j], part[j * kTileRows + i]);
    }
  }
  return reduce_parts(d, part);
}
// The relations a row group's edges use, each given a slot (first use first), while the object lives.
class TileRelations {
 public:
  TileRelations() : slot_of_(thread_maps().first), rels_(thread_maps().second) { rels_.clear(); }
  ~TileRelations() { clear(); }
  TileRelations(const TileRelations&) = delete;
  TileRelations& operator=(const TileRelations&) = delete;
  int count() const { return static_cast<int>(rels_.size()); }

  // Assigns the slots to every relation of the group; whether that table (one dot per relation and row) costs at
  // most half the key dots. bpt's edges each have their own relation, so its table is as large as the rows: the
  // count stops (false, slots partly assigned) as soon as it is too large.
  template <class G>
  bool pays(const GsaParams& p, const G& grp, int64_t unions) {
    grow(p);
    const int64_t most = unions / 2;
    for (int i = 0; i < grp.n; ++i) {
      for (int64_t e = grp.e0[i]; e < grp.e1[i]; ++e) {
        add(p.graph.rel[e]);
        if (count() > most) return false;
      }
    }
    return true;
  }
  int32_t slot(int32_t r) const { return slot_of_[r]; }
  int32_t relation(int s) const { return rels_[s]; }
  // r's slot in W, the backward's sums of dS per slot (head h at w + h * ws, R entries a slot): a new one (after the
  // table's) where r has none yet, its entries zeroed for every head.
  template <typename T>
  int32_t w_slot(int32_t r, T* w, int64_t H, int64_t ws, int R) {
    const int fresh = count();
    add(r);
    const int32_t s = slot_of_[r];
    if (s >= fresh) {
      for (int64_t h = 0; h < H; ++h) std::fill_n(w + h * ws + s * R, R, T(0));
    }
    return s;
  }

  // Column relations instead: a column of the union whose rows all reach it under one relation adds that relation's
  // row to the key row, once for the whole group (tile_dots<true>); only the edges of columns whose rows disagree
  // take q . r from the table. Within bpt's upper levels, and window's clipped distances, the rows of a group agree,
  // so the table covers few relations where `pays` would count all of them.
  template <int R>
  bool pays_by_column(const GsaParams& p, const RowGroupT<R>& grp, int64_t unions) {
    clear();
    grow(p);
    by_column_ = true;
    TileUnion<64, R> un(grp, p.graph.col);
    while (un.next(1)) {
      for (int j = 0; j < un.n; ++j) {
        const int64_t* a = un.at + j * R;
        if (column_relation<R>(p, a) >= 0) continue;
        for (int i = 0; i < R; ++i) if (a[i] >= 0) add(p.graph.rel[a[i]]);
      }
    }
    zero_ = count();
    return count() <= unions;
  }
  // The relation every row of a column (entries a[R], -1: none) reaches it under, -1 if they differ (or none).
  template <int R = kTileRows>
  static int32_t column_relation(const GsaParams& p, const int64_t* a) {
    int32_t c = -1;
    for (int i = 0; i < R; ++i) {
      if (a[i] < 0) continue;
      if (c < 0) c = p.graph.rel[a[i]];
      else if (p.graph.rel[a[i]] != c) return -1;
    }
    return c;
  }
  bool by_column() const { return by_column_; }

  // Slots per head in the table: the relations, and by column one more slot of zeros (edges of agreeing columns),
  // fixed by pays_by_column: relations w_slot adds later (W's, in the backward) take slots past the table's.
  int slots() const { return by_column_ ? zero_ + 1 : count(); }
  int32_t zero_slot() const { return zero_; }

  // tab [H][slot * kTileRows + i] = q_i,h . r_rel for the kTileRows rows q (after a true pays or pays_by_column).
  template <class D, typename T = hn::TFromD<D>>
  void table(D d, const GsaParams& p, const T* const* q, T* tab) {
    constexpr int N = static_cast<int>(hn::MaxLanes(D()));
    constexpr int J = N / kTileRows;
    const T* rel = static_cast<const T*>(p.rel_emb);
    const int nr = count(), ns = slots();
    const T* rp[N];
    HWY_ALIGN T buf[N];
    for (int64_t h = 0; h < p.H; ++h) {
      T* tab_h = tab + h * ns * kTileRows;
      for (int s0 = 0; s0 < nr; s0 += J) {
        for (int j = 0; j < J; ++j) rp[j] = rel + rels_[std::min(s0 + j, nr - 1)] * p.rel_stride;
        hn::Store(tile_dots(d, q, h * p.q_strides.head, rp, 0, p.D), d, buf);
        const int cnt = std::min(J, nr - s0) * kTileRows;
        std::copy(buf, buf + cnt, tab_h + s0 * kTileRows);
      }
      std::fill(tab_h + nr * kTileRows, tab_h + ns * kTileRows, T(0));
    }
  }

 private:
  // Per thread, reused across groups: slot of every relation (-1 between uses) and the used relations.
  static std::pair<std::vector<int32_t>, std::vector<int32_t>>& thread_maps() {
    thread_local std::pair<std::vector<int32_t>, std::vector<int32_t>> m;
    return m;
  }
  void clear() {
    for (int32_t r : rels_) slot_of_[r] = -1;
    rels_.clear();
    by_column_ = false;
    zero_ = 0;
  }
  void grow(const GsaParams& p) {
    if (static_cast<int64_t>(slot_of_.size()) < p.R) slot_of_.resize(static_cast<size_t>(p.R), -1);
  }
  void add(int32_t r) {
    int32_t& s = slot_of_[r];
    if (s < 0) s = count(), rels_.push_back(r);
  }
  std::vector<int32_t>& slot_of_;
  std::vector<int32_t>& rels_;
  bool by_column_ = false;
  int32_t zero_ = 0;
};

// One segment of a row group's union of sources, as both tiles by destination read it: key and value rows of each
// source, the edge mask ok (1 where row i has an edge to source j) and each (j, i)'s index in a head's relation
// table. Written before the head loop: vector loads of freshly stored scalars stall on store forwarding.
// With column relations (rels.by_column()): rp holds each column's relation row (`zero`, a row of zeros, where the
// rows disagree), tix indexes the table for the edges of disagreeing columns (the zero slot elsewhere), and
// mixed[c] says whether chunk c of J columns has such a column.
template <bool REL, typename T, int S>
struct TileSources {
  using TI = hn::TFromD<hn::RebindToSigned<hn::ScalableTag<T>>>;
  const T* kp[S];
  const T* vp[S];
  const T* rp[S];
  HWY_ALIGN T ok[S * kTileRows];
  HWY_ALIGN TI tix[S * kTileRows];
  static constexpr uint8_t kSomeMixed = 1, kAllMixed = 3;
  uint8_t mixed[S];   // by chunk of J columns: 0, kSomeMixed or kAllMixed
  int32_t crel[S];    // by column: the relation its rows agree on, -1 where they disagree
  const T* zero = nullptr;  // D zeros (by column)
  // Makes the D elements at `at` the zero row.
  void set_zero(T* at, int64_t D) {
    std::fill(at, at + D, T(0));
    zero = at;
  }
  void fill(const GsaParams& p, const In<T>& in, int64_t b, const TileUnion<S>& un, const TileRelations& rels) {
    for (int j = 0; j < un.padded; ++j) {
      kp[j] = in.k + at(p.k_strides, b, un.node[j]);
      vp[j] = in.v + at(p.v_strides, b, un.node[j]);
    }
    for (int t = 0; t < un.padded * kTileRows; ++t) ok[t] = un.at[t] >= 0 ? T(1) : T(0);
    if constexpr (REL) {
      if (rels.by_column()) return fill_by_column(p, in, un, rels);
      for (int t = 0; t < un.padded * kTileRows; ++t) {
        const int32_t slot = un.at[t] >= 0 ? rels.slot(p.graph.rel[un.at[t]]) : 0;
        tix[t] = static_cast<TI>(slot * kTileRows + t % kTileRows);
      }
    }
  }

 private:
  void fill_by_column(const GsaParams& p, const In<T>& in, const TileUnion<S>& un, const TileRelations& rels) {
    const int J = std::max<int>(1, static_cast<int>(hn::Lanes(hn::ScalableTag<T>())) / kTileRows);
    int n_mixed[S] = {};
    for (int j = 0; j < un.padded; ++j) {
      const int64_t* a = un.at + j * kTileRows;
      const int32_t c = TileRelations::column_relation(p, a);
      crel[j] = c;
      rp[j] = c >= 0 ? in.rel + c * p.rel_stride : zero;
      for (int i = 0; i < kTileRows; ++i) {
        const int32_t slot = c < 0 && a[i] >= 0 ? rels.slot(p.graph.rel[a[i]]) : rels.zero_slot();
        tix[j * kTileRows + i] = static_cast<TI>(slot * kTileRows + i);
      }
      n_mixed[j / J] += c < 0 ? 1 : 0;  // padding columns (no rows) count as mixed: their zero row is not needed
    }
    for (int c = 0; c * J < un.padded; ++c) {
      mixed[c] = n_mixed[c] == J ? kAllMixed : n_mixed[c] > 0 ? kSomeMixed : 0;
    }
  }
};

// acc_i[e .. e + K*N) = alpha_i * acc_i + sum_{j < ns} w[j*kTileRows + i] * x_j[x_off ..] for the kTileRows rows
// (acc_i = acc + i * row_stride), K vectors of every row in registers while the sources stream through.
template <int K, class D, typename T = hn::TFromD<D>>
HWY_INLINE void tile_axpy(D d, T* acc, int64_t row_stride, const T* alpha, const T* w, int ns, const T* const* x,
                          int64_t x_off, int64_t e) {
  using V = hn::Vec<D>;
  constexpr int N = static_cast<int>(hn::MaxLanes(D()));
  V a[kTileRows][K];
  for (int i = 0; i < kTileRows; ++i) {
    const V va = hn::Set(d, alpha[i]);
    for (int k = 0; k < K; ++k) a[i][k] = hn::Mul(hn::LoadU(d, acc + i * row_stride + e + k * N), va);
  }
  for (int j = 0; j < ns; ++j) {
    V xv[K];
    for (int k = 0; k < K; ++k) xv[k] = hn::LoadU(d, x[j] + x_off + k * N);
    for (int i = 0; i < kTileRows; ++i) {
      const V wv = hn::Set(d, w[j * kTileRows + i]);
      for (int k = 0; k < K; ++k) a[i][k] = hn::MulAdd(wv, xv[k], a[i][k]);
    }
  }
  for (int i = 0; i < kTileRows; ++i) {
    for (int k = 0; k < K; ++k) hn::StoreU(a[i][k], d, acc + i * row_stride + e + k * N);
  }
}
// tile_axpy over the whole of D (x_off: the head's offset in the rows x): blocks of kTileKV vectors, then 2, then 1.
// kTileKV: kTileRows * K accumulators + K rows + a weight fit the registers (16 below AVX-512, 3 measured no faster).
constexpr int kTileKV = HWY_MAX_BYTES >= 64 ? 4 : 2;
template <class D, typename T = hn::TFromD<D>>
HWY_INLINE void tile_axpy_rows(D d, T* acc, int64_t row_stride, const T* alpha, const T* w, int ns, const T* const* x,
                               int64_t x_off, int64_t len) {
  constexpr int N = static_cast<int>(hn::MaxLanes(D()));
  int64_t e = 0;
  for (; e + kTileKV * N <= len; e += kTileKV * N) {
    tile_axpy<kTileKV>(d, acc, row_stride, alpha, w, ns, x, x_off + e, e);
  }
  for (; e + 2 * N <= len; e += 2 * N) tile_axpy<2>(d, acc, row_stride, alpha, w, ns, x, x_off + e, e);
  for (; e < len; e += N) tile_axpy<1>(d, acc, row_stride, alpha, w, ns, x, x_off + e, e);
}

// Unscaled scores q_i . (k_j + r_ij) of the J columns from j0 of a tile's segment: relation terms by column (the
// agreeing columns' relation row added to the key row, the table for the others), from the table alone, or none.
template <bool REL, class D, typename T, int S>
HWY_INLINE hn::Vec<D> tile_scores(D d, const GsaParams& p, const TileRelations& rels, const TileSources<REL, T, S>& src,
                                  const T* const* q_u, int64_t h, const T* tab_h, int j0) {
  const hn::RebindToSigned<D> di;
  const int64_t q_off = h * p.q_strides.head, k_off = h * p.k_strides.head;
  constexpr int J = static_cast<int>(hn::MaxLanes(D())) / kTileRows;
  if constexpr (!REL) {
    return tile_dots(d, q_u, q_off, src.kp + j0, k_off, p.D);
  } else {
    const uint8_t kind = rels.by_column() ? src.mixed[j0 / J] : src.kAllMixed;
    // The gather first: its latency then overlaps the dot products.
    const auto add = kind != 0 ? hn::GatherIndex(d, tab_h, hn::Load(di, src.tix + j0 * kTileRows)) : hn::Zero(d);
    const auto s = kind == src.kAllMixed ? tile_dots(d, q_u, q_off, src.kp + j0, k_off, p.D)
                                         : tile_dots<true>(d, q_u, q_off, src.kp + j0, k_off, p.D, src.rp + j0);
    return kind != 0 ? hn::Add(s, add) : s;
  }
}

// Whether a group of `unions` union columns runs as a tile by destination, and how its relation terms come: one
// table of every relation where that costs little (window 256's clipped distances), else by column (bpt), else
// the group runs per row. rels holds the slots after a true.
template <int R>
bool tile_relations(const GsaParams& p, const RowGroupT<R>& grp, int64_t unions, TileRelations& rels) {
  return p.rel_emb == nullptr || rels.pays(p, grp, unions) || rels.pays_by_column(p, grp, unions);
}
#endif

// Scratch: kTileRows * H * R elements (the relation table), inside what gsa_cpu_scratch_elems gives the forward
// beyond acc, m and l.
template <bool REL, typename T>
bool forward_tile(const GsaParams& p, int64_t b, const RowGroup& grp, int64_t unions, T* m, T* l, T* acc,
                  T* scratch) {
#if !(HWY_HAVE_SCALABLE || HWY_TARGET == HWY_SCALAR)
  TileRelations rels;
  if (!tile_relations(p, grp, unions, rels)) return false;
  const hn::ScalableTag<T> d;
  using V = hn::Vec<decltype(d)>;
  constexpr int N = static_cast<int>(hn::MaxLanes(decltype(d)()));
  constexpr int J = N / kTileRows;                 // sources per tile_dots
  constexpr int S = N * kSegChunks;                // union sources per segment
  const In<T> in(p);
  const GsaGraphView& g = p.graph;
  const int64_t H = p.H, Dm = p.D;
  const T* q_u[kTileRows];
  for (int i = 0; i < kTileRows; ++i) q_u[i] = in.q + at(p.q_strides, b, grp.u[i < grp.n ? i : 0]);
  for (int i = grp.n; i < kTileRows; ++i) {  // padding rows: empty state, never written out
    for (int64_t h = 0; h < H; ++h) m[i * H + h] = gsa_neg_inf<T>(), l[i * H + h] = T(0);
    std::fill(acc + i * H * Dm, acc + (i + 1) * H * Dm, T(0));
  }
  T* tab = scratch;  // [H][slot * kTileRows + i] = q_i,h . r of the slot's relation
  if constexpr (REL) rels.table(d, p, q_u, tab);
  const int nslot = rels.slots();
  HWY_ALIGN T sc[S * kTileRows];  // scores, then weights, at j*kTileRows + i
  const V scale = hn::Set(d, static_cast<T>(p.scale));
  TileUnion<S> un(grp, g.col);
  TileSources<REL, T, S> src;
  src.set_zero(tab + H * nslot * kTileRows, Dm);
  const T* const* vp = src.vp;
  while (un.next(J)) {
    const int ns = un.n, padded = un.padded;
    src.fill(p, in, b, un, rels);
    for (int64_t h = 0; h < H; ++h) {
      const int64_t hv = h * p.v_strides.head;
      const T* tab_h = tab + h * nslot * kTileRows;
      V mx = hn::Set(d, gsa_neg_inf<T>());
      for (int j0 = 0; j0 < padded; j0 += J) {
        V s = tile_scores(d, p, rels, src, q_u, h, tab_h, j0);
        prefetch_rows(vp + j0, J, hv, Dm);
        if (h + 1 < H) prefetch_rows(src.kp + j0, J, (h + 1) * p.k_strides.head, Dm);
        s = hn::IfThenElse(hn::Gt(hn::Load(d, src.ok + j0 * kTileRows), hn::Zero(d)), hn::Mul(s, scale),
                           hn::Set(d, gsa_neg_inf<T>()));
        hn::Store(s, d, sc + j0 * kTileRows);
        mx = hn::Max(mx, s);
      }
      // Per row: the new max (lanes i, i + kTileRows, ...), the rescale of its state, then exp over the segment.
      HWY_ALIGN T mxl[N];
      hn::Store(mx, d, mxl);
      HWY_ALIGN T msub[N];
      T alpha[kTileRows];
      for (int i = 0; i < kTileRows; ++i) {
        T segmax = i < N ? mxl[i] : gsa_neg_inf<T>();  // N >= kTileRows wherever a tile runs (tile_union)
        for (int t = i + kTileRows; t < N; t += kTileRows) segmax = std::max(segmax, mxl[t]);
        T& mh = m[i * H + h];
        const T m_new = std::max(mh, segmax);
        alpha[i] = rescale_factor(d, mh, m_new);
        mh = m_new;
        const T m_use = m_new == gsa_neg_inf<T>() ? T(0) : m_new;  // a row with nothing yet: exp(-inf) = 0
        for (int t = i; t < N; t += kTileRows) msub[t] = m_use;
      }
      const V vm = hn::Load(d, msub);
      V sum = hn::Zero(d);
      for (int t = 0; t < padded * kTileRows; t += N) {
        const V pr = vexp(d, hn::Sub(hn::Load(d, sc + t), vm));
        hn::Store(pr, d, sc + t);
        sum = hn::Add(sum, pr);
      }
      HWY_ALIGN T suml[N];
      hn::Store(sum, d, suml);
      for (int i = 0; i < kTileRows; ++i) {
        T s = 0;
        for (int t = i; t < N; t += kTileRows) s += suml[t];
        l[i * H + h] = l[i * H + h] * alpha[i] + s;
      }
      // acc_i += sum_j w_ij v_j, a block of every row in registers while the segment's sources stream through.
      tile_axpy_rows(d, acc + h * Dm, H * Dm, alpha, sc, ns, vp, hv, Dm);
    }
  }
  return true;
#else
  (void)p, (void)b, (void)grp, (void)unions, (void)m, (void)l, (void)acc, (void)scratch;
  return false;
#endif
}

}  // namespace
}  // namespace sb::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // SB_KERNELS_CPU_GSA_TILES_INL_H_ toggle
