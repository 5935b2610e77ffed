// Token-level patterns against their definitions: brute-force membership, degree closed forms, structure.
#include <gtest/gtest.h>

#include <functional>
#include <set>

#include <fmt/format.h>

#include "patterns/pattern.h"
#include "pattern_test_util.h"

using namespace sb;
using sb::testing::source_ids;
using sb::testing::sources_of;

namespace {

using Allowed = std::function<bool(int64_t i, int64_t j)>;

// The graph's token rows must be exactly {j : allowed(i, j)} (and hold no extra nodes).
void expect_matches_definition(const std::string& name, const Params& params, int64_t n, bool causal,
                               const Allowed& allowed) {
  const Graph g = build_pattern(name, n, causal, params);
  ASSERT_EQ(g.n_nodes(), n);
  for (int64_t i = 0; i < n; ++i) {
    std::vector<int32_t> expected;
    for (int64_t j = 0; j < n; ++j) {
      if (allowed(i, j)) expected.push_back(static_cast<int32_t>(j));
    }
    ASSERT_EQ(source_ids(g, i), expected) << name << " n=" << n << (causal ? " causal" : " bidir") << " token " << i;
  }
}

int64_t floor_mod(int64_t a, int64_t m) { return ((a % m) + m) % m; }

}  // namespace

TEST(TokenPatterns, MatchTheirDefinitions) {
  for (int64_t n : {1, 2, 7, 33, 70}) {
    for (bool causal : {false, true}) {
      expect_matches_definition("dense", {}, n, causal, [&](int64_t i, int64_t j) { return !causal || j <= i; });
      for (int64_t w : {1, 2, 5, 8, 100}) {
        expect_matches_definition("window", {{"w", w}}, n, causal, [&](int64_t i, int64_t j) {
          return causal ? (j <= i && j > i - w) : (j >= i - (w - 1) / 2 && j <= i + w / 2);
        });
      }
      for (int64_t l : {1, 3, 8}) {
        expect_matches_definition("strided", {{"l", l}}, n, causal, [&](int64_t i, int64_t j) {
          if (causal) return j <= i && (j > i - l || (i - j) % l == 0);
          return std::abs(i - j) < l || floor_mod(i - j, l) == 0;
        });
        for (int64_t c : {int64_t{1}, l}) {
          expect_matches_definition("fixed", {{"l", l}, {"c", c}}, n, causal, [&](int64_t i, int64_t j) {
            const bool same_block = j / l == i / l, summary = j % l >= l - c;
            return (!causal || j <= i) && (same_block || summary);
          });
        }
      }
      for (int64_t w : {1, 4, 7}) {
        for (int64_t d : {1, 3}) {
          for (int64_t gl : {0, 2}) {
            expect_matches_definition("longformer", {{"w", w}, {"d", d}, {"g", gl}}, n, causal,
                                      [&](int64_t i, int64_t j) {
                                        if (causal && j > i) return false;
                                        if (i < gl || j < gl) return true;
                                        if ((j - i) % d != 0) return false;
                                        const int64_t m = (j - i) / d;
                                        return causal ? (m > -w && m <= 0) : std::abs(m) <= w / 2;
                                      });
          }
        }
      }
    }
  }
}

TEST(TokenPatterns, DegreeClosedForms) {
  const int64_t n = 1000;
  for (bool causal : {false, true}) {
    for (int64_t w : {1, 2, 7, 64}) {
      const Graph g = build_pattern("window", n, causal, {{"w", w}});
      for (int64_t i = 0; i < n; ++i) {
        const int64_t expected =
            causal ? std::min(i + 1, w) : std::min(i, (w - 1) / 2) + std::min(n - 1 - i, w / 2) + 1;
        ASSERT_EQ(g.row_ptr[i + 1] - g.row_ptr[i], expected) << "window w=" << w << " i=" << i;
      }
    }
    for (int64_t l : {1, 5, 32}) {
      const Graph g = build_pattern("strided", n, causal, {{"l", l}});
      for (int64_t i = 0; i < n; ++i) {
        const int64_t expected = causal ? std::min(i + 1, l) + i / l
                                        : std::min(i, l - 1) + std::min(n - 1 - i, l - 1) + 1 + i / l + (n - 1 - i) / l;
        ASSERT_EQ(g.row_ptr[i + 1] - g.row_ptr[i], expected) << "strided l=" << l << " i=" << i;
      }
    }
    for (const auto& [l, c] : std::vector<std::pair<int64_t, int64_t>>{{128, 8}, {7, 3}, {16, 16}, {9, 1}}) {
      const Graph g = build_pattern("fixed", n, causal, {{"l", l}, {"c", c}});
      const int64_t full = n / l, rem = n % l;
      const int64_t partial_summary = std::max<int64_t>(0, rem - (l - c));
      const int64_t summary_total = c * full + partial_summary;
      for (int64_t i = 0; i < n; ++i) {
        const bool own_full = i / l < full;
        const int64_t own_size = own_full ? l : rem;
        const int64_t expected = causal ? i % l + 1 + c * (i / l)
                                        : own_size + summary_total - (own_full ? c : partial_summary);
        ASSERT_EQ(g.row_ptr[i + 1] - g.row_ptr[i], expected) << "fixed l=" << l << " c=" << c << " i=" << i;
      }
    }
  }
}

TEST(TokenPatterns, DistanceRelationsAreClippedSignedDistances) {
  const Graph g = build_pattern("window", 200, false, {{"w", 101}});
  for (int64_t i = 0; i < 200; ++i) {
    for (const auto& [j, r] : sources_of(g, i)) {
      EXPECT_EQ(r, fmt::format("dist:{}", std::clamp<int64_t>(i - j, -kDistClip, kDistClip)));
    }
  }
}

TEST(Star, RelayAndRing) {
  const int64_t n = 10;
  const Graph g = build_pattern("star", n, false);
  ASSERT_EQ(g.n_nodes(), n + 1);
  const NodeInfo& relay = g.nodes[n];
  EXPECT_EQ(relay.kind, NodeKind::relay);
  EXPECT_EQ(relay.first, 0);
  EXPECT_EQ(relay.last, n - 1);
  for (int64_t i = 0; i < n; ++i) {
    std::vector<int32_t> expected;
    for (int64_t j = std::max<int64_t>(0, i - 1); j <= std::min(n - 1, i + 1); ++j) expected.push_back(j);
    expected.push_back(n);
    EXPECT_EQ(source_ids(g, i), expected) << i;
    EXPECT_EQ(sources_of(g, i).back().second, "relay");
  }
  std::vector<int32_t> all;
  for (int32_t j = 0; j <= n; ++j) all.push_back(j);
  EXPECT_EQ(source_ids(g, n), all);
  for (const auto& [j, r] : sources_of(g, n)) EXPECT_EQ(r, "relay");
  EXPECT_EQ(g.n_edges(), (3 * n - 2) + n + (n + 1));
}

TEST(Hierarchical, SentencesAndDocument) {
  // n = 10, s = 4: sentences [0,3], [4,7], [8,9] are nodes 10, 11, 12.
  const Graph g = build_pattern("hierarchical", 10, false, {{"s", 4}});
  ASSERT_EQ(g.n_nodes(), 13);
  EXPECT_EQ(g.nodes[12].kind, NodeKind::sentence);
  EXPECT_EQ(g.nodes[12].first, 8);
  EXPECT_EQ(g.nodes[12].last, 9);
  EXPECT_EQ(source_ids(g, 5), (std::vector<int32_t>{4, 5, 6, 7, 11}));
  EXPECT_EQ(sources_of(g, 5).back().second, "sentence");
  EXPECT_EQ(source_ids(g, 11), (std::vector<int32_t>{4, 5, 6, 7, 10, 11, 12}));
  EXPECT_EQ(sources_of(g, 11).front().second, "sentence");
  EXPECT_EQ(sources_of(g, 11).back().second, "document");

  const Graph c = build_pattern("hierarchical", 10, true, {{"s", 4}});
  EXPECT_EQ(source_ids(c, 5), (std::vector<int32_t>{4, 5, 10}));
  EXPECT_EQ(source_ids(c, 9), (std::vector<int32_t>{8, 9, 10, 11}));
  EXPECT_EQ(source_ids(c, 2), (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(source_ids(c, 11), (std::vector<int32_t>{4, 5, 6, 7, 10, 11}));
}

TEST(Longformer, GlobalTokensUseTheGlobalRelation) {
  const Graph g = build_pattern("longformer", 50, false, {{"w", 4}, {"d", 2}, {"g", 3}});
  for (int64_t i = 0; i < 50; ++i) {
    for (const auto& [j, r] : sources_of(g, i)) {
      if (i == j) {
        EXPECT_EQ(r, "dist:0");
      } else if (i < 3 || j < 3) {
        EXPECT_EQ(r, "global") << i << " <- " << j;
      } else {
        EXPECT_EQ(r, fmt::format("dist:{}", i - j));
      }
    }
  }
  // Global tokens receive from every token.
  EXPECT_EQ(g.row_ptr[1] - g.row_ptr[0], 50);
}

namespace {

// The set of key blocks of each query block of a bigbird graph (taken from its first token's row).
std::vector<std::set<int64_t>> block_sets(const Graph& g, int64_t b) {
  const int64_t n_blocks = (g.n_tokens + b - 1) / b;
  std::vector<std::set<int64_t>> sets(n_blocks);
  for (int64_t I = 0; I < n_blocks; ++I) {
    for (int32_t j : source_ids(g, I * b)) sets[I].insert(j / b);
  }
  return sets;
}

}  // namespace

TEST(Bigbird, BlockStructure) {
  const int64_t b = 4, r = 3, n = 203;  // 51 blocks, the last one partial
  const int64_t n_blocks = 51;
  for (bool causal : {false, true}) {
    const Graph g = build_pattern("bigbird", n, causal, {{"b", b}, {"r", r}, {"seed", 7}});
    const auto sets = block_sets(g, b);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t I = i / b;
      std::set<int64_t> blocks;
      int64_t random = 0;
      for (const auto& [j, rel] : sources_of(g, i)) {
        blocks.insert(j / b);
        random += rel == "random";
      }
      const bool global = I == 0 || (!causal && I == n_blocks - 1);
      if (global) {
        EXPECT_EQ(static_cast<int64_t>(source_ids(g, i).size()), causal ? i + 1 : n) << i;
        continue;
      }
      // Window and global blocks, then exactly min(r, pool) random interior blocks outside them.
      std::set<int64_t> window = {0, I - 1, I};
      if (!causal) window.insert({I + 1, n_blocks - 1});
      for (int64_t w : window) EXPECT_TRUE(blocks.count(w)) << i << " misses block " << w;
      int64_t pool = 0;
      for (int64_t c = 1; c < (causal ? I - 1 : n_blocks - 1); ++c) pool += window.count(c) == 0;
      EXPECT_EQ(blocks.size(), window.size() + std::min(r, pool)) << i;
      EXPECT_EQ(blocks, sets[I]) << "tokens of block " << I << " must share their key blocks";
      if (causal) {
        EXPECT_EQ(*blocks.rbegin(), I);
        EXPECT_EQ(source_ids(g, i).back(), i);
      }
      EXPECT_EQ(random > 0, std::min(r, pool) > 0) << i;
    }
  }
}

TEST(Bigbird, DeterministicForASeedAndDifferentAcrossSeeds) {
  const Params a = {{"b", 4}, {"r", 3}, {"seed", 1}};
  const Params b = {{"b", 4}, {"r", 3}, {"seed", 2}};
  for (bool causal : {false, true}) {
    const std::string fa = build_pattern("bigbird", 400, causal, a).fingerprint();
    EXPECT_EQ(fa, build_pattern("bigbird", 400, causal, a).fingerprint());
    EXPECT_NE(fa, build_pattern("bigbird", 400, causal, b).fingerprint());
    // Different seeds choose different random blocks for most query blocks.
    const auto sa = block_sets(build_pattern("bigbird", 400, causal, a), 4);
    const auto sb = block_sets(build_pattern("bigbird", 400, causal, b), 4);
    int differ = 0;
    for (size_t I = 0; I < sa.size(); ++I) differ += sa[I] != sb[I];
    EXPECT_GT(differ, 50);
  }
}
