// GsaTilePlan: 16- and 64-row tiles cover every edge exactly once (dense tiles' masks plus fallback rows), masks and
// unions match the graph, each tile's edge list (gsa_tile_edge) names the edge of every mask bit, the fallback
// schedule keeps only fallback rows, SB_CUDA_TC_ROWS takes 16 or 64; and a double-precision emulation of the
// tensor-core tiles' arithmetic (gather, S = Q K^T plus the relation term, mask, online softmax over 32-column chunks,
// P V; dq with its relation term and per-edge dS for d_rel_emb) matches the dense reference. No GPU.
// Run: build/tests/kernels/test_gsa_tile_plan
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "common/error.h"
#include "kernels/gsa_split_plan.h"
#include "kernels/gsa_tile_plan.h"
#include "tests/kernels/gsa_cases.h"

namespace sb::test {
namespace {

// Dense tile i of a plan holds rows [r0, r1) of g (tile_rows rows in its mask): its union is exactly their sources,
// sorted and unique; its mask bits are exactly their edges. Marks the rows in row_owner; returns the tile's edges.
int64_t check_dense_tile(const Graph& g, const GsaTilePlan& plan, int64_t i, int64_t r0, int64_t r1,
                         int64_t tile_rows, std::vector<int>& row_owner) {
  std::set<int32_t> sources;
  for (int64_t e = g.row_ptr[r0]; e < g.row_ptr[r1]; ++e) sources.insert(g.col[e]);
  EXPECT_EQ(plan.rows_of(i), tile_rows) << "dense tile " << i;
  EXPECT_EQ(plan.first_row(i), r0) << "dense tile " << i;
  const std::vector<int32_t> unions(plan.union_col.begin() + plan.union_ptr[i],
                                    plan.union_col.begin() + plan.union_ptr[i + 1]);
  EXPECT_EQ(unions, std::vector<int32_t>(sources.begin(), sources.end())) << "dense tile " << i;
  EXPECT_EQ(plan.mask_ptr[i + 1] - plan.mask_ptr[i], tile_rows * plan.words(i)) << "dense tile " << i;
  int64_t edges = 0;
  for (int64_t r = 0; r < tile_rows; ++r) {
    const int64_t u = r0 + r;
    std::set<int32_t> row;
    if (u < r1) {
      row_owner[u] += 1;
      row.insert(g.col.begin() + g.row_ptr[u], g.col.begin() + g.row_ptr[u + 1]);
      EXPECT_EQ(static_cast<int64_t>(row.size()), g.row_ptr[u + 1] - g.row_ptr[u]) << "row " << u;
    }
    int64_t bits = 0;
    for (int64_t c = 0; c < plan.words(i) * kGsaTileMaskBits; ++c) {
      const bool bit = plan.mask_bit(i, r, c);
      bits += bit ? 1 : 0;
      if (c >= static_cast<int64_t>(unions.size())) {
        EXPECT_FALSE(bit) << "row " << u << ": bit past the union";
      } else {
        EXPECT_EQ(bit, row.count(unions[c]) == 1) << "row " << u << " column " << unions[c];
      }
    }
    EXPECT_EQ(bits, static_cast<int64_t>(row.size()));
    edges += bits;
  }
  return edges;
}

// Sources, edges and the density rule's verdict of rows [r0, r1) as one tile.
bool dense_by_rule(const Graph& g, int64_t r0, int64_t r1, const GsaTileOptions& opt, int64_t* n_union = nullptr,
                   double* density_out = nullptr) {
  std::set<int32_t> sources;
  for (int64_t e = g.row_ptr[r0]; e < g.row_ptr[r1]; ++e) sources.insert(g.col[e]);
  const int64_t edges = g.row_ptr[r1] - g.row_ptr[r0];
  const double density = sources.empty() ? 0.0 : double(edges) / double((r1 - r0) * int64_t(sources.size()));
  if (n_union != nullptr) *n_union = static_cast<int64_t>(sources.size());
  if (density_out != nullptr) *density_out = density;
  return !sources.empty() && density >= opt.min_density && static_cast<int64_t>(sources.size()) <= opt.max_union;
}

// Every edge lies in exactly one place: a set mask bit of a dense tile, or a fallback row; no mask bit without an
// edge; unions sorted, unique and exactly the tile's sources; densities as defined. 64-row plans: the 64-row tiles
// that pass the rule first, then the 16-row tiles of those that fail it that pass it, the rest fallback rows.
void check_cover(const Graph& g, const GsaTilePlan& plan, const GsaTileOptions& opt) {
  const int64_t n = g.n_nodes(), R = opt.rows;
  ASSERT_EQ(plan.tile_rows, R);
  ASSERT_EQ(plan.n_tiles, (n + R - 1) / R);
  ASSERT_EQ(plan.union_ptr.size(), plan.dense_tile.size() + 1);
  ASSERT_EQ(plan.mask_ptr.size(), plan.dense_tile.size() + 1);
  if (R == kGsaTileRows) ASSERT_EQ(plan.n_wide, 0);
  std::vector<int> row_owner(static_cast<size_t>(n), 0);  // 1: in a dense tile, 2: fallback
  for (int64_t u : plan.fallback_rows) row_owner[u] += 2;
  int64_t dense_edges = 0;
  size_t next_dense = 0, next_narrow = static_cast<size_t>(plan.n_wide);
  for (int64_t t = 0; t < plan.n_tiles; ++t) {
    const int64_t r0 = t * R, r1 = std::min(n, r0 + R);
    int64_t n_union = 0;
    double density = 0.0;
    const bool dense = dense_by_rule(g, r0, r1, opt, &n_union, &density);
    EXPECT_EQ(plan.tile_union[t], n_union);
    EXPECT_EQ(plan.tile_edges[t], g.row_ptr[r1] - g.row_ptr[r0]);
    EXPECT_DOUBLE_EQ(plan.tile_density[t], density);
    ASSERT_EQ(plan.tile_dense[t] != 0, dense) << "tile " << t;
    if (dense) {
      ASSERT_LT(next_dense, plan.dense_tile.size());
      const int64_t i = static_cast<int64_t>(next_dense++);
      ASSERT_EQ(plan.dense_tile[i], t);
      SCOPED_TRACE("tile " + std::to_string(t));
      dense_edges += check_dense_tile(g, plan, i, r0, r1, R, row_owner);
      continue;
    }
    if (R == kGsaTileRows) continue;
    for (int64_t s0 = r0; s0 < r1; s0 += kGsaTileRows) {  // a 64-row tile that fails: its 16-row tiles
      const int64_t s1 = std::min(n, s0 + kGsaTileRows);
      if (!dense_by_rule(g, s0, s1, opt)) continue;
      ASSERT_LT(next_narrow, plan.dense_tile.size());
      const int64_t i = static_cast<int64_t>(next_narrow++);
      ASSERT_EQ(plan.dense_tile[i], s0 / kGsaTileRows);
      SCOPED_TRACE("16-row tile " + std::to_string(s0 / kGsaTileRows));
      dense_edges += check_dense_tile(g, plan, i, s0, s1, kGsaTileRows, row_owner);
    }
  }
  if (R == kGsaTileRows) {
    EXPECT_EQ(next_dense, plan.dense_tile.size());
  } else {
    EXPECT_EQ(static_cast<int64_t>(next_dense), plan.n_wide);
    EXPECT_EQ(next_narrow, plan.dense_tile.size());
  }
  EXPECT_EQ(plan.dense_edges, dense_edges);
  int64_t fallback_edges = 0;
  for (int64_t u = 0; u < n; ++u) {
    ASSERT_TRUE(row_owner[u] == 1 || row_owner[u] == 2) << "row " << u << " owner " << row_owner[u];
    if (row_owner[u] == 2) fallback_edges += g.row_ptr[u + 1] - g.row_ptr[u];
  }
  EXPECT_TRUE(std::is_sorted(plan.fallback_rows.begin(), plan.fallback_rows.end()));
  EXPECT_EQ(dense_edges + fallback_edges, g.n_edges());
}

struct PlanCase {
  std::string pattern;
  Params params;
};

std::vector<PlanCase> plan_cases() {
  return {{"bpt", {{"k", 4}}}, {"window", {{"w", 9}}}, {"window", {{"w", 128}}}, {"dense", {}},
          {"bigbird", small_params(find_pattern("bigbird"))}};
}

TEST(GsaTilePlan, EveryEdgeOnceAcrossDenseTilesAndFallbackRows) {
  for (const PlanCase& pc : plan_cases()) {
    const AttentionPattern& pat = find_pattern(pc.pattern);
    for (bool causal : {false, true}) {
      if (causal && !pat.supports_causal()) continue;
      for (int64_t n : {1, 2, 97, 1025}) {
        if (pc.pattern == "dense" && n > 97) continue;
        const Graph g = build_pattern(pc.pattern, n, causal, pc.params);
        for (const GsaTileOptions opt : {GsaTileOptions{}, GsaTileOptions{0.0, 64}, GsaTileOptions{1.1, 2048}}) {
          SCOPED_TRACE((GsaCase{pc.pattern, pc.params, n, causal}.id()) + " min_density=" +
                       std::to_string(opt.min_density) + " max_union=" + std::to_string(opt.max_union));
          const GsaTilePlan plan = gsa_tile_plan(g.row_ptr.data(), g.col.data(), g.n_nodes(), opt);
          check_cover(g, plan, opt);
          if (opt.min_density > 1.0) EXPECT_EQ(plan.n_dense(), 0);  // density never exceeds 1
        }
      }
    }
  }
}

// 64-row tiles (SB_CUDA_TC_ROWS=64): the same cover on the same patterns, with 64-row tiles that fail the rule planned
// as 16-row tiles; sizes around the 64-row boundary (63, 64, 65, 1025, 4096) too.
TEST(GsaTilePlan, WideTilesCoverEveryEdgeOnce) {
  int64_t wide = 0, narrow = 0;
  for (const PlanCase& pc : plan_cases()) {
    const AttentionPattern& pat = find_pattern(pc.pattern);
    for (bool causal : {false, true}) {
      if (causal && !pat.supports_causal()) continue;
      for (int64_t n : {1, 2, 63, 64, 65, 97, 1025, 4096}) {
        if (pc.pattern == "dense" && n > 97) continue;
        const Graph g = build_pattern(pc.pattern, n, causal, pc.params);
        for (const GsaTileOptions opt : {GsaTileOptions{0.35, 1024, 64}, GsaTileOptions{0.0, 64, 64},
                                         GsaTileOptions{0.9, 2048, 64}, GsaTileOptions{1.1, 2048, 64}}) {
          SCOPED_TRACE((GsaCase{pc.pattern, pc.params, n, causal}.id()) + " min_density=" +
                       std::to_string(opt.min_density) + " max_union=" + std::to_string(opt.max_union));
          const GsaTilePlan plan = gsa_tile_plan(g.row_ptr.data(), g.col.data(), g.n_nodes(), opt);
          check_cover(g, plan, opt);
          if (opt.min_density > 1.0) EXPECT_EQ(plan.n_dense(), 0);
          wide += plan.n_wide;
          narrow += plan.n_dense() - plan.n_wide;
        }
      }
    }
  }
  EXPECT_GT(wide, 0);
  EXPECT_GT(narrow, 0);  // some 64-row tiles failed and left dense 16-row tiles
}

// 64-row decisions where they are known: a causal window w=128 is dense in 64-row tiles too (each sees at most 191
// columns, density >= 0.66); bpt k=4's token tiles fail the default rule as 64-row tiles and come back as its 16-row
// plan's tiles, and pass it at 0.15 (span nodes off the tiles); a graph without edges has no dense tile; rows other
// than 16 and 64 are refused.
TEST(GsaTilePlan, WideTilesDecideWindowDenseAndBptMixed) {
  const GsaTileOptions wide{0.35, 1024, 64};
  const Graph w = build_pattern("window", 1024, true, {{"w", 128}});
  const GsaTilePlan pw = gsa_tile_plan(w.row_ptr.data(), w.col.data(), w.n_nodes(), wide);
  EXPECT_EQ(pw.tile_rows, 64);
  EXPECT_EQ(pw.n_tiles, 16);
  EXPECT_EQ(pw.n_wide, pw.n_tiles);
  EXPECT_EQ(pw.n_dense(), pw.n_tiles);
  EXPECT_EQ(pw.dense_edges, w.n_edges());
  EXPECT_TRUE(pw.fallback_rows.empty());
  const Graph b = build_pattern("bpt", 4096, true, {{"k", 4}});
  const GsaTilePlan pb = gsa_tile_plan(b.row_ptr.data(), b.col.data(), b.n_nodes(), wide);
  // bpt's 64-row token tiles have density ~0.19: at 0.35 every one is planned as 16-row tiles, as the 16-row plan has
  // them; at 0.15 they run as 64-row tiles.
  const GsaTilePlan pb16 = gsa_tile_plan(b.row_ptr.data(), b.col.data(), b.n_nodes());
  EXPECT_EQ(pb.n_wide, 0);
  EXPECT_EQ(pb.dense_tile, pb16.dense_tile);
  EXPECT_EQ(pb.mask, pb16.mask);
  EXPECT_EQ(pb.fallback_rows, pb16.fallback_rows);
  const GsaTilePlan pb15 = gsa_tile_plan(b.row_ptr.data(), b.col.data(), b.n_nodes(), GsaTileOptions{0.15, 1024, 64});
  EXPECT_GT(pb15.n_wide, 0);
  EXPECT_LT(pb15.dense_edges, b.n_edges());
  EXPECT_FALSE(pb15.fallback_rows.empty());
  const std::vector<int64_t> empty_ptr(5, 0);
  const GsaTilePlan pe = gsa_tile_plan(empty_ptr.data(), nullptr, 4, wide);
  EXPECT_EQ(pe.n_dense(), 0);
  EXPECT_EQ(pe.fallback_rows, (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_THROW(gsa_tile_plan(empty_ptr.data(), nullptr, 4, GsaTileOptions{0.35, 1024, 32}), Error);
}

// SB_CUDA_TC_ROWS: unset, empty or 16 give 16, 64 gives 64, anything else an error naming the variable.
TEST(GsaTilePlan, TileRowsSwitchTakesOnly16And64) {
  EXPECT_EQ(gsa_tile_rows_switch(nullptr), 16);
  EXPECT_EQ(gsa_tile_rows_switch(""), 16);
  EXPECT_EQ(gsa_tile_rows_switch("16"), 16);
  EXPECT_EQ(gsa_tile_rows_switch("64"), 64);
  for (const char* bad : {"32", "1", "64 ", "sixty-four"}) {
    try {
      gsa_tile_rows_switch(bad);
      ADD_FAILURE() << "accepted SB_CUDA_TC_ROWS=" << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("SB_CUDA_TC_ROWS=" + std::string(bad) + ":"), std::string::npos) << e.what();
    }
  }
  const int64_t rows = gsa_tile_rows_from_env();
  EXPECT_TRUE(rows == 16 || rows == 64);
}

// The planner's decisions where they are known: a window's token tiles are dense at w = 128 (causal: each 16-row tile
// sees 143 columns, density >= 0.83), dense attention's tiles are dense, and an empty graph has none.
TEST(GsaTilePlan, DecidesWindowAndDenseTilesDense) {
  const Graph w = build_pattern("window", 1024, true, {{"w", 128}});
  const GsaTilePlan pw = gsa_tile_plan(w.row_ptr.data(), w.col.data(), w.n_nodes());
  EXPECT_EQ(pw.n_dense(), pw.n_tiles);
  EXPECT_EQ(pw.dense_edges, w.n_edges());
  EXPECT_TRUE(pw.fallback_rows.empty());
  const Graph d = build_pattern("dense", 97, false, {});
  const GsaTilePlan pd = gsa_tile_plan(d.row_ptr.data(), d.col.data(), d.n_nodes());
  EXPECT_EQ(pd.n_dense(), pd.n_tiles);
  for (double x : pd.tile_density) EXPECT_DOUBLE_EQ(x, 1.0);
  const std::vector<int64_t> empty_ptr(5, 0);
  const GsaTilePlan pe = gsa_tile_plan(empty_ptr.data(), nullptr, 4);
  EXPECT_EQ(pe.n_dense(), 0);
  EXPECT_EQ(pe.fallback_rows, (std::vector<int64_t>{0, 1, 2, 3}));
}

// A row that repeats a source keeps its tile off the dense path (its mask would hold the pair once).
TEST(GsaTilePlan, RepeatedSourceKeepsTheTileOnTheEdgeKernels) {
  const std::vector<int64_t> row_ptr = {0, 2, 3};
  const std::vector<int32_t> col = {1, 1, 0};
  const GsaTilePlan plan = gsa_tile_plan(row_ptr.data(), col.data(), 2);
  EXPECT_EQ(plan.n_dense(), 0);
  EXPECT_EQ(plan.fallback_rows, (std::vector<int64_t>{0, 1}));
}

// Walks dense tile i of a plan of CSR (row_ptr, col) as the kernels do, chunk by chunk with a running count of each
// row's earlier mask bits, and checks that gsa_tile_edge names, for every set bit, the row's edge to that union column
// (found by a search of the row), each of the tile's edges once.
void check_tile_edges(const GsaTilePlan& plan, int64_t i, const int64_t* row_ptr, const int32_t* col, int64_t n) {
  const int64_t r0 = plan.first_row(i), rows = plan.rows_of(i), words = plan.words(i);
  const int32_t* unions = plan.union_col.data() + plan.union_ptr[i];
  ASSERT_EQ(plan.edge_ptr[i + 1] - plan.edge_ptr[i], row_ptr[std::min(n, r0 + rows)] - row_ptr[r0]);
  for (int64_t r = 0; r < rows && r0 + r < n; ++r) {
    const int64_t u = r0 + r;
    const int32_t* row_edges = plan.edge.data() + plan.edge_ptr[i] + (row_ptr[u] - row_ptr[r0]);
    std::set<int64_t> met;
    int64_t seen = 0;
    for (int64_t w = 0; w < words; ++w) {
      const uint32_t word = plan.mask[plan.mask_ptr[i] + r * words + w];
      for (int64_t c = w * kGsaTileMaskBits; c < (w + 1) * kGsaTileMaskBits; ++c) {
        if (!plan.mask_bit(i, r, c)) continue;
        const int64_t e = gsa_tile_edge(row_edges, seen, word, c);
        int64_t want = -1;
        for (int64_t x = row_ptr[u]; x < row_ptr[u + 1]; ++x) {
          if (col[x] == unions[c]) want = x;
        }
        ASSERT_EQ(e, want) << "tile " << plan.dense_tile[i] << " row " << r << " column " << c;
        met.insert(e);
      }
      seen += __builtin_popcount(word);
    }
    EXPECT_EQ(static_cast<int64_t>(met.size()), row_ptr[u + 1] - row_ptr[u]) << "row " << u;
  }
}

// Every dense tile's edge list, by destination and by source (the transpose), and on a CSR whose rows list their
// sources out of order (the list is then no identity).
TEST(GsaTilePlan, TileEdgesNameTheEdgeOfEveryMaskBit) {
  for (const PlanCase& pc : plan_cases()) {
    for (bool causal : {false, true}) {
      if (causal && !find_pattern(pc.pattern).supports_causal()) continue;
      const Graph g = build_pattern(pc.pattern, pc.pattern == "dense" ? 97 : 1025, causal, pc.params);
      SCOPED_TRACE((GsaCase{pc.pattern, pc.params, g.n_nodes(), causal}.id()));
      std::vector<int32_t> shuffled = g.col;
      std::mt19937_64 rng(7);
      for (int64_t u = 0; u < g.n_nodes(); ++u) {
        std::shuffle(shuffled.begin() + g.row_ptr[u], shuffled.begin() + g.row_ptr[u + 1], rng);
      }
      const std::pair<const std::vector<int64_t>*, const std::vector<int32_t>*> csrs[] = {
          {&g.row_ptr, &g.col}, {&g.t_row_ptr, &g.t_col}, {&g.row_ptr, &shuffled}};
      for (const auto& [ptr, col] : csrs) {
        // 16-row plans, 64-row plans of only 64-row tiles, and 64-row plans with 16-row tiles after them
        for (const GsaTileOptions opt : {GsaTileOptions{0.0, 4096}, GsaTileOptions{0.0, 4096, 64},
                                         GsaTileOptions{0.35, 1024, 64}}) {
          const GsaTilePlan plan = gsa_tile_plan(ptr->data(), col->data(), g.n_nodes(), opt);
          if (opt.min_density == 0.0) ASSERT_GT(plan.n_dense(), 0);
          ASSERT_EQ(plan.edge_ptr.size(), plan.dense_tile.size() + 1);
          EXPECT_EQ(plan.edge_ptr.back(), plan.dense_edges);
          for (int64_t i = 0; i < plan.n_dense(); ++i) {
            check_tile_edges(plan, i, ptr->data(), col->data(), g.n_nodes());
          }
        }
      }
    }
  }
}

// The fallback schedule: only fallback rows' pieces, split rows and order entries, in the full schedule's order.
TEST(GsaTilePlan, FallbackScheduleKeepsOnlyFallbackRows) {
  for (const PlanCase& pc : plan_cases()) {
    const Graph g = build_pattern(pc.pattern, pc.pattern == "dense" ? 97 : 1025, true, pc.params);
    const GsaTilePlan plan = gsa_tile_plan(g.row_ptr.data(), g.col.data(), g.n_nodes());
    const GsaPackedSchedule full = gsa_pack_schedule(g.row_ptr.data(), g.n_nodes(), 8);
    GsaScheduleSizes sizes;
    const std::vector<int64_t> data =
        gsa_fallback_schedule(full.data, g.n_nodes(), full.n_pieces, full.n_split, plan, &sizes);
    const GsaScheduleView f = gsa_schedule_view_sized(data.data(), sizes);
    SCOPED_TRACE(pc.pattern);
    if (pc.pattern == "bpt") {  // token tiles dense, span nodes' tiles (scattered sources) on the edge kernels
      EXPECT_GT(plan.n_dense(), 0);
      EXPECT_FALSE(plan.fallback_rows.empty());
    }
    std::vector<int64_t> covered(static_cast<size_t>(g.n_edges()), 0);
    for (int64_t i = 0; i < f.n_split; ++i) {
      for (int64_t k = f.piece_ptr[i]; k < f.piece_ptr[i + 1]; ++k) {
        ASSERT_EQ(f.piece_row[k], f.split_rows[i]);
        for (int64_t e = f.piece_begin[k]; e < f.piece_end[k]; ++e) ++covered[e];
      }
    }
    for (int64_t i = 0; i < f.n_order; ++i) {
      for (int64_t e = g.row_ptr[f.order[i]]; e < g.row_ptr[f.order[i] + 1]; ++e) ++covered[e];
    }
    std::vector<uint8_t> fallback(static_cast<size_t>(g.n_nodes()), 0);
    for (int64_t u : plan.fallback_rows) fallback[u] = 1;
    for (int64_t u = 0; u < g.n_nodes(); ++u) {
      for (int64_t e = g.row_ptr[u]; e < g.row_ptr[u + 1]; ++e) ASSERT_EQ(covered[e], fallback[u]) << "edge " << e;
    }
    EXPECT_LE(f.n_pieces, full.n_pieces);
    // Without a schedule: the fallback rows in ascending order.
    const std::vector<int64_t> plain = gsa_fallback_schedule({}, g.n_nodes(), 0, 0, plan, &sizes);
    EXPECT_EQ(sizes.n_pieces, 0);
    std::vector<int64_t> want{0};  // piece_ptr's one entry, then the order
    want.insert(want.end(), plan.fallback_rows.begin(), plan.fallback_rows.end());
    EXPECT_EQ(plain, want);
  }
}

// Packed tiles (what a prepared CUDA graph uploads) read back through gsa_tile_view give the plan's arrays, its tile
// rows and the fallback schedule (16- and 64-row plans).
void check_packed_tiles(int64_t rows) {
  const Graph g = build_pattern("bpt", 1025, true, {{"k", 4}});
  const GsaTilePlan plan = gsa_tile_plan(g.row_ptr.data(), g.col.data(), g.n_nodes(),
                                         GsaTileOptions{rows == kGsaTileRows ? 0.35 : 0.15, 1024, rows});
  const GsaPackedSchedule full = gsa_pack_schedule(g.row_ptr.data(), g.n_nodes(), 8);
  const GsaPackedTiles packed = gsa_pack_tiles(plan, full.data, full.n_pieces, full.n_split);
  const GsaTileView v = gsa_tile_view(packed.data.data(), packed);
  ASSERT_EQ(v.n_dense, plan.n_dense());
  ASSERT_GT(v.n_dense, 0);
  EXPECT_EQ(v.dense_edges, plan.dense_edges);
  EXPECT_EQ(v.tile_rows, rows);
  EXPECT_EQ(v.n_wide, plan.n_wide);
  if (rows == kGsaWideTileRows) EXPECT_GT(v.n_wide, 0);
  if (rows == kGsaWideTileRows) EXPECT_LT(v.n_wide, v.n_dense);  // 16-row tiles after the 64-row ones
  EXPECT_EQ(std::vector<int64_t>(v.dense_tile, v.dense_tile + v.n_dense), plan.dense_tile);
  EXPECT_EQ(std::vector<int64_t>(v.union_ptr, v.union_ptr + v.n_dense + 1), plan.union_ptr);
  EXPECT_EQ(std::vector<int64_t>(v.mask_ptr, v.mask_ptr + v.n_dense + 1), plan.mask_ptr);
  EXPECT_EQ(std::vector<int32_t>(v.union_col, v.union_col + plan.union_col.size()), plan.union_col);
  EXPECT_EQ(std::vector<uint32_t>(v.mask, v.mask + plan.mask.size()), plan.mask);
  EXPECT_EQ(std::vector<int64_t>(v.edge_ptr, v.edge_ptr + v.n_dense + 1), plan.edge_ptr);
  EXPECT_EQ(std::vector<int32_t>(v.edge, v.edge + plan.edge.size()), plan.edge);
  GsaScheduleSizes sizes;
  const std::vector<int64_t> rest = gsa_fallback_schedule(full.data, g.n_nodes(), full.n_pieces, full.n_split, plan,
                                                          &sizes);
  EXPECT_EQ(v.n_rest_rows, static_cast<int64_t>(plan.fallback_rows.size()));
  EXPECT_EQ(v.rest.n_pieces, sizes.n_pieces);
  EXPECT_EQ(v.rest.n_split, sizes.n_split);
  EXPECT_EQ(v.rest.n_order, sizes.n_order);
  EXPECT_EQ(std::vector<int64_t>(v.rest.piece_begin, v.rest.piece_begin + rest.size()), rest);
}

TEST(GsaTilePlan, PackedTilesReadBackAsThePlan) {
  for (int64_t rows : {16, 64}) {
    SCOPED_TRACE("rows " + std::to_string(rows));
    check_packed_tiles(rows);
  }
}

// The relation term q_u . r of the edge of set mask bit (r, c) of dense tile i, as the kernels find it: the row's
// earlier set bits (seen) and gsa_tile_edge; 0 without relation embeddings. e_out: the edge.
double tile_rel_term(const GsaTilePlan& plan, int64_t i, const Graph& g, const RefProblem& prob, const double* q,
                     int64_t r, int64_t c, int64_t seen, int64_t* e_out) {
  const int64_t r0 = plan.first_row(i), u = r0 + r, D = prob.D;
  const int32_t* row_edges = plan.edge.data() + plan.edge_ptr[i] + (g.row_ptr[u] - g.row_ptr[r0]);
  const uint32_t word = plan.mask[plan.mask_ptr[i] + r * plan.words(i) + c / kGsaTileMaskBits];
  const int64_t e = gsa_tile_edge(row_edges, seen, word, c);
  if (e_out != nullptr) *e_out = e;
  if (prob.rel_emb.empty()) return 0.0;
  double dot = 0.0;
  for (int64_t d = 0; d < D; ++d) dot += q[d] * prob.rel_emb[g.rel[e] * D + d];
  return dot;
}

// Set bits of row r's mask words of dense tile i before column c0 (c0 a multiple of 32).
int64_t bits_before(const GsaTilePlan& plan, int64_t i, int64_t r, int64_t c0) {
  int64_t n = 0;
  for (int64_t w = 0; w < c0 / kGsaTileMaskBits; ++w) n += __builtin_popcount(plan.mask[plan.mask_ptr[i] + r * plan.words(i) + w]);
  return n;
}

// The tensor-core forward's arithmetic for one (tile, batch, head), in double: Q rows of the tile, the union's K and V
// rows gathered in chunks of `chunk` columns, S = (Q K^T + q . r of each edge's relation) * scale, masked entries -inf,
// online softmax per row (running max and sum, rescale of O), O += P V; finally O / l and lse = m + log l (o = 0,
// lse = -inf for an empty row). g: the graph planned (its relations).
void emulate_tile(const GsaTilePlan& plan, int64_t i, const Graph& g, const RefProblem& prob, int64_t b, int64_t h,
                  int64_t chunk, std::vector<double>& o, std::vector<double>& lse) {
  const int64_t N = prob.N, H = prob.H, D = prob.D;
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  auto idx = [&](int64_t n, int64_t d) { return ((b * N + n) * H + h) * D + d; };
  const int64_t r0 = plan.first_row(i), rows = plan.rows_of(i);
  const int64_t U = plan.union_ptr[i + 1] - plan.union_ptr[i];
  const int32_t* cols = plan.union_col.data() + plan.union_ptr[i];
  const double neg_inf = -std::numeric_limits<double>::infinity();
  std::vector<double> q(rows * D, 0.0), acc(rows * D, 0.0), m(rows, neg_inf), l(rows, 0.0);
  for (int64_t r = 0; r < rows && r0 + r < N; ++r) {
    for (int64_t d = 0; d < D; ++d) q[r * D + d] = prob.q[idx(r0 + r, d)];
  }
  std::vector<double> kc(chunk * D), vc(chunk * D), s(chunk);
  for (int64_t c0 = 0; c0 < U; c0 += chunk) {
    for (int64_t j = 0; j < chunk; ++j) {  // gather, zero past the union
      for (int64_t d = 0; d < D; ++d) {
        kc[j * D + d] = c0 + j < U ? prob.k[idx(cols[c0 + j], d)] : 0.0;
        vc[j * D + d] = c0 + j < U ? prob.v[idx(cols[c0 + j], d)] : 0.0;
      }
    }
    for (int64_t r = 0; r < rows; ++r) {
      double mx = m[r];
      for (int64_t j = 0; j < chunk; ++j) {
        double dot = 0.0;
        for (int64_t d = 0; d < D; ++d) dot += q[r * D + d] * kc[j * D + d];
        const bool edge = c0 + j < U && plan.mask_bit(i, r, c0 + j);
        if (edge) dot += tile_rel_term(plan, i, g, prob, &q[r * D], r, c0 + j, bits_before(plan, i, r, c0), nullptr);
        s[j] = edge ? dot * scale : neg_inf;
        mx = std::max(mx, s[j]);
      }
      if (mx == neg_inf) continue;  // nothing seen yet
      const double alpha = m[r] == neg_inf ? 0.0 : std::exp(m[r] - mx);
      l[r] *= alpha;
      for (int64_t d = 0; d < D; ++d) acc[r * D + d] *= alpha;
      for (int64_t j = 0; j < chunk; ++j) {
        const double p = s[j] == neg_inf ? 0.0 : std::exp(s[j] - mx);
        l[r] += p;
        for (int64_t d = 0; d < D; ++d) acc[r * D + d] += p * vc[j * D + d];
      }
      m[r] = mx;
    }
  }
  for (int64_t r = 0; r < rows && r0 + r < N; ++r) {
    for (int64_t d = 0; d < D; ++d) o[idx(r0 + r, d)] = l[r] > 0.0 ? acc[r * D + d] / l[r] : 0.0;
    lse[(b * N + r0 + r) * H + h] = l[r] > 0.0 ? m[r] + std::log(l[r]) : neg_inf;
  }
}

// The tensor-core dq of one (tile, batch, head) with relation embeddings, in double, from the reference's lse and
// delta = dO . O: per set mask bit P = exp(s - lse) (s with its relation term), dS = P (dO . v - delta); dq_u = scale *
// (sum dS k (the MMA's part) + sum dS r (the relation part)), and each edge's dS to edge_ds [B, E, H], where the lane
// groups' d_rel_emb reduction reads it.
void emulate_tile_dq(const GsaTilePlan& plan, int64_t i, const Graph& g, const RefProblem& prob,
                     const std::vector<double>& d_o, const RefResult& ref, int64_t b, int64_t h,
                     std::vector<double>& dq, std::vector<double>& edge_ds) {
  const int64_t N = prob.N, H = prob.H, D = prob.D, E = g.n_edges();
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  auto idx = [&](int64_t n, int64_t d) { return ((b * N + n) * H + h) * D + d; };
  const int64_t r0 = plan.first_row(i), rows = plan.rows_of(i);
  const int64_t U = plan.union_ptr[i + 1] - plan.union_ptr[i];
  const int32_t* cols = plan.union_col.data() + plan.union_ptr[i];
  for (int64_t r = 0; r < rows && r0 + r < N; ++r) {
    const int64_t u = r0 + r;
    const double lse = ref.lse[(b * N + u) * H + h];
    double delta = 0.0;
    for (int64_t d = 0; d < D; ++d) delta += d_o[idx(u, d)] * ref.o[idx(u, d)];
    std::vector<double> acc(D, 0.0), acc_rel(D, 0.0);
    for (int64_t c = 0; c < U; ++c) {
      if (!plan.mask_bit(i, r, c)) continue;
      int64_t e = -1;
      const double rel = tile_rel_term(plan, i, g, prob, &prob.q[idx(u, 0)], r, c,
                                       bits_before(plan, i, r, c / kGsaTileMaskBits * kGsaTileMaskBits), &e);
      double dot = rel, dp = 0.0;
      for (int64_t d = 0; d < D; ++d) {
        dot += prob.q[idx(u, d)] * prob.k[idx(cols[c], d)];
        dp += d_o[idx(u, d)] * prob.v[idx(cols[c], d)];
      }
      const double ds = std::exp(dot * scale - lse) * (dp - delta);
      for (int64_t d = 0; d < D; ++d) {
        acc[d] += ds * prob.k[idx(cols[c], d)];
        acc_rel[d] += ds * prob.rel_emb[g.rel[e] * D + d];
      }
      edge_ds[(b * E + e) * H + h] = ds;
    }
    for (int64_t d = 0; d < D; ++d) dq[idx(u, d)] = scale * (acc[d] + acc_rel[d]);
  }
}

// Dense tiles everywhere (no density floor): the emulated forward without and with relation embeddings; with them also
// dq, and d_rel_emb reduced by relation from the emulated per-edge dS, as the CUDA backward does. 16-row tiles, and
// 64-row tiles (the 64-row forward's arithmetic per row is the 16-row one's on the 64-row tile's union).
TEST(GsaTilePlan, TileEmulationMatchesDenseReference) {
  for (const PlanCase& pc : plan_cases()) {
    for (int64_t n : {2, 97, 300}) {
      for (const auto& [rel, rows] : {std::pair{false, kGsaTileRows}, std::pair{true, kGsaTileRows},
                                      std::pair{false, kGsaWideTileRows}}) {
        const GsaCase c{pc.pattern, pc.params, n, true, 32, 2, 2, rel};
        const Graph g = build_pattern(c.pattern, c.n, c.causal, c.params);
        const GsaTilePlan plan = gsa_tile_plan(g.row_ptr.data(), g.col.data(), g.n_nodes(), {0.0, 4096, rows});
        ASSERT_EQ(plan.n_wide, rows == kGsaWideTileRows ? plan.n_dense() : 0);
        ASSERT_EQ(plan.n_dense(), plan.n_tiles - static_cast<int64_t>(std::count(plan.tile_edges.begin(),
                                                                                 plan.tile_edges.end(), 0)));
        const RefProblem prob = make_problem(c, g);
        ASSERT_EQ(prob.R > 0, rel) << "the pattern has relations";
        const std::vector<double> d_o = make_d_o(c, g);
        const RefResult ref = reference_attention(prob, DenseMask(g), d_o);
        std::vector<double> o(ref.o.size(), std::nan("")), lse(ref.lse.size(), std::nan(""));
        std::vector<double> dq(ref.o.size(), std::nan(""));
        std::vector<double> edge_ds(static_cast<size_t>(prob.B * g.n_edges() * prob.H), std::nan(""));
        for (int64_t b = 0; b < prob.B; ++b) {
          for (int64_t h = 0; h < prob.H; ++h) {
            for (int64_t i = 0; i < plan.n_dense(); ++i) {
              emulate_tile(plan, i, g, prob, b, h, 32, o, lse);
              if (rel) emulate_tile_dq(plan, i, g, prob, d_o, ref, b, h, dq, edge_ds);
            }
          }
        }
        // Rows of edgeless tiles (no dense tile): zero output, dq and -inf lse, as the reference says.
        for (int64_t u : plan.fallback_rows) {
          ASSERT_EQ(g.row_ptr[u + 1], g.row_ptr[u]);
          for (int64_t b = 0; b < prob.B; ++b) {
            for (int64_t h = 0; h < prob.H; ++h) {
              for (int64_t d = 0; d < prob.D; ++d) o[((b * prob.N + u) * prob.H + h) * prob.D + d] = 0.0;
              for (int64_t d = 0; d < prob.D; ++d) dq[((b * prob.N + u) * prob.H + h) * prob.D + d] = 0.0;
              lse[(b * prob.N + u) * prob.H + h] = -std::numeric_limits<double>::infinity();
            }
          }
        }
        SCOPED_TRACE(c.id() + " rows " + std::to_string(rows));
        EXPECT_LE(max_abs_diff(o, ref.o), 1e-12);
        for (size_t k = 0; k < lse.size(); ++k) {
          if (std::isinf(ref.lse[k])) {
            EXPECT_TRUE(std::isinf(lse[k]) && lse[k] < 0) << "lse " << k;
          } else {
            EXPECT_NEAR(lse[k], ref.lse[k], 1e-12) << "lse " << k;
          }
        }
        if (!rel) continue;
        EXPECT_LE(max_abs_diff(dq, ref.dq), 1e-11 * std::max(1.0, max_abs(ref.dq)));
        // d_rel_emb[r] = scale * sum over r's edges, batches and heads of dS q_dst (drel_slice_kernel's sum).
        std::vector<double> d_rel(ref.d_rel.size(), 0.0);
        const double scale = 1.0 / std::sqrt(static_cast<double>(prob.D));
        for (int64_t u = 0; u < prob.N; ++u) {
          for (int64_t e = g.row_ptr[u]; e < g.row_ptr[u + 1]; ++e) {
            for (int64_t b = 0; b < prob.B; ++b) {
              for (int64_t h = 0; h < prob.H; ++h) {
                for (int64_t d = 0; d < prob.D; ++d) {
                  d_rel[g.rel[e] * prob.D + d] += scale * edge_ds[(b * g.n_edges() + e) * prob.H + h] *
                                                  prob.q[((b * prob.N + u) * prob.H + h) * prob.D + d];
                }
              }
            }
          }
        }
        EXPECT_LE(max_abs_diff(d_rel, ref.d_rel), 1e-11 * std::max(1.0, max_abs(ref.d_rel)));
      }
    }
  }
}

}  // namespace
}  // namespace sb::test
