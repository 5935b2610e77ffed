// GsaSplitPlan: heavy rows are cut into contiguous pieces covering each edge exactly once, in a fixed order that
// depends only on the graph and the threshold; the forward's column plan tiles pieces over full blocks of columns;
// the CPU block order sorts blocks by their smallest column.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <utility>
#include <vector>

#include "kernels/gsa_split_plan.h"

namespace sb {
namespace {

std::vector<int64_t> csr_from_degrees(const std::vector<int64_t>& degrees) {
  std::vector<int64_t> row_ptr(1, 0);
  for (int64_t d : degrees) row_ptr.push_back(row_ptr.back() + d);
  return row_ptr;
}

// Degrees of n rows, light (uniform in [0, max_light], seeded) but for the hubs {row, degree}.
std::vector<int64_t> degrees_with_hubs(uint64_t seed, int n, int64_t max_light,
                                       const std::vector<std::pair<int, int64_t>>& hubs) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> light(0, max_light);
  std::vector<int64_t> degrees;
  for (int i = 0; i < n; ++i) degrees.push_back(light(rng));
  for (const auto& [row, degree] : hubs) degrees[row] = degree;
  return degrees;
}

// Every edge of every row belongs to exactly one piece (split rows) or to its unsplit row; pieces of a row are
// ascending, contiguous, of near-equal size and no longer than the threshold.
void check_plan(const std::vector<int64_t>& row_ptr, const GsaSplitPlan& plan, int64_t threshold) {
  const int64_t n = static_cast<int64_t>(row_ptr.size()) - 1;
  ASSERT_EQ(plan.row_split.size(), static_cast<size_t>(n));
  ASSERT_EQ(plan.piece_ptr.size(), plan.split_rows.size() + 1);
  ASSERT_EQ(plan.piece_begin.size(), plan.piece_end.size());
  ASSERT_EQ(plan.piece_row.size(), plan.piece_end.size());
  std::vector<int> covered(static_cast<size_t>(row_ptr.back()), 0);
  size_t next_split = 0;
  for (int64_t u = 0; u < n; ++u) {
    const int64_t degree = row_ptr[u + 1] - row_ptr[u];
    const bool split = degree > threshold && threshold > 0;
    EXPECT_EQ(plan.row_split[u] != 0, split) << "row " << u;
    if (!split) {
      for (int64_t e = row_ptr[u]; e < row_ptr[u + 1]; ++e) ++covered[e];
      continue;
    }
    ASSERT_LT(next_split, plan.split_rows.size());
    EXPECT_EQ(plan.split_rows[next_split], u);
    int64_t expect_begin = row_ptr[u], smallest = degree, largest = 0;
    for (int64_t k = plan.piece_ptr[next_split]; k < plan.piece_ptr[next_split + 1]; ++k) {
      EXPECT_EQ(plan.piece_row[k], u);
      EXPECT_EQ(plan.piece_begin[k], expect_begin) << "pieces of row " << u << " must be contiguous and ascending";
      const int64_t size = plan.piece_end[k] - plan.piece_begin[k];
      EXPECT_GT(size, 0);
      EXPECT_LE(size, threshold);
      smallest = std::min(smallest, size);
      largest = std::max(largest, size);
      for (int64_t e = plan.piece_begin[k]; e < plan.piece_end[k]; ++e) ++covered[e];
      expect_begin = plan.piece_end[k];
    }
    EXPECT_EQ(expect_begin, row_ptr[u + 1]) << "pieces of row " << u << " must end at the row's end";
    EXPECT_LE(largest - smallest, 1) << "row " << u;
    ++next_split;
  }
  EXPECT_EQ(next_split, plan.split_rows.size());
  for (size_t e = 0; e < covered.size(); ++e) ASSERT_EQ(covered[e], 1) << "edge " << e;
}

TEST(GsaSplitPlan, CoversEveryEdgeOnceInAFixedOrder) {
  // hubs at the ends and in the middle, one exactly at the threshold
  const std::vector<int64_t> row_ptr =
      csr_from_degrees(degrees_with_hubs(11, 500, 40, {{0, 10000}, {250, 513}, {251, 512}, {499, 4097}}));
  const int64_t threshold = gsa_split_threshold(500, row_ptr.back());
  EXPECT_EQ(threshold, 512);
  const GsaSplitPlan plan = gsa_split_plan(row_ptr.data(), 500, threshold);
  check_plan(row_ptr, plan, threshold);
  EXPECT_EQ(plan.split_rows, (std::vector<int64_t>{0, 250, 499}));
  EXPECT_EQ(plan.piece_ptr, (std::vector<int64_t>{0, 20, 22, 31}));  // ceil(10000/512), ceil(513/512), ceil(4097/512)
  // The plan is a function of row_ptr and the threshold alone: built again, it is the same.
  const GsaSplitPlan again = gsa_split_plan(row_ptr.data(), 500, threshold);
  EXPECT_EQ(again.piece_begin, plan.piece_begin);
  EXPECT_EQ(again.piece_end, plan.piece_end);
  EXPECT_EQ(again.piece_row, plan.piece_row);
}

TEST(GsaSplitPlan, NoSplitWithoutHeavyRowsOrThreshold) {
  const std::vector<int64_t> row_ptr = csr_from_degrees({3, 0, 5, 1, 0});
  const GsaSplitPlan none = gsa_split_plan(row_ptr.data(), 5, 8);
  EXPECT_TRUE(none.empty());
  check_plan(row_ptr, none, 8);
  const GsaSplitPlan off = gsa_split_plan(row_ptr.data(), 5, 0);
  EXPECT_TRUE(off.empty());
  const GsaSplitPlan all = gsa_split_plan(row_ptr.data(), 5, 1);  // every row of 2+ edges, one edge per piece
  check_plan(row_ptr, all, 1);
  EXPECT_EQ(all.split_rows, (std::vector<int64_t>{0, 2}));
  EXPECT_EQ(all.n_pieces(), 8);
}

TEST(GsaSplitPlan, ThresholdFollowsTheMeanDegree) {
  EXPECT_EQ(gsa_split_threshold(1000, 1000 * 10), 512);     // light graphs: the floor
  EXPECT_EQ(gsa_split_threshold(1000, 1000 * 300), 2400);   // dense rows: 8 x the mean
  EXPECT_EQ(gsa_split_threshold(0, 0), 512);
  EXPECT_EQ(gsa_split_threshold(10, 95, 4, 2), 20);         // mean rounded up: 10 -> 20
}

// A token graph with a binary tree over it, as bpt and segtree build: 256 token rows reading a window of +-8 tokens,
// then span nodes level by level (128 of 2 tokens, 64 of 4, ..., the root of 256) reading the tokens they cover.
struct TreeCsr {
  std::vector<int64_t> row_ptr{0};
  std::vector<int32_t> col;
  std::vector<int64_t> span_level;  // per row: 0 for tokens
  void row(int32_t lo, int32_t hi, int64_t level) {
    for (int32_t c = lo; c < hi; ++c) col.push_back(c);
    row_ptr.push_back(static_cast<int64_t>(col.size()));
    span_level.push_back(level);
  }
  int64_t rows() const { return static_cast<int64_t>(row_ptr.size()) - 1; }
};

TreeCsr tree_csr() {
  TreeCsr g;
  const int32_t n = 256;
  for (int32_t i = 0; i < n; ++i) g.row(std::max(0, i - 8), std::min(n, i + 9), 0);
  for (int64_t level = 1, width = 2; width <= n; ++level, width *= 2) {
    for (int32_t first = 0; first < n; first += static_cast<int32_t>(width)) {
      g.row(first, first + static_cast<int32_t>(width), level);
    }
  }
  return g;
}

// The forward's plan: rows whose neighbours share none of their sources (span nodes of 32+ tokens) and heavy rows
// are cut at full blocks of 32 columns; window rows are left whole. Every edge is in one piece or its whole row;
// tiles group 2..4 pieces of different rows that each hold exactly one block's columns, in ascending block order.
TEST(GsaColumnSplitPlan, TilesGroupPiecesOfOneFullBlock) {
  const TreeCsr g = tree_csr();
  const int64_t n = g.rows(), block = 32;
  for (const int64_t threshold : {int64_t{1000}, int64_t{100}}) {
    const GsaSplitPlan plan = gsa_column_split_plan(g.row_ptr.data(), g.col.data(), n, threshold, block, 4);
    ASSERT_EQ(plan.piece_tiled.size(), static_cast<size_t>(plan.n_pieces()));
    std::vector<int> covered(g.col.size(), 0);
    size_t next_split = 0;
    for (int64_t u = 0; u < n; ++u) {
      const int64_t degree = g.row_ptr[u + 1] - g.row_ptr[u];
      const bool split = g.span_level[u] >= 5 || degree > threshold;
      ASSERT_EQ(plan.row_split[u] != 0, split) << "row " << u << " at threshold " << threshold;
      if (!split) {
        for (int64_t e = g.row_ptr[u]; e < g.row_ptr[u + 1]; ++e) ++covered[e];
        continue;
      }
      ASSERT_EQ(plan.split_rows[next_split], u);
      int64_t expect_begin = g.row_ptr[u];
      for (int64_t k = plan.piece_ptr[next_split]; k < plan.piece_ptr[next_split + 1]; ++k) {
        EXPECT_EQ(plan.piece_row[k], u);
        EXPECT_EQ(plan.piece_begin[k], expect_begin) << "pieces of row " << u << " must be contiguous and ascending";
        EXPECT_LE(plan.piece_end[k] - plan.piece_begin[k], std::max(block, threshold));
        for (int64_t e = plan.piece_begin[k]; e < plan.piece_end[k]; ++e) ++covered[e];
        expect_begin = plan.piece_end[k];
      }
      EXPECT_EQ(expect_begin, g.row_ptr[u + 1]);
      ++next_split;
    }
    EXPECT_EQ(next_split, plan.split_rows.size());
    for (size_t e = 0; e < covered.size(); ++e) ASSERT_EQ(covered[e], 1) << "edge " << e;

    // Levels 5..8 cover every block of 32 tokens: 4 pieces per block, one tile each, blocks ascending.
    ASSERT_EQ(plan.n_tiles(), 256 / block);
    std::vector<int> in_tile(static_cast<size_t>(plan.n_pieces()), 0);
    int32_t last_first = -1;
    for (int64_t t = 0; t < plan.n_tiles(); ++t) {
      ASSERT_EQ(plan.tile_ptr[t + 1] - plan.tile_ptr[t], 4) << "tile " << t;
      const int32_t first = g.col[plan.piece_begin[plan.tile_pieces[plan.tile_ptr[t]]]];
      EXPECT_EQ(first % block, 0);
      EXPECT_GT(first, last_first) << "tiles in ascending block order";
      last_first = first;
      for (int64_t j = plan.tile_ptr[t]; j < plan.tile_ptr[t + 1]; ++j) {
        const int64_t c = plan.tile_pieces[j];
        ++in_tile[c];
        EXPECT_TRUE(plan.piece_tiled[c]);
        ASSERT_EQ(plan.piece_end[c] - plan.piece_begin[c], block);
        for (int64_t e = plan.piece_begin[c]; e < plan.piece_end[c]; ++e) {
          EXPECT_EQ(g.col[e], first + (e - plan.piece_begin[c])) << "tile " << t << " piece " << c;
        }
        if (j > plan.tile_ptr[t]) EXPECT_LT(plan.piece_row[plan.tile_pieces[j - 1]], plan.piece_row[c]);
      }
    }
    for (int64_t c = 0; c < plan.n_pieces(); ++c) EXPECT_EQ(in_tile[c], plan.piece_tiled[c] ? 1 : 0) << c;
  }
  // With relations (the backward's plan), a row of several relations is not cut: the root here.
  std::vector<int32_t> rel(g.col.size(), 1);
  rel[static_cast<size_t>(g.row_ptr[n - 1])] = 2;
  const GsaSplitPlan by_rel = gsa_column_split_plan(g.row_ptr.data(), g.col.data(), n, 1000, block, 4, rel.data());
  EXPECT_FALSE(by_rel.row_split[n - 1]);
  EXPECT_TRUE(by_rel.row_split[n - 2]);
  EXPECT_EQ(by_rel.n_tiles(), 256 / block);  // levels 5..7: 3 pieces per block
  EXPECT_TRUE(gsa_one_relation(rel.data(), g.row_ptr[n - 2], g.row_ptr[n - 1]));
  EXPECT_FALSE(gsa_one_relation(rel.data(), g.row_ptr[n - 1], g.row_ptr[n]));

  // Columns that do not ascend hold no full block: the row stays whole.
  std::vector<int64_t> row_ptr{0, 64};
  std::vector<int32_t> col;
  for (int32_t c = 63; c >= 0; --c) col.push_back(c);
  const GsaSplitPlan none = gsa_column_split_plan(row_ptr.data(), col.data(), 1, 1000, 32, 4);
  EXPECT_TRUE(none.empty());
  EXPECT_EQ(none.n_tiles(), 0);
}

// The packed device schedule: its view gives the plan back, and the unsplit rows once each, heaviest first (ties in
// row order), so every edge is walked exactly once by either a piece or its whole row.
TEST(GsaSplitPlan, PackedScheduleCoversEveryRowOnceHeaviestFirst) {
  const std::vector<int64_t> degrees = degrees_with_hubs(5, 300, 60, {{7, 3000}, {200, 700}});
  const std::vector<int64_t> row_ptr = csr_from_degrees(degrees);
  const int64_t threshold = gsa_device_split_threshold(300, row_ptr.back());
  EXPECT_EQ(threshold, 256);
  const GsaPackedSchedule packed = gsa_pack_schedule(row_ptr.data(), 300, threshold);
  const GsaScheduleView v = gsa_schedule_view(packed.data.data(), packed.n_rows, packed.n_pieces, packed.n_split);
  const GsaSplitPlan plan = gsa_split_plan(row_ptr.data(), 300, threshold);
  check_plan(row_ptr, plan, threshold);
  ASSERT_EQ(v.n_pieces, plan.n_pieces());
  ASSERT_EQ(v.n_split, 2);
  ASSERT_EQ(v.n_order, 298);
  EXPECT_EQ(packed.data.size(), static_cast<size_t>(3 * v.n_pieces + 2 * v.n_split + 1 + v.n_order));
  for (int64_t k = 0; k < v.n_pieces; ++k) {
    EXPECT_EQ(v.piece_begin[k], plan.piece_begin[k]);
    EXPECT_EQ(v.piece_end[k], plan.piece_end[k]);
    EXPECT_EQ(v.piece_row[k], plan.piece_row[k]);
  }
  for (int64_t i = 0; i <= v.n_split; ++i) EXPECT_EQ(v.piece_ptr[i], plan.piece_ptr[i]);
  EXPECT_EQ(v.split_rows[0], 7);
  EXPECT_EQ(v.split_rows[1], 200);
  std::vector<int> seen(300, 0);
  for (int64_t i = 0; i < v.n_order; ++i) {
    const int64_t u = v.order[i];
    ASSERT_GE(u, 0);
    ASSERT_LT(u, 300);
    EXPECT_FALSE(plan.row_split[u]) << "split row " << u << " in the order";
    ++seen[u];
    if (i > 0) {
      const int64_t prev = v.order[i - 1];
      EXPECT_TRUE(degrees[prev] > degrees[u] || (degrees[prev] == degrees[u] && prev < u)) << "at " << i;
    }
  }
  for (int64_t u = 0; u < 300; ++u) EXPECT_EQ(seen[u] + plan.row_split[u], 1) << "row " << u;
}

// Blocks of kGsaCpuRowBlock rows run ascending by their smallest column, ties and edgeless blocks in block order:
// here 5 blocks (the last one short), block 3 has no edges, blocks 0 and 4 share their smallest column.
TEST(GsaBlockOrder, SortsBlocksBySmallestColumn) {
  const int64_t B = kGsaCpuRowBlock, n = 4 * B + 3;
  std::vector<int64_t> row_ptr(1, 0);
  std::vector<int32_t> col;
  const int32_t smallest[5] = {40, 7, 12, -1, 40};  // per block; -1: no edges
  for (int64_t u = 0; u < n; ++u) {
    const int32_t lo = smallest[u / B];
    if (lo >= 0) {
      col.push_back(static_cast<int32_t>(lo + u % B));  // the block's smallest at its first row
      col.push_back(static_cast<int32_t>(60 + u % 7));
    }
    row_ptr.push_back(static_cast<int64_t>(col.size()));
  }
  EXPECT_EQ(gsa_block_order(row_ptr.data(), col.data(), n), (std::vector<int32_t>{1, 2, 0, 4, 3}));
  EXPECT_EQ(gsa_block_order(row_ptr.data(), col.data(), 0), std::vector<int32_t>{});
}

}  // namespace
}  // namespace sb
