// Invariants every registered pattern must keep (validate, causality, node table), hops, and bad input messages.
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/error.h"
#include "patterns/pattern.h"

using namespace sb;

namespace {

const std::vector<int64_t> kAwkwardN = {1, 2, 3, 7, 97, 256, 1025};

// Parameter sets tried for every pattern: the defaults, every parameter at its minimum, and every
// parameter at a small value (3, or its minimum when larger) that makes blocks, strides and windows
// smaller than n.
std::vector<Params> param_sets(const AttentionPattern& p) {
  Params mins, small;
  for (const ParamSpec& s : p.params()) {
    mins[s.name] = s.min_value;
    small[s.name] = std::max<int64_t>(s.min_value, std::min<int64_t>(3, s.max_value));
  }
  return {Params{}, mins, small};
}

std::string describe(const std::string& name, const Params& params, int64_t n, bool causal) {
  std::vector<std::string> ps;
  for (const auto& [k, v] : params) ps.push_back(fmt::format("{}={}", k, v));
  return fmt::format("{}({}) n={} {}", name, fmt::join(ps, ","), n, causal ? "causal" : "bidir");
}

}  // namespace

TEST(EveryPattern, ValidatesAndKeepsCausality) {
  ASSERT_GE(all_patterns().size(), 10u);
  for (const auto& p : all_patterns()) {
    for (const Params& params : param_sets(*p)) {
      for (int64_t n : kAwkwardN) {
        for (bool causal : {false, true}) {
          if (causal && !p->supports_causal()) continue;
          const std::string what = describe(p->name(), params, n, causal);
          const Graph g = build_pattern(p->name(), n, causal, params);
          ASSERT_NO_THROW(g.validate()) << what;
          EXPECT_EQ(g.n_tokens, n) << what;
          EXPECT_EQ(g.causal, causal) << what;
          for (int64_t u = 0; u < g.n_nodes(); ++u) {
            const NodeInfo& nd = g.nodes[u];
            if (u >= n) {
              EXPECT_NE(nd.kind, NodeKind::token) << what << " node " << u;
              EXPECT_GE(nd.level, 1) << what << " node " << u;
            }
            EXPECT_LE(nd.first, nd.last) << what << " node " << u;
          }
          if (!causal) continue;
          // Independent of validate(): no token receives from a node reaching past it.
          for (int64_t i = 0; i < n; ++i) {
            for (int64_t e = g.row_ptr[i]; e < g.row_ptr[i + 1]; ++e) {
              ASSERT_LE(g.nodes[g.col[e]].last, i) << what << ": token " << i << " receives from " << g.col[e];
            }
          }
        }
      }
    }
  }
}

TEST(EveryPattern, FingerprintIsStableAndSensitive) {
  for (const auto& p : all_patterns()) {
    const Graph a = build_pattern(p->name(), 97, false);
    const Graph b = build_pattern(p->name(), 97, false);
    EXPECT_EQ(a.fingerprint(), b.fingerprint()) << p->name();
    EXPECT_NE(a.fingerprint(), build_pattern(p->name(), 98, false).fingerprint()) << p->name();
  }
}

TEST(Hops, TreePatternsAndStarReachEveryTokenInTwoHops) {
  for (const std::string name : {"bpt", "segtree", "star"}) {
    for (int64_t n : {2, 3, 7, 97, 256, 300}) {
      std::vector<Params> sets = {Params{}};
      if (name == "bpt") sets = {{{"k", 1}}, {{"k", 2}}, {{"k", 4}}};
      for (const Params& params : sets) {
        const GraphStats s = build_pattern(name, n, false, params).stats();
        EXPECT_GE(s.max_hops, 1) << describe(name, params, n, false);
        EXPECT_LE(s.max_hops, 2) << describe(name, params, n, false);
      }
    }
  }
  // A window graph needs more hops than that, so the bound above is not vacuous.
  EXPECT_GT(build_pattern("window", 97, false, {{"w", 3}}).stats().max_hops, 2);
}

// Runs `f`, which must throw sb::Error, and returns the message.
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected sb::Error";
  return "";
}

// The degree statistics: token in-degrees over token rows only, node_in_degree_max over every row, so a span
// node over a whole sequence (what decides the slowest kernel row) is not hidden by the token figures.
TEST(Stats, DegreesCoverTokensAndEveryNode) {
  for (const std::string& name : pattern_names()) {
    const AttentionPattern& pattern = find_pattern(name);
    for (bool causal : {false, true}) {
      if (causal && !pattern.supports_causal()) continue;
      const Graph g = build_pattern(name, 97, causal);
      const GraphStats s = g.stats(0);
      int64_t token_max = 0, node_max = 0, token_sum = 0;
      for (int64_t i = 0; i < g.n_nodes(); ++i) {
        const int64_t d = g.row_ptr[i + 1] - g.row_ptr[i];
        node_max = std::max(node_max, d);
        if (i < g.n_tokens) token_max = std::max(token_max, d), token_sum += d;
      }
      EXPECT_EQ(s.token_in_degree_max, token_max) << name;
      EXPECT_DOUBLE_EQ(s.token_in_degree_mean, static_cast<double>(token_sum) / 97.0) << name;
      EXPECT_EQ(s.node_in_degree_max, node_max) << name;
    }
  }
  // Causal bpt: the top span node attends to every token of its span, far above any token's in-degree.
  const GraphStats bpt = build_pattern("bpt", 1024, true, {{"k", 4}}).stats(0);
  EXPECT_LE(bpt.token_in_degree_max, 64);
  EXPECT_GE(bpt.node_in_degree_max, 512);
}

TEST(BadInput, UnknownPatternListsEveryValidName) {
  const std::string msg = error_of([] { build_pattern("bptx", 8, false); });
  EXPECT_NE(msg.find("unknown pattern 'bptx'"), std::string::npos) << msg;
  for (const std::string& name : pattern_names()) EXPECT_NE(msg.find(name), std::string::npos) << name << ": " << msg;
}

TEST(BadInput, ParameterOutOfRangeNamesParameterAndRange) {
  EXPECT_EQ(error_of([] { build_pattern("bpt", 8, false, {{"k", 0}}); }),
            "pattern bpt: parameter k must be in [1, 1073741824], got 0");
  EXPECT_EQ(error_of([] { build_pattern("window", 8, false, {{"w", -2}}); }),
            "pattern window: parameter w must be in [1, 1073741824], got -2");
  const std::string unknown = error_of([] { build_pattern("bpt", 8, false, {{"q", 1}}); });
  EXPECT_EQ(unknown, "pattern bpt: unknown parameter 'q'; its parameters: k, clip");
}

TEST(BadInput, DependentParametersNameBoth) {
  const std::string msg = error_of([] { build_pattern("fixed", 64, false, {{"l", 8}, {"c", 9}}); });
  EXPECT_EQ(msg, "pattern fixed: parameter c must be <= parameter l, got c=9 and l=8");
  EXPECT_NO_THROW(build_pattern("fixed", 64, false, {{"l", 8}, {"c", 8}}));
}

TEST(BadInput, NonPositiveNIsRejected) {
  for (const std::string& name : pattern_names()) {
    EXPECT_EQ(error_of([&] { build_pattern(name, 0, false); }), fmt::format("pattern {}: n must be >= 1, got 0", name));
  }
  EXPECT_EQ(error_of([] { build_pattern("dense", -5, true); }), "pattern dense: n must be >= 1, got -5");
}

TEST(BadInput, CausalStarIsRejected) {
  EXPECT_EQ(error_of([] { build_pattern("star", 16, true); }),
            "pattern star has no causal form; drop --causal or pick another pattern");
}

TEST(BadInput, TooManyEdgesIsRejectedBeforeAllocating) {
  // dense at n = 2^16 bidirectional would need 2^32 edges, over the 32-bit edge index.
  const std::string msg = error_of([] { build_pattern("dense", 1 << 16, false); });
  EXPECT_NE(msg.find("exceed the limit"), std::string::npos) << msg;
}
