// Sharded sweeps: --shard parsing (explicit and from Slurm's job-array variables), point costs, the balanced split.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include "common/error.h"
#include "harness/scenario/shard.h"
#include "tests/scenarios/error_of.h"

using namespace sb;
using sb::test::error_of;

namespace {

EnvFn env_of(std::map<std::string, std::string> vars) {
  return [vars](const std::string& name) {
    const auto it = vars.find(name);
    return it == vars.end() ? std::string() : it->second;
  };
}

Scenario train_scenario() {
  return scenario_from_json(json::parse(R"({"kind": "train", "name": "shards",
      "model": {"layers": 1, "dim": 16, "ffn": 32, "heads": 2}, "train": {"steps": 10, "data": "x.bin"},
      "axes": {"patterns": [{"name": "window", "w": [2, 8, 32]}, {"name": "bpt", "k": [1, 4]}, {"name": "star"}],
               "lengths": [32, 64, 128], "causal": true}})"),
                            "shards.json");
}

}  // namespace

TEST(Shard, ParsesExplicitShards) {
  const ShardSpec s = parse_shard("2/5");
  EXPECT_EQ(s.index, 2);
  EXPECT_EQ(s.count, 5);
  EXPECT_EQ(s.source, "--shard 2/5");
  EXPECT_EQ(error_of([] { parse_shard("5/5"); }), "--shard: the shard index must be in [0, 4] for 5 shards, got 5");
  EXPECT_EQ(error_of([] { parse_shard("0/0"); }), "--shard: the shard count must be in [1, 100000], got 0");
  EXPECT_EQ(error_of([] { parse_shard("-1/3"); }), "--shard: the shard index must be in [0, 2] for 3 shards, got -1");
  EXPECT_EQ(error_of([] { parse_shard("a/3"); }), "--shard: shard index: expected an integer, got 'a'");
  EXPECT_EQ(error_of([] { parse_shard("3"); }), "--shard: expected i/n (shard i of n, 0 <= i < n) or auto, got '3'");
}

TEST(Shard, AutoReadsSlurmArrayVariables) {
  const ShardSpec s = parse_shard(
      "auto", env_of({{"SLURM_ARRAY_TASK_ID", "7"}, {"SLURM_ARRAY_TASK_MIN", "5"}, {"SLURM_ARRAY_TASK_COUNT", "4"}}));
  EXPECT_EQ(s.index, 2);
  EXPECT_EQ(s.count, 4);
  EXPECT_NE(s.source.find("SLURM_ARRAY_TASK_ID=7"), std::string::npos) << s.source;
  const ShardSpec stepped = parse_shard("auto", env_of({{"SLURM_ARRAY_TASK_ID", "4"}, {"SLURM_ARRAY_TASK_MIN", "0"},
                                                        {"SLURM_ARRAY_TASK_COUNT", "3"}, {"SLURM_ARRAY_TASK_STEP", "2"}}));
  EXPECT_EQ(stepped.index, 2);
  EXPECT_EQ(stepped.count, 3);
  EXPECT_EQ(error_of([] { parse_shard("auto", env_of({})); }),
            "--shard auto: SLURM_ARRAY_TASK_ID is not set; run inside a Slurm job array (sbatch --array=0-3 ...) or "
            "give the shard as --shard i/n");
  EXPECT_EQ(error_of([] {
              parse_shard("auto", env_of({{"SLURM_ARRAY_TASK_ID", "3"}, {"SLURM_ARRAY_TASK_MIN", "0"}}));
            }),
            "--shard auto: SLURM_ARRAY_TASK_COUNT is not set; run inside a Slurm job array (sbatch --array=0-3 ...) "
            "or give the shard as --shard i/n");
  EXPECT_NE(error_of([] {
              parse_shard("auto", env_of({{"SLURM_ARRAY_TASK_ID", "9"}, {"SLURM_ARRAY_TASK_MIN", "0"},
                                          {"SLURM_ARRAY_TASK_COUNT", "4"}}));
            }).find("task 9 is not one of 4 tasks from 0"),
            std::string::npos);
  EXPECT_EQ(error_of([] {
              parse_shard("auto", env_of({{"SLURM_ARRAY_TASK_ID", "x"}, {"SLURM_ARRAY_TASK_MIN", "0"},
                                          {"SLURM_ARRAY_TASK_COUNT", "4"}}));
            }),
            "--shard: SLURM_ARRAY_TASK_ID: expected an integer, got 'x'");
}

TEST(Shard, CostGrowsWithWorkAndSkippedPointsCostNothing) {
  const Scenario s = train_scenario();
  const std::vector<Point> pts = expand_scenario(s);
  std::map<std::string, double> cost;
  for (const Point& p : pts) {
    cost[p.id] = point_cost(s, p);
    if (!p.skip_reason.empty()) EXPECT_EQ(cost[p.id], 0.0) << p.id;
    else EXPECT_GT(cost[p.id], 0.0) << p.id;
  }
  for (const Point& p : pts) {
    for (const Point& q : pts) {
      // Same pattern: a longer context, or more edges at the same context, costs more.
      if (p.skip_reason.empty() && q.skip_reason.empty() && p.pattern() == q.pattern() &&
          ((p.params() == q.params() && p.length() < q.length()) ||
           (p.length() == q.length() && p.stats.n_edges < q.stats.n_edges && p.stats.n_nodes == q.stats.n_nodes))) {
        EXPECT_LT(cost[p.id], cost[q.id]) << p.id << " vs " << q.id;
      }
    }
  }
  std::vector<Point> pts2 = expand_scenario(s);
  for (Point& p : pts2) p.config.steps = 20;
  EXPECT_DOUBLE_EQ(point_cost(s, pts2[0]), 2.0 * point_cost(s, pts[0]));
}

TEST(Shard, SplitCoversEveryPointOnceBalancedAndFixed) {
  const Scenario s = train_scenario();
  const std::vector<Point> pts = expand_scenario(s);
  for (int64_t n : {1, 2, 3, 5, 40}) {
    const std::vector<int64_t> of = assign_shards(s, pts, n);
    ASSERT_EQ(of.size(), pts.size());
    EXPECT_EQ(of, assign_shards(s, pts, n)) << "not deterministic";
    std::vector<double> load(static_cast<size_t>(n), 0.0);
    std::vector<int64_t> count(static_cast<size_t>(n), 0);
    double biggest = 0.0;
    for (size_t i = 0; i < pts.size(); ++i) {
      ASSERT_GE(of[i], 0);
      ASSERT_LT(of[i], n);
      load[of[i]] += point_cost(s, pts[i]);
      ++count[of[i]];
      biggest = std::max(biggest, point_cost(s, pts[i]));
    }
    // Greedy over costs sorted largest first: no shard exceeds another by more than one point's cost.
    const auto [lo, hi] = std::minmax_element(load.begin(), load.end());
    EXPECT_LE(*hi - *lo, biggest * (1 + 1e-12)) << n << " shards";
    if (n <= static_cast<int64_t>(pts.size())) {
      for (int64_t c : count) EXPECT_GT(c, 0) << n << " shards: an empty shard";
    }
  }
}
