// BPT and segtree: exact coverage, hand-worked labels, degree table of the paper, dense limit, relation ids.
#include <gtest/gtest.h>

#include <cmath>
#include <fmt/format.h>

#include "common/error.h"
#include "patterns/pattern.h"
#include "patterns/patterns.h"
#include "pattern_test_util.h"

using namespace sb;
using sb::testing::coverage_defect;
using sb::testing::sources_of;

namespace {

// Every token's sources must tile [0, n-1] (causal: [0, i]) with disjoint spans.
void expect_exact_coverage(const std::string& name, const Params& params, int64_t max_n) {
  for (bool causal : {false, true}) {
    for (int64_t n = 1; n <= max_n; ++n) {
      const Graph g = build_pattern(name, n, causal, params);
      for (int64_t i = 0; i < n; ++i) {
        const std::string defect = coverage_defect(g, i, causal ? i : n - 1);
        ASSERT_EQ(defect, "") << name << " n=" << n << (causal ? " causal" : " bidir") << ": " << defect;
      }
    }
  }
}

}  // namespace

TEST(Bpt, CoverageIsExactForEveryNAndK) {
  for (int64_t k : {1, 2, 3, 4, 8, 64}) {
    SCOPED_TRACE(fmt::format("k={}", k));
    expect_exact_coverage("bpt", {{"k", k}}, 300);
  }
}

TEST(Segtree, CoverageIsExactForEveryN) { expect_exact_coverage("segtree", {}, 300); }

TEST(Segtree, CoverIsMinimalAndHoldsNeighbourLeaves) {
  // n = 16, token 5: [0,3] is one node, leaves 4, 5, 6, then [7], [8,15].
  const Graph g = build_pattern("segtree", 16, false);
  std::vector<std::pair<int32_t, int32_t>> spans;
  for (const auto& [v, r] : sources_of(g, 5)) spans.emplace_back(g.nodes[v].first, g.nodes[v].last);
  std::sort(spans.begin(), spans.end());
  const std::vector<std::pair<int32_t, int32_t>> expected = {{0, 3}, {4, 4}, {5, 5}, {6, 6}, {7, 7}, {8, 15}};
  EXPECT_EQ(spans, expected);
  // The root is the whole cover of a token whose neighbours are absent: n = 1.
  const Graph one = build_pattern("segtree", 1, false);
  EXPECT_EQ(one.n_nodes(), 1);
  EXPECT_EQ(one.n_edges(), 1);
}

TEST(Bpt, HandWorkedLabelsN8K1) {
  // n = 8: level 1 nodes are ids 8..11, level 2 ids 12..13, the root id 14.
  const Graph g = build_pattern("bpt", 8, false, {{"k", 1}});
  ASSERT_EQ(g.n_nodes(), 15);
  using Row = std::vector<std::pair<int32_t, std::string>>;
  // Token 3: token 2 and 4 at level 0; token 5 is the overlap child taken at level 1; [0,1] at level 1;
  // [6,7] is the level-1 overlap child taken at level 2.
  EXPECT_EQ(sources_of(g, 3), (Row{{2, "left:0:1"}, {3, "self"}, {4, "right:0:1"}, {5, "right:1:1"},
                                   {8, "left:1:1"}, {11, "right:2:1"}}));
  // Token 0: nothing on the left; one node per level on the right.
  EXPECT_EQ(sources_of(g, 0), (Row{{0, "self"}, {1, "right:0:1"}, {9, "right:1:1"}, {13, "right:2:1"}}));
  // Affiliated edges: span [4,7] (id 13) receives from its tokens with anc:2; the root from all with anc:3.
  EXPECT_EQ(sources_of(g, 13), (Row{{4, "anc:2"}, {5, "anc:2"}, {6, "anc:2"}, {7, "anc:2"}}));
  for (const auto& [v, r] : sources_of(g, 14)) EXPECT_EQ(r, "anc:3");
  EXPECT_EQ(g.row_ptr[15] - g.row_ptr[14], 8);
  // Causal drops the right side only.
  const Graph c = build_pattern("bpt", 8, true, {{"k", 1}});
  EXPECT_EQ(sources_of(c, 3), (Row{{2, "left:0:1"}, {3, "self"}, {8, "left:1:1"}}));
}

TEST(Bpt, HandWorkedLabelsN13K2) {
  // n = 13, k = 2. Level sizes 13, 7, 4, 2, 1; level 1 ids 13..19, level 2 ids 20..23, level 3 ids 24..25.
  const Graph g = build_pattern("bpt", 13, false, {{"k", 2}});
  ASSERT_EQ(g.n_nodes(), 27);
  using Row = std::vector<std::pair<int32_t, std::string>>;
  // Token 6: tokens 4,5 / 7,8 at level 0; next left 3 is odd -> level 1 from node 1 ([2,3]) and node 0;
  // next right 9 is odd -> token 9 is the overlap child, then level-1 node 5 ([10,11]);
  // level 2: next right 6 is even -> its parent, level-2 node 3 (id 23, the ragged [12]), and nothing beyond.
  EXPECT_EQ(sources_of(g, 6), (Row{{4, "left:0:2"}, {5, "left:0:1"}, {6, "self"}, {7, "right:0:1"}, {8, "right:0:2"},
                                   {9, "right:1:1"}, {13, "left:1:2"}, {14, "left:1:1"}, {18, "right:1:2"},
                                   {23, "right:2:1"}}));
}

TEST(Bpt, RaggedRightEdgeOverlapChildIsBoundsChecked) {
  // n = 5, k = 1, token 3: the right overlap child (token 5) does not exist; the original code took
  // node id 5 (span [0,1]) instead, covering tokens 0 and 1 twice.
  const Graph g = build_pattern("bpt", 5, false, {{"k", 1}});
  using Row = std::vector<std::pair<int32_t, std::string>>;
  EXPECT_EQ(sources_of(g, 3), (Row{{2, "left:0:1"}, {3, "self"}, {4, "right:0:1"}, {5, "left:1:1"}}));
  EXPECT_EQ(g.nodes[5].kind, NodeKind::span);
  EXPECT_EQ(g.nodes[5].first, 0);
  EXPECT_EQ(g.nodes[5].last, 1);
}

TEST(Bpt, NodeSpansFollowTheLevels) {
  const int64_t n = 13;
  const Graph g = build_pattern("bpt", n, false, {{"k", 1}});
  int64_t id = n;
  int64_t size = n;
  for (int level = 1; size > 1; ++level) {
    size = (size + 1) / 2;
    for (int64_t t = 0; t < size; ++t, ++id) {
      ASSERT_LT(id, g.n_nodes());
      EXPECT_EQ(g.nodes[id].kind, NodeKind::span);
      EXPECT_EQ(g.nodes[id].level, level);
      EXPECT_EQ(g.nodes[id].first, t << level);
      EXPECT_EQ(g.nodes[id].last, std::min<int64_t>((t + 1) << level, n) - 1);
    }
  }
  EXPECT_EQ(id, g.n_nodes());
}

TEST(Bpt, MeanCausalInDegreeAtN511MatchesThePaper) {
  const std::vector<std::pair<int64_t, double>> table = {{1, 9.0},   {2, 14.5},  {4, 23.7}, {8, 38.3},
                                                         {16, 60.6}, {32, 92.2}, {64, 133.5}};
  for (const auto& [k, expected] : table) {
    const GraphStats s = build_pattern("bpt", 511, true, {{"k", k}}).stats(0);
    EXPECT_EQ(fmt::format("{:.1f}", s.token_in_degree_mean), fmt::format("{:.1f}", expected)) << "k=" << k;
  }
}

TEST(Bpt, KAtLeastNIsDenseBetweenTokens) {
  for (int64_t n : {1, 2, 5, 16, 37}) {
    for (bool causal : {false, true}) {
      const Graph g = build_pattern("bpt", n, causal, {{"k", n}});
      for (int64_t i = 0; i < n; ++i) {
        std::vector<int32_t> tokens;
        for (int32_t v : sb::testing::source_ids(g, i)) {
          EXPECT_LT(v, n) << "token " << i << " receives from span node " << v;
          tokens.push_back(v);
        }
        std::vector<int32_t> dense;
        for (int32_t j = 0; j < (causal ? i + 1 : n); ++j) dense.push_back(j);
        EXPECT_EQ(tokens, dense) << "n=" << n << " i=" << i;
      }
    }
  }
}

TEST(Bpt, AffiliatedEdgesAreAncAndIdsFollowTheOriginalNumbering) {
  const int64_t k = 3;
  for (bool causal : {false, true}) {
    const Graph g = build_pattern("bpt", 97, causal, {{"k", k}});
    for (int64_t u = 0; u < g.n_nodes(); ++u) {
      for (int64_t e = g.row_ptr[u]; e < g.row_ptr[u + 1]; ++e) {
        ASSERT_LT(g.rel[e], g.n_relations());
        const std::string& name = g.relations[g.rel[e]];
        int level = 0, m = 0, o = 0;
        if (u >= g.n_tokens) {
          EXPECT_EQ(name, fmt::format("anc:{}", g.nodes[u].level));
          EXPECT_LE(g.nodes[g.col[e]].last, g.nodes[u].last);
          EXPECT_GE(g.nodes[g.col[e]].first, g.nodes[u].first);
          level = g.nodes[u].level;
        } else if (name == "self") {
          EXPECT_EQ(g.col[e], u);
        } else if (std::sscanf(name.c_str(), "left:%d:%d", &level, &m) == 2) {
          EXPECT_LT(g.nodes[g.col[e]].last, u);
          o = 2 * m - 1;
        } else if (std::sscanf(name.c_str(), "right:%d:%d", &level, &m) == 2) {
          EXPECT_FALSE(causal);
          EXPECT_GT(g.nodes[g.col[e]].first, u);
          o = 2 * m;
        } else {
          ADD_FAILURE() << "unexpected relation " << name;
        }
        if (u < g.n_tokens && name != "self") {
          // A node taken at level j lives at level j, or at j-1 when it is an overlap child.
          const int node_level = g.nodes[g.col[e]].level;
          EXPECT_TRUE(node_level == level || (node_level == level - 1 && m == 1)) << name << " from level " << node_level;
          EXPECT_LE(m, k);
        }
        EXPECT_EQ(g.rel[e], (2 * k + 1) * level + o) << name;
      }
    }
  }
}

TEST(Bpt, ClipMergesHighLevels) {
  const Graph g = build_pattern("bpt", 64, false, {{"k", 1}, {"clip", 2}});
  EXPECT_EQ(g.n_relations(), 3 * 3);  // levels 0, 1, 2+ with self/anc, left, right
  // The root (level 6) receives with the clipped anc relation.
  EXPECT_EQ(g.relations[g.rel[g.row_ptr[g.n_nodes() - 1]]], "anc:2");
}

TEST(Bpt, EdgeCountMatchesTheBuiltGraph) {
  for (int64_t n : {1, 7, 300, 1025}) {
    for (int64_t k : {1, 4, 64}) {
      for (bool causal : {false, true}) {
        EXPECT_EQ(bpt_edge_count(n, k, causal), build_pattern("bpt", n, causal, {{"k", k}}).n_edges())
            << n << " " << k << " " << causal;
      }
    }
  }
}

TEST(Bpt, EdgesGrowAsKNLogNOverK) {
  // O(k n log(n/k)): doubling n adds about 2k edges per token per extra level, far below n per token.
  const int64_t n = 1 << 14;
  const Graph g = build_pattern("bpt", n, false, {{"k", 4}});
  const double per_token = static_cast<double>(g.n_edges()) / n;
  EXPECT_LT(per_token, 2.0 * 4 * std::log2(n / 4.0) + std::log2(n) + 2);
  EXPECT_GT(per_token, 4 * std::log2(n / 4.0));
}

TEST(Bpt, TooManyRelationsIsAnError) {
  try {
    build_pattern("bpt", 1 << 16, false, {{"k", 1 << 14}});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("more than 65535"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("k=16384"), std::string::npos) << e.what();
  }
}

TEST(Segtree, EveryTokenUsesTheFewestNodes) {
  // Brute force: the fewest tree nodes tiling [lo, hi], by dynamic programming over start positions.
  for (int64_t n = 1; n <= 70; ++n) {
    for (bool causal : {false, true}) {
      const Graph g = build_pattern("segtree", n, causal);
      auto fewest = [&](int64_t lo, int64_t hi) {
        if (lo > hi) return int64_t{0};
        std::vector<int64_t> best(static_cast<size_t>(hi + 2), INT64_MAX / 2);
        best[hi + 1] = 0;
        for (int64_t p = hi; p >= lo; --p) {
          for (const NodeInfo& nd : g.nodes) {
            if (nd.first == p && nd.last <= hi) best[p] = std::min(best[p], 1 + best[nd.last + 1]);
          }
        }
        return best[lo];
      };
      for (int64_t i = 0; i < n; ++i) {
        // Leaves i-1, i, i+1 are forced; the rest of each side is tiled as sparsely as possible.
        int64_t expected = 1 + (i >= 1) + fewest(0, i - 2);
        if (!causal) expected += (i + 1 < n) + fewest(i + 2, n - 1);
        ASSERT_EQ(g.row_ptr[i + 1] - g.row_ptr[i], expected) << "n=" << n << " i=" << i << (causal ? " causal" : "");
      }
    }
  }
}
