// Reach of pattern graphs: fewest hops from a source token to a query token, and what an L-layer model reaches.
#include <gtest/gtest.h>

#include <cmath>

#include "common/error.h"
#include "patterns/pattern.h"
#include "patterns/reach.h"

using namespace sb;

// Causal window w: token i receives from [i - w + 1, i], so L layers reach exactly distances <= L (w - 1).
TEST(Reach, CausalWindowReachesLTimesWMinusOne) {
  const Graph g = build_pattern("window", 128, true, {{"w", 8}});
  const ReachSummary s = reach_summary(g, 2);
  EXPECT_EQ(s.full_reach(), 14);
  for (const ReachRow& r : s.rows) {
    ASSERT_GT(r.queries, 0) << r.distance;
    EXPECT_EQ(r.min_hops, static_cast<int32_t>((r.distance + 6) / 7)) << r.distance;
    EXPECT_DOUBLE_EQ(r.fraction(), r.distance <= 14 ? 1.0 : 0.0) << r.distance;
  }
  const std::vector<int32_t> h = hops_to(g, 100);
  EXPECT_EQ(h[100], 0);
  EXPECT_EQ(h[93], 1);
  EXPECT_EQ(h[92], 2);
  EXPECT_EQ(h[101], -1);  // causal: the future never reaches the past
}

TEST(Reach, DenseReachesEverythingInOneHop) {
  const Graph g = build_pattern("dense", 200, true);
  const ReachSummary s = reach_summary(g, 1);
  EXPECT_EQ(s.full_reach(), 199);
  for (const ReachRow& r : s.rows) EXPECT_EQ(r.max_hops, 1) << r.distance;
}

// Span nodes start at zero: a token reaches a span node in one hop, the span node a token in the next; so bpt's
// causal tokens reach every earlier token in at most 2 hops, whatever n (the tree gives each token O(k log n)
// sources). With k = 1 and only tokens counted, the token-to-token hops grow like log n.
TEST(Reach, BptReachesAllInTwoHopsThroughSpans) {
  for (const int64_t n : {64, 512}) {
    const Graph g = build_pattern("bpt", n, true, {{"k", 1}});
    const ReachSummary s = reach_summary(g, 2);
    EXPECT_EQ(s.full_reach(), n - 1) << n;
    EXPECT_LT(reach_summary(g, 1).full_reach(), 4) << n;  // one layer: only the nearest tokens
  }
}

// Hops between tokens of bpt grow about log n when span nodes carry nothing: a window-like chain of k = 1 left
// neighbours per level reaches distance 2^j only through level j, so the worst case of a token-only path is bounded
// by the number of levels. Here: the largest hop count over all pairs through the whole graph stays 2, while the
// number of levels grows as log2 n (every token has sources at ceil(log2 n) levels).
TEST(Reach, BptSourcesSpanLogNLevels) {
  for (const int64_t n : {64, 256, 1024}) {
    const Graph g = build_pattern("bpt", n, true, {{"k", 1}});
    int32_t max_level = 0;
    const int64_t last = n - 1;
    for (int64_t e = g.row_ptr[static_cast<size_t>(last)]; e < g.row_ptr[static_cast<size_t>(last) + 1]; ++e) {
      max_level = std::max(max_level, g.nodes[static_cast<size_t>(g.col[static_cast<size_t>(e)])].level);
    }
    EXPECT_GE(max_level, static_cast<int32_t>(std::log2(static_cast<double>(n))) - 2) << n;
    EXPECT_EQ(reach_summary(g, 2, 64).full_reach(), n - 1) << n;
  }
}

// A relay node starts as the mean of every token: in star (bidirectional) every token holds every other after one
// layer.
TEST(Reach, StarRelayStartsWithEveryToken) {
  const Graph g = build_pattern("star", 50, false);
  const std::vector<int32_t> h = hops_to(g, 10);
  for (int64_t s = 0; s < 50; ++s) EXPECT_LE(h[static_cast<size_t>(s)], s == 10 ? 0 : 1) << s;
}

TEST(Reach, Errors) {
  const Graph g = build_pattern("window", 16, true, {{"w", 4}});
  EXPECT_THROW(hops_to(g, 16), Error);
  EXPECT_THROW(reach_summary(g, 0), Error);
  EXPECT_EQ(reach_query_positions(1000, 10).size(), 10u);
  EXPECT_EQ(reach_query_positions(1000, 10).back(), 999);
}
