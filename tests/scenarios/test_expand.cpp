// Axis expansion, equal-degree solving, analytic memory and skip decisions of scenarios.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <set>

#include "harness/scenario/scenario.h"
#include "harness/scenario/sweep.h"
#include "common/error.h"

using namespace sb;

namespace {

Scenario make(const std::string& text) { return scenario_from_json(json::parse(text), "t.json"); }

double degree(const std::string& pattern, int64_t n, bool causal, const Params& p) {
  return build_pattern(pattern, n, causal, p).stats(0).token_in_degree_mean;
}

}  // namespace

TEST(Expand, CountsTheProductOfAxes) {
  const Scenario s = make(R"({"kind": "attention", "axes": {
      "patterns": [{"name": "window", "w": [4, 8]}, {"name": "dense"}, {"name": "dense", "attention": "dense"}],
      "lengths": [16, 32], "causal": [false, true], "modes": ["forward", "forward_backward"],
      "tokens": 64, "threads": [1, 2]}})");
  const std::vector<Point> pts = expand_scenario(s);
  ASSERT_EQ(pts.size(), 4u * 2 * 2 * 2 * 2);
  std::set<std::string> ids;
  for (const Point& p : pts) {
    ids.insert(p.id);
    EXPECT_EQ(p.batch(), 64 / p.length());
    EXPECT_TRUE(p.skip_reason.empty()) << p.skip_reason;
    EXPECT_EQ(p.stats.n_tokens, p.length());
    EXPECT_GT(p.analytic_bytes, 0);
    EXPECT_EQ(p.index, static_cast<int64_t>(&p - pts.data()));
  }
  EXPECT_EQ(ids.size(), pts.size());
  // Graph-defining axes are outermost: the first points share the first window graph.
  EXPECT_EQ(pts[0].params().at("w"), 4);
  EXPECT_EQ(pts[0].length(), 16);
  EXPECT_EQ(pts[1].mode, "forward_backward");
  EXPECT_EQ(pts[0].label, "window(w=4)");
  EXPECT_EQ(pts.back().label, "dense [dense op]");
  EXPECT_EQ(pts.back().fingerprint, "");  // the dense op builds no graph
  EXPECT_EQ(pts[0].fingerprint, build_pattern("window", 16, false, {{"w", 4}}).fingerprint());
}

// The two dense baselines: labelled apart; the naive one is estimated with its T x T scores, the fused one (SDPA
// on LibTorch >= 2) without them.
TEST(Expand, DenseBaselinesAreTwoSeries) {
  const Scenario s = make(R"({"kind": "attention", "axes": {
      "patterns": [{"name": "dense", "attention": "dense"}, {"name": "dense", "attention": "dense_naive"}],
      "lengths": [1024], "causal": true, "modes": "forward", "batch": 1}})");
  const std::vector<Point> pts = expand_scenario(s);
  ASSERT_EQ(pts.size(), 2u);
  EXPECT_EQ(pts[0].label, "dense [dense op]");
  EXPECT_EQ(pts[1].label, "dense [dense naive]");
  EXPECT_EQ(pts[1].attention(), "dense_naive");
  EXPECT_EQ(pts[1].stats.n_tokens, 1024);
  // forward: q, k, v, o of 1024 x 8 x 64 floats, plus 2 x 1024^2 floats per head when scores are materialised
  const int64_t io = 4 * 4 * 1024 * 8 * 64, scores = 4 * 8 * 2 * 1024 * 1024;
  EXPECT_EQ(pts[1].analytic_bytes, io + scores);
#ifdef SB_DENSE_FUSED
  EXPECT_EQ(pts[0].analytic_bytes, io + 4 * 8 * 1024);
#else
  EXPECT_EQ(pts[0].analytic_bytes, io + scores);
#endif
}

// Seeds are the outermost axis: every configuration once per seed, its config_id shared, its config seeded.
TEST(Expand, SeedsAxisRepeatsEveryConfigurationPerSeed) {
  const Scenario s = make(R"({"kind": "train", "axes": {"patterns": [{"name": "bpt", "k": 2},
      {"name": "window", "w": [4, 8]}], "lengths": [64], "seeds": [7, 3]}})");
  const std::vector<Point> pts = expand_scenario(s);
  ASSERT_EQ(pts.size(), 6u);
  std::set<std::string> ids, configs;
  for (size_t i = 0; i < pts.size(); ++i) {
    const Point& p = pts[i];
    EXPECT_EQ(p.seed(), i < 3 ? 7 : 3);
    EXPECT_EQ(p.config.seed, p.seed());
    EXPECT_EQ(p.id, p.config_id + "/seed=" + std::to_string(p.seed()));
    EXPECT_EQ(p.index, static_cast<int64_t>(i));
    EXPECT_EQ(p.config_id, pts[i % 3].config_id);
    EXPECT_EQ(p.label, pts[i % 3].label);
    ids.insert(p.id);
    configs.insert(p.config_id);
  }
  EXPECT_EQ(ids.size(), 6u);
  EXPECT_EQ(configs.size(), 3u);
  const json r = point_to_json(s, pts[4]);
  EXPECT_EQ(r["seed"], 3);
  EXPECT_EQ(r["config_id"], pts[1].config_id);
  // Without the axis: ids unchanged (earlier runs still resume), the scenario's seed recorded.
  const auto plain = expand_scenario(make(R"({"kind": "train", "seed": 9, "axes": {"patterns": [{"name": "bpt"}],
      "lengths": [64]}})"));
  ASSERT_EQ(plain.size(), 1u);
  EXPECT_EQ(plain[0].id, plain[0].config_id);
  EXPECT_EQ(plain[0].id.find("seed"), std::string::npos);
  EXPECT_EQ(plain[0].seed(), 9);
  EXPECT_EQ(plain[0].config.seed, 9);
}

// The dtypes axis: innermost, named in ids and labels only when given, into each train point's config, and into
// the analytic memory (half-size activations; on the CPU plus float32 staging copies of the op's tensors).
TEST(Expand, DtypesAxisSetsPrecisionPerPoint) {
  const Scenario s = make(R"({"kind": "attention", "device": "cpu", "attention": {"heads": 2, "head_dim": 8},
      "axes": {"patterns": [{"name": "star"}], "lengths": [50], "batch": 3, "dtypes": ["float32", "bfloat16"]}})");
  const auto pts = expand_scenario(s);
  ASSERT_EQ(pts.size(), 2u);
  EXPECT_EQ(pts[0].dtype(), "float32");
  EXPECT_EQ(pts[1].dtype(), "bfloat16");
  EXPECT_EQ(pts[0].label, "star [float32]");
  EXPECT_EQ(pts[1].label, "star [bfloat16]");
  EXPECT_EQ(pts[1].id, pts[0].id.substr(0, pts[0].id.size() - 7) + "bfloat16");
  EXPECT_EQ(point_to_json(s, pts[1])["dtype"], "bfloat16");
  const Graph g = build_pattern("star", 50, false);
  const int64_t io = 3 * g.n_nodes() * 2 * 8, lse = 3 * 2 * g.n_nodes();
  EXPECT_EQ(pts[0].analytic_bytes, g.bytes() + 4 * 4 * io + 4 * lse);
  EXPECT_EQ(pts[1].analytic_bytes, g.bytes() + 4 * (2 + 4) * io + 4 * lse);  // staged on the CPU

  const auto train = expand_scenario(make(R"({"kind": "train", "axes": {"patterns": [{"name": "bpt", "k": 2}],
      "lengths": [64], "dtypes": ["bfloat16", "float16"]}})"));
  ASSERT_EQ(train.size(), 2u);
  EXPECT_EQ(train[0].config.dtype, "bfloat16");
  EXPECT_EQ(train[1].config.dtype, "float16");
  // Without the axis: the trainer's dtype, ids and labels as before.
  const auto plain = expand_scenario(make(R"({"kind": "train", "train": {"dtype": "bfloat16"},
      "axes": {"patterns": [{"name": "bpt", "k": 2}], "lengths": [64]}})"));
  ASSERT_EQ(plain.size(), 1u);
  EXPECT_EQ(plain[0].dtype(), "bfloat16");
  EXPECT_EQ(plain[0].config.dtype, "bfloat16");
  EXPECT_EQ(plain[0].id.find("dtype"), std::string::npos);
  EXPECT_EQ(plain[0].label, "bpt(k=2)");
}

TEST(Expand, BatchIsAtLeastOne) {
  const Scenario s = make(R"({"kind": "attention", "axes": {"patterns": [{"name": "dense"}],
      "lengths": [8, 100], "tokens": 64}})");
  const auto pts = expand_scenario(s);
  EXPECT_EQ(pts[0].batch(), 8);
  EXPECT_EQ(pts[1].batch(), 1);
}

// Training points: the default batch (8), /train/batch, or tokens per step over the context.
TEST(Expand, TrainBatchSizing) {
  const char* axes = R"("axes": {"patterns": [{"name": "window", "w": 8}], "lengths": [64, 256])";
  auto batches = [&](const std::string& extra_axes, const std::string& train) {
    const auto pts = expand_scenario(make(R"({"kind": "train", )" + std::string(axes) + extra_axes + "}" + train + "}"));
    std::vector<int64_t> out;
    for (const Point& p : pts) out.push_back(p.batch());
    return out;
  };
  EXPECT_EQ(batches("", ""), (std::vector<int64_t>{8, 8}));
  EXPECT_EQ(batches("", R"(, "train": {"batch": 3})"), (std::vector<int64_t>{3, 3}));
  EXPECT_EQ(batches(R"(, "tokens": 1024)", ""), (std::vector<int64_t>{16, 4}));
}

TEST(Expand, DenseOpStatsMatchTheDensePattern) {
  for (bool causal : {false, true}) {
    const GraphStats a = dense_op_stats(37, causal);
    const GraphStats b = build_pattern("dense", 37, causal).stats(0);
    EXPECT_EQ(a.n_edges, b.n_edges);
    EXPECT_DOUBLE_EQ(a.token_in_degree_mean, b.token_in_degree_mean);
    EXPECT_EQ(a.token_in_degree_min, b.token_in_degree_min);
    EXPECT_EQ(a.token_in_degree_max, b.token_in_degree_max);
  }
}

// The solver's answer is the closest achievable degree, checked against every value by brute force.
TEST(EqualDegree, WindowMatchesBruteForce) {
  for (bool causal : {false, true}) {
    for (double target : {1.0, 7.5, 24.0, 100.0, 1000.0}) {
      const DegreeSolution sol = solve_degree("window", 200, causal, {}, "w", target);
      double best = 1e18;
      for (int64_t w = 1; w <= 200; ++w) best = std::min(best, std::abs(degree("window", 200, causal, {{"w", w}}) - target));
      EXPECT_NEAR(std::abs(sol.achieved - target), best, 1e-9) << "target " << target << " causal " << causal;
      EXPECT_DOUBLE_EQ(sol.achieved, degree("window", 200, causal, {{"w", sol.value}}));
      EXPECT_LE(sol.builds, 2 + 9);  // binary search over [1, 200]
    }
  }
}

// Strided's degree is about l + n/2l: a valley between two high ends. A target below both ends was answered with an
// end (l = 1, degree 32.5 for a target of 8 at n = 64) before the solver looked for the valley.
TEST(EqualDegree, StridedValleyMatchesBruteForce) {
  for (int64_t n : {64, 512}) {
    for (bool causal : {false, true}) {
      std::vector<double> curve;
      for (int64_t l = 1; l <= n; ++l) curve.push_back(degree("strided", n, causal, {{"l", l}}));
      for (double target : {1.0, 8.0, 12.0, 20.0, 48.0, 100.0, 10000.0}) {
        const DegreeSolution sol = solve_degree("strided", n, causal, {}, "l", target);
        double best = 1e18;
        for (const double f : curve) best = std::min(best, std::abs(f - target));
        EXPECT_NEAR(std::abs(sol.achieved - target), best, 1e-9) << "n " << n << " target " << target << " causal " << causal;
        EXPECT_DOUBLE_EQ(sol.achieved, degree("strided", n, causal, {{"l", sol.value}}));
        EXPECT_LE(sol.builds, 60) << "n " << n << " target " << target;
      }
    }
  }
}

TEST(EqualDegree, BptMatchesBruteForceAtPaperLength) {
  for (double target : {9.0, 23.7, 60.0}) {
    const DegreeSolution sol = solve_degree("bpt", 511, true, {}, "k", target);
    double best = 1e18;
    int64_t best_k = 0;
    for (int64_t k = 1; k <= 128; ++k) {
      const double d = std::abs(degree("bpt", 511, true, {{"k", k}}) - target);
      if (d < best) best = d, best_k = k;
    }
    EXPECT_NEAR(std::abs(sol.achieved - target), best, 1e-9) << target;
    EXPECT_EQ(sol.value, best_k) << target;
    EXPECT_LE(sol.builds, 2 + 10);
  }
}

TEST(EqualDegree, ExpansionRecordsTargetAndSolvedParameter) {
  const Scenario s = make(R"({"kind": "attention", "axes": {"patterns": [{"name": "window", "degree": [5, 9]}],
      "lengths": [64], "causal": true}})");
  const auto pts = expand_scenario(s);
  ASSERT_EQ(pts.size(), 2u);
  EXPECT_EQ(*pts[0].degree_target, 5.0);
  EXPECT_EQ(pts[0].solved_param, "w");
  // Causal window of w at n=64: mean degree w - w(w-1)/(2*64); 9 is nearer w=10 (9.30) than w=9 (8.44).
  EXPECT_EQ(pts[0].params().at("w"), 5);
  EXPECT_EQ(pts[1].params().at("w"), 10);
  EXPECT_NEAR(pts[0].stats.token_in_degree_mean, degree("window", 64, true, {{"w", 5}}), 1e-12);
  const json r = point_to_json(s, pts[0]);
  EXPECT_EQ(r["degree_target"], 5.0);
  EXPECT_EQ(r["solved_param"], "w");
  EXPECT_EQ(r["params"]["w"], 5);
}

TEST(Skips, OverBudgetPointsAreSkippedWithReason) {
  const std::string text = R"({"kind": "attention", "memory_budget_mb": 1, "attention": {"heads": 2, "head_dim": 16},
      "axes": {"patterns": [{"name": "dense", "attention": "dense"}], "lengths": [64, 1024]}})";
  const auto pts = expand_scenario(make(text));
  ASSERT_EQ(pts.size(), 2u);
  // 64 tokens: 4 * (4*64*2*16 + 2*2*64*64) bytes = 96 KiB; 1024 tokens: 16.5 MiB.
  EXPECT_EQ(pts[0].analytic_bytes, 4 * (4 * 64 * 2 * 16 + 2 * 2 * 64 * 64));
  EXPECT_TRUE(pts[0].skip_reason.empty());
  EXPECT_EQ(pts[1].skip_reason.rfind("analytic memory 16.5 MiB exceeds the budget 1.0 MiB", 0), 0u) << pts[1].skip_reason;
}

TEST(Skips, AnalyticMemoryOfGraphPointsCountsGraphAndNodes) {
  const Scenario s = make(R"({"kind": "attention", "attention": {"heads": 2, "head_dim": 8},
      "axes": {"patterns": [{"name": "star"}], "lengths": [50], "batch": 3, "modes": ["forward", "forward_backward"]}})");
  const auto pts = expand_scenario(s);
  const Graph g = build_pattern("star", 50, false);
  const int64_t nodes = g.n_nodes();
  const int64_t fwd = g.bytes() + 4 * (4 * 3 * nodes * 2 * 8 + 3 * 2 * nodes);
  EXPECT_EQ(pts[0].analytic_bytes, fwd);
  EXPECT_EQ(pts[1].analytic_bytes, g.bytes() + 2 * (fwd - g.bytes()));
}

TEST(Skips, UnsupportedCausalAndMaxLength) {
  const auto pts = expand_scenario(make(R"({"kind": "attention", "axes": {
      "patterns": [{"name": "star"}, {"name": "dense", "max_length": 32}], "lengths": [16, 64], "causal": [true]}})"));
  ASSERT_EQ(pts.size(), 4u);
  EXPECT_EQ(pts[0].skip_reason, "pattern star does not support causal attention");
  EXPECT_TRUE(pts[2].skip_reason.empty());
  EXPECT_EQ(pts[3].skip_reason, "length 64 > max_length 32 of this pattern entry");
}

TEST(Skips, BuildErrorsBecomeFailedPointsNotAbortedSweeps) {
  // fixed requires c <= l: l=4, c=8 cannot be built, but the other points still expand.
  const auto pts = expand_scenario(make(R"({"kind": "attention", "axes": {
      "patterns": [{"name": "fixed", "l": [4, 16], "c": 8}], "lengths": [32]}})"));
  ASSERT_EQ(pts.size(), 2u);
  EXPECT_EQ(pts[0].skip_reason.rfind("error: ", 0), 0u) << pts[0].skip_reason;
  EXPECT_TRUE(pts[1].skip_reason.empty()) << pts[1].skip_reason;
}

TEST(Expand, ModelAnalyticMemoryGrowsWithBackward) {
  const Scenario s = make(R"({"kind": "model", "model": {"layers": 2, "dim": 64, "ffn": 128, "heads": 4},
      "axes": {"patterns": [{"name": "bpt", "k": 2}], "lengths": [128], "tokens": 512,
      "modes": ["forward", "forward_backward"]}})");
  const auto pts = expand_scenario(s);
  EXPECT_GT(pts[1].analytic_bytes, pts[0].analytic_bytes);
  EXPECT_EQ(pts[0].batch(), 4);
}

// Threads of a point under --jobs: its own axis value, else an equal share of the CPUs, split between the ranks of
// a data-parallel training point (so `nproc` x `--jobs` never asks for more threads than there are CPUs).
TEST(Expand, PointThreadsShareTheCpusBetweenJobsAndRanks) {
  auto pts = expand_scenario(make(R"({"kind": "train", "train": {"nproc": 2}, "axes": {"patterns": [{"name": "bpt"}],
      "lengths": [64], "threads": [0, 3]}})"));
  ASSERT_EQ(pts.size(), 2u);
  EXPECT_EQ(pts[0].config.nproc, 2);
  EXPECT_EQ(point_threads(pts[0], 2, 8), 2);  // 8 CPUs, 2 jobs, 2 ranks each
  EXPECT_EQ(point_threads(pts[0], 2, 2), 1);  // never below one
  EXPECT_EQ(point_threads(pts[1], 2, 8), 3);  // the threads axis wins
  pts[0].config.nproc = 1;
  EXPECT_EQ(point_threads(pts[0], 2, 8), 4);
}

TEST(PointCap, CountFromAxisSizesMatchesExpansion) {
  const Scenario s = make(R"({"kind": "attention", "axes": {
      "patterns": [{"name": "longformer", "w": [4, 8], "degree": [3, 5]}, {"name": "dense"}],
      "lengths": [16, 32], "causal": [false, true], "modes": ["forward", "forward_backward"],
      "batch": [1, 2], "threads": [1, 2, 3], "dtypes": ["float32", "float64"]}})");
  const PointCount c = count_points(s);
  EXPECT_EQ(c.total, expand_scenario(s).size());
  EXPECT_EQ(c.total, 5u * 2 * 2 * 2 * 2 * 3 * 2);
  EXPECT_NE(c.detail.find("pattern variants 5 (/axes/patterns/0: degree 2 x w 2)"), std::string::npos) << c.detail;
  EXPECT_NE(c.detail.find("threads 3 (/axes/threads)"), std::string::npos) << c.detail;
}

TEST(PointCap, LargeProductsAreRefusedBeforeExpanding) {
  json doc = json::parse(R"({"kind": "attention", "axes": {"patterns": [{"name": "longformer"}], "lengths": [16]}})");
  for (int64_t v = 1; v <= 1000; ++v) {
    doc["axes"]["patterns"][0]["w"].push_back(v);
    doc["axes"]["patterns"][0]["d"].push_back(v);
    doc["axes"]["patterns"][0]["g"].push_back(v);
  }
  doc["axes"]["patterns"][0]["g"].push_back(0);
  const Scenario s = scenario_from_json(doc, "big.json");
  EXPECT_EQ(count_points(s).total, 1001000000u);
  std::string msg;
  try {
    expand_scenario(s);
  } catch (const Error& e) {
    msg = e.what();
  }
  EXPECT_EQ(msg.rfind("big.json: the axes make 1001000000 points (1001000000 = pattern variants 1001000000 "
                      "(/axes/patterns/0: d 1000 x g 1001 x w 1000)), more than /max_points 100000",
                      0),
            0u)
      << msg;
  // The cap is the scenario's: a small one refuses a small product.
  const Scenario four = make(R"({"kind": "attention", "max_points": 3, "axes": {
      "patterns": [{"name": "window", "w": 4}], "lengths": [16, 32], "threads": [1, 2]}})");
  EXPECT_THROW(expand_scenario(four), Error);
  // Saturated rather than wrapped around: 70000^4 points.
  json huge = json::parse(R"({"kind": "attention", "axes": {"patterns": [{"name": "longformer"}]}})");
  json many = json::array();
  for (int64_t v = 1; v <= 70000; ++v) many.push_back(v);
  for (const char* p : {"w", "d", "g"}) huge["axes"]["patterns"][0][p] = many;
  huge["axes"]["lengths"] = many;
  const Scenario h = scenario_from_json(huge, "h.json");
  EXPECT_EQ(count_points(h).total, std::numeric_limits<uint64_t>::max());
  try {
    expand_scenario(h);
    ADD_FAILURE() << "not refused";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("h.json: the axes make more than 2^64 points", 0), 0u) << e.what();
  }
}

TEST(PointCap, RepeatedAxisValuesAreRefusedWithBothPointers) {
  auto error_of = [](const std::string& text) {
    try {
      expand_scenario(make(text));
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(error_of(R"({"kind": "attention", "axes": {"patterns": [{"name": "window"}], "lengths": [16, 32, 16]}})"),
            "t.json: /axes/lengths/2: 16 repeats /axes/lengths/0 (16); each value of an axis once, or every point with "
            "it would run twice");
  EXPECT_NE(error_of(R"({"kind": "attention", "axes": {"patterns": [{"name": "window", "w": [4, 8, 4]}],
                         "lengths": [16]}})").find("/axes/patterns/0/w/2: 4 repeats /axes/patterns/0/w/0"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"kind": "attention", "axes": {"patterns": [{"name": "window", "degree": [2, 2.0]}],
                         "lengths": [16]}})").find("/axes/patterns/0/degree/1: 2.0 repeats /axes/patterns/0/degree/0"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"kind": "attention", "axes": {"patterns": [{"name": "window"}], "lengths": [16],
                         "causal": [true, true]}})").find("/axes/causal/1"),
            std::string::npos);
  // Two entries making the very same point.
  EXPECT_EQ(error_of(R"({"kind": "attention", "axes": {"patterns": [{"name": "window", "w": 4},
                         {"name": "dense"}, {"name": "window", "w": 4, "label": "again"}], "lengths": [16]}})"),
            "t.json: /axes/patterns/0 and /axes/patterns/2 make the same point window/graph/w=4/n=16/batch=1/"
            "causal=0/threads=0/mode=forward; give each configuration once (a label or max_length does not make "
            "another point)");
}

TEST(PointCap, OneIdForTwoConfigurationsKeepsItsSuffix) {
  // A degree solved for two different parameters: two points under one id, told apart as before.
  const Scenario s = make(R"({"kind": "attention", "axes": {"patterns": [
      {"name": "longformer", "degree": 8, "solve": "w"}, {"name": "longformer", "degree": 8, "solve": "d"}],
      "lengths": [64]}})");
  const std::vector<Point> pts = expand_scenario(s);
  ASSERT_EQ(pts.size(), 2u);
  EXPECT_EQ(pts[1].id, pts[0].id + "#2");
}

TEST(PointCap, HundredThousandPointsExpandInLinearTime) {
  // Every point distinct, each graph built once per (w, length): the old quadratic id check made this minutes.
  json doc = json::parse(R"({"kind": "attention", "axes": {"patterns": [{"name": "window", "w": [2, 4]}],
      "lengths": [16, 32, 64, 128, 256]}})");
  for (int64_t t = 1; t <= 1000; ++t) doc["axes"]["threads"].push_back(t % 1025);
  doc["axes"]["batch"] = json::array();
  for (int64_t b = 1; b <= 10; ++b) doc["axes"]["batch"].push_back(b);
  const Scenario s = scenario_from_json(doc, "lakh.json");
  ASSERT_EQ(count_points(s).total, 100000u);
  const std::vector<Point> pts = expand_scenario(s);
  EXPECT_EQ(pts.size(), 100000u);
}
