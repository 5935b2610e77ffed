// GsaSplitPlan construction (see gsa_split_plan.h).
#include "kernels/gsa_split_plan.h"

#include <algorithm>
#include <cstdint>
#include <utility>

namespace sb {

namespace {

GsaSplitPlan empty_plan(int64_t n_rows, int64_t threshold) {
  GsaSplitPlan plan;
  plan.threshold = std::max<int64_t>(threshold, 0);
  plan.row_split.assign(static_cast<size_t>(std::max<int64_t>(n_rows, 0)), 0);
  plan.piece_ptr.push_back(0);
  return plan;
}

void add_piece(GsaSplitPlan& plan, int64_t u, int64_t e0, int64_t e1) {
  plan.piece_begin.push_back(e0);
  plan.piece_end.push_back(e1);
  plan.piece_row.push_back(u);
}

// Edges [e0, e1) of row u as ceil(len / threshold) pieces of near-equal size (the first ones one edge larger).
void add_even_pieces(GsaSplitPlan& plan, int64_t u, int64_t e0, int64_t e1, int64_t threshold) {
  const int64_t len = e1 - e0;
  if (len <= 0) return;
  const int64_t pieces = (len + threshold - 1) / threshold;
  const int64_t base = len / pieces, extra = len % pieces;
  for (int64_t k = 0, e = e0; k < pieces; ++k) {
    const int64_t size = base + (k < extra ? 1 : 0);
    add_piece(plan, u, e, e + size);
    e += size;
  }
}

void end_row(GsaSplitPlan& plan, int64_t u) {
  plan.split_rows.push_back(u);
  plan.piece_ptr.push_back(plan.n_pieces());
  plan.row_split[static_cast<size_t>(u)] = 1;
}

// First edges of the full aligned blocks of `block` columns in row [e0, e1): col[f] = t * block and
// col[f + block - 1] = col[f] + block - 1, which with strictly ascending columns means every column of the block.
// Rows whose columns do not ascend strictly yield none.
void full_blocks(const int32_t* col, int64_t e0, int64_t e1, int64_t block, std::vector<int64_t>& out) {
  out.clear();
  for (int64_t e = e0 + 1; e < e1; ++e) {
    if (col[e] <= col[e - 1]) return;
  }
  int64_t e = e0;
  while (e1 - e >= block) {
    const int64_t t0 = (int64_t{col[e]} + block - 1) / block * block;
    // Columns ascend by at least one per edge, so column t0 (if present) is at most t0 - col[e] edges ahead.
    const int64_t limit = std::min(e1, e + (t0 - col[e]) + 1);
    const int64_t f = std::lower_bound(col + e, col + limit, t0,
                                       [](int32_t c, int64_t v) { return int64_t{c} < v; }) - col;
    if (f + block <= e1 && col[f] == t0 && col[f + block - 1] == t0 + block - 1) {
      out.push_back(f);
      e = f + block;
    } else {
      e = f < e1 && col[f] == t0 ? f + 1 : f;
    }
  }
}

// Whether rows of [g0, g1) would run as a register tile (their columns read as ascending): no row's range partly
// overlaps another's (window rows do, span rows are disjoint or nested), or the union of their columns is small.
bool group_tiles(const int64_t* row_ptr, const int32_t* col, int64_t g0, int64_t g1) {
  int64_t total = 0, n = 0;
  for (int64_t u = g0; u < g1; ++u) {
    if (row_ptr[u + 1] == row_ptr[u]) continue;
    total += row_ptr[u + 1] - row_ptr[u];
    ++n;
    const int32_t lo = col[row_ptr[u]], hi = col[row_ptr[u + 1] - 1];
    for (int64_t v = g0; v < u; ++v) {
      if (row_ptr[v + 1] == row_ptr[v]) continue;
      const int32_t vlo = col[row_ptr[v]], vhi = col[row_ptr[v + 1] - 1];
      const bool nested = (vlo <= lo && hi <= vhi) || (lo <= vlo && vhi <= hi);
      if (vlo <= hi && vhi >= lo && !nested) return true;
    }
  }
  int64_t at[64], end[64], unions = 0;
  const int64_t m = std::min<int64_t>(g1 - g0, 64);
  for (int64_t i = 0; i < m; ++i) at[i] = row_ptr[g0 + i], end[i] = row_ptr[g0 + i + 1];
  for (;;) {
    int64_t lo = INT64_MAX;
    for (int64_t i = 0; i < m; ++i) if (at[i] < end[i]) lo = std::min<int64_t>(lo, col[at[i]]);
    if (lo == INT64_MAX) break;
    for (int64_t i = 0; i < m; ++i) if (at[i] < end[i] && col[at[i]] == lo) ++at[i];
    ++unions;
  }
  return static_cast<double>(unions) * static_cast<double>(n) <= kGsaTileWaste * static_cast<double>(total);
}

}  // namespace

GsaSplitPlan gsa_split_plan(const int64_t* row_ptr, int64_t n_rows, int64_t threshold) {
  GsaSplitPlan plan = empty_plan(n_rows, threshold);
  if (threshold <= 0) return plan;
  for (int64_t u = 0; u < n_rows; ++u) {
    if (row_ptr[u + 1] - row_ptr[u] <= threshold) continue;
    add_even_pieces(plan, u, row_ptr[u], row_ptr[u + 1], threshold);
    end_row(plan, u);
  }
  plan.piece_tiled.assign(static_cast<size_t>(plan.n_pieces()), 0);
  return plan;
}

bool gsa_one_relation(const int32_t* rel, int64_t e0, int64_t e1) {
  for (int64_t e = e0 + 1; e < e1; ++e) {
    if (rel[e] != rel[e0]) return false;
  }
  return true;
}

GsaSplitPlan gsa_column_split_plan(const int64_t* row_ptr, const int32_t* col, int64_t n_rows, int64_t threshold,
                                   int64_t block, int group, const int32_t* rel) {
  GsaSplitPlan plan = empty_plan(n_rows, threshold);
  if (threshold <= 0 || block <= 0) return plan;
  std::vector<int64_t> blocks;
  std::vector<std::pair<int64_t, int64_t>> tiled;  // (first column, piece) of every block piece
  int64_t tested_group = -1;
  bool tiles = true;  // whether group tested_group runs as a register tile
  for (int64_t u = 0; u < n_rows; ++u) {
    const int64_t e0 = row_ptr[u], e1 = row_ptr[u + 1], degree = e1 - e0;
    const bool heavy = degree > threshold;
    const int64_t g0 = u / group * group;
    if (degree >= block && !heavy && g0 != tested_group) {
      tested_group = g0;
      tiles = group_tiles(row_ptr, col, g0, std::min(n_rows, g0 + group));
    }
    blocks.clear();
    if (degree >= block && (heavy || !tiles) && (rel == nullptr || gsa_one_relation(rel, e0, e1))) {
      full_blocks(col, e0, e1, block, blocks);
    }
    if (blocks.empty() && !heavy) continue;
    int64_t e = e0;
    for (int64_t f : blocks) {
      add_even_pieces(plan, u, e, f, threshold);
      tiled.emplace_back(col[f], plan.n_pieces());
      add_piece(plan, u, f, f + block);
      e = f + block;
    }
    add_even_pieces(plan, u, e, e1, threshold);
    end_row(plan, u);
  }
  plan.piece_tiled.assign(static_cast<size_t>(plan.n_pieces()), 0);
  std::stable_sort(tiled.begin(), tiled.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  for (size_t i = 0; i < tiled.size();) {
    size_t j = i;
    while (j < tiled.size() && j - i < static_cast<size_t>(group) && tiled[j].first == tiled[i].first) ++j;
    if (j - i >= 2) {
      for (size_t k = i; k < j; ++k) {
        plan.tile_pieces.push_back(tiled[k].second);
        plan.piece_tiled[static_cast<size_t>(tiled[k].second)] = 1;
      }
      plan.tile_ptr.push_back(static_cast<int64_t>(plan.tile_pieces.size()));
    }
    i = j;
  }
  return plan;
}

int64_t gsa_device_split_threshold(int64_t n_rows, int64_t n_edges) {
  return gsa_split_threshold(n_rows, n_edges, 256, 4);
}

std::vector<int64_t> gsa_longest_first(const int64_t* row_ptr, int64_t n_rows, const GsaSplitPlan& plan) {
  int64_t max_degree = 0;
  for (int64_t u = 0; u < n_rows; ++u) {
    if (!plan.row_split[static_cast<size_t>(u)]) max_degree = std::max(max_degree, row_ptr[u + 1] - row_ptr[u]);
  }
  // Bucket starts by descending degree, then a stable pass in row order.
  std::vector<int64_t> start(static_cast<size_t>(max_degree + 2), 0);
  for (int64_t u = 0; u < n_rows; ++u) {
    if (!plan.row_split[static_cast<size_t>(u)]) ++start[static_cast<size_t>(max_degree - (row_ptr[u + 1] - row_ptr[u]) + 1)];
  }
  for (size_t i = 1; i < start.size(); ++i) start[i] += start[i - 1];
  std::vector<int64_t> order(static_cast<size_t>(start.back()));
  for (int64_t u = 0; u < n_rows; ++u) {
    if (plan.row_split[static_cast<size_t>(u)]) continue;
    order[static_cast<size_t>(start[static_cast<size_t>(max_degree - (row_ptr[u + 1] - row_ptr[u]))]++)] = u;
  }
  return order;
}

GsaPackedSchedule gsa_pack_schedule(const int64_t* row_ptr, int64_t n_rows, int64_t threshold) {
  const GsaSplitPlan plan = gsa_split_plan(row_ptr, n_rows, threshold);
  const std::vector<int64_t> order = gsa_longest_first(row_ptr, n_rows, plan);
  GsaPackedSchedule s;
  s.n_rows = n_rows;
  s.n_pieces = plan.n_pieces();
  s.n_split = static_cast<int64_t>(plan.split_rows.size());
  for (const std::vector<int64_t>* part :
       {&plan.piece_begin, &plan.piece_end, &plan.piece_row, &plan.split_rows, &plan.piece_ptr, &order}) {
    s.data.insert(s.data.end(), part->begin(), part->end());
  }
  return s;
}

GsaScheduleView gsa_schedule_view(const int64_t* data, int64_t n_rows, int64_t n_pieces, int64_t n_split) {
  GsaScheduleView v;
  v.piece_begin = data;
  v.piece_end = data + n_pieces;
  v.piece_row = data + 2 * n_pieces;
  v.split_rows = data + 3 * n_pieces;
  v.piece_ptr = v.split_rows + n_split;
  v.order = v.piece_ptr + n_split + 1;
  v.n_pieces = n_pieces;
  v.n_split = n_split;
  v.n_order = n_rows - n_split;
  return v;
}

int64_t gsa_split_threshold(int64_t n_rows, int64_t n_edges, int64_t min_edges, int64_t factor) {
  const int64_t mean = n_rows > 0 ? (n_edges + n_rows - 1) / n_rows : 0;
  return std::max(min_edges, factor * mean);
}

std::vector<int32_t> gsa_block_order(const int64_t* row_ptr, const int32_t* col, int64_t n_rows) {
  const int64_t n_blocks = (n_rows + kGsaCpuRowBlock - 1) / kGsaCpuRowBlock;
  std::vector<int64_t> key(static_cast<size_t>(n_blocks), INT64_MAX);
  for (int64_t c = 0; c < n_blocks; ++c) {
    const int64_t e1 = row_ptr[std::min(n_rows, (c + 1) * kGsaCpuRowBlock)];
    for (int64_t e = row_ptr[c * kGsaCpuRowBlock]; e < e1; ++e) key[c] = std::min<int64_t>(key[c], col[e]);
  }
  std::vector<int32_t> order(static_cast<size_t>(n_blocks));
  for (int64_t c = 0; c < n_blocks; ++c) order[c] = static_cast<int32_t>(c);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return key[a] < key[b]; });
  return order;
}

}  // namespace sb
