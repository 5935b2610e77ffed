// Sharded sweeps: a scenario's points split into n fixed, cost-balanced subsets (`run --shard i/n`, Slurm arrays).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "harness/scenario/scenario.h"

namespace sb {

struct ShardSpec {
  int64_t index = 0;  // 0-based
  int64_t count = 1;
  std::string source;  // "--shard 1/4" or "Slurm job array (SLURM_ARRAY_TASK_ID=...)", for messages and run.json
};

// Reads an environment variable ("" when unset); tests pass their own.
using EnvFn = std::function<std::string(const std::string&)>;
std::string process_env(const std::string& name);

// "i/n" (0 <= i < n <= 100000) or "auto" (Slurm's SLURM_ARRAY_TASK_ID, SLURM_ARRAY_TASK_COUNT,
// SLURM_ARRAY_TASK_MIN and SLURM_ARRAY_TASK_STEP); throws sb::Error naming --shard and what is wrong or absent.
ShardSpec parse_shard(const std::string& text, const EnvFn& env = process_env);

// Estimated cost of a point in FLOPs: the analytic count of one measured pass (attention: the op; model and train:
// projections, feed-forward, attention over the graph's edges and the output layer) times the passes it runs
// (warm-up + repeats, or training steps). Skipped points cost 0.
double point_cost(const Scenario& s, const Point& p);

// The shard (0..count-1) of every point: the costliest first, each to the least loaded shard (ties: lowest shard),
// points of cost 0 round-robin by index. Depends only on the points, so every shard computes the same split.
std::vector<int64_t> assign_shards(const Scenario& s, const std::vector<Point>& points, int64_t count);

// CPUs this process may use: its affinity mask (a Slurm allocation or taskset) capped by a cgroup CPU quota
// (sb::cpu_allowance), at least 1.
int64_t available_cpus();

}  // namespace sb
