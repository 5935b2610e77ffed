// Sharded sweeps: --shard parsing (explicit or from Slurm's job-array variables), point costs, the balanced split.
#include "harness/scenario/shard.h"

#include "harness/measure/contention.h"

#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <numeric>
#include <thread>

#include <fmt/format.h>

#include "common/error.h"
#include "common/text.h"

namespace sb {

namespace {

constexpr int64_t kMaxShards = 100000;

int64_t shard_int(const std::string& value, const std::string& what) {
  const auto v = parse_int64(value);
  if (!v) throw Error(fmt::format("--shard: {}: expected an integer, got '{}'", what, value.substr(0, 60)));
  return *v;
}

ShardSpec shard_from_slurm(const EnvFn& env) {
  auto need = [&](const char* name) {
    const std::string v = env(name);
    if (v.empty()) {
      throw Error(fmt::format("--shard auto: {} is not set; run inside a Slurm job array (sbatch --array=0-3 ...) "
                              "or give the shard as --shard i/n",
                              name));
    }
    return shard_int(v, name);
  };
  const int64_t id = need("SLURM_ARRAY_TASK_ID");
  const int64_t count = need("SLURM_ARRAY_TASK_COUNT");
  const int64_t min = need("SLURM_ARRAY_TASK_MIN");
  const std::string step_text = env("SLURM_ARRAY_TASK_STEP");
  const int64_t step = step_text.empty() ? 1 : shard_int(step_text, "SLURM_ARRAY_TASK_STEP");
  if (count < 1 || count > kMaxShards) {
    throw Error(fmt::format("--shard auto: SLURM_ARRAY_TASK_COUNT={} is not in [1, {}]", count, kMaxShards));
  }
  if (step < 1 || id < min || (id - min) % step != 0 || (id - min) / step >= count) {
    throw Error(fmt::format("--shard auto: task {} is not one of {} tasks from {} in steps of {} "
                            "(SLURM_ARRAY_TASK_ID, _MIN, _COUNT, _STEP); shards need an evenly spaced --array "
                            "such as 0-{}",
                            id, count, min, step, count - 1));
  }
  ShardSpec out;
  out.index = (id - min) / step;
  out.count = count;
  out.source = fmt::format("Slurm job array (SLURM_ARRAY_TASK_ID={}, SLURM_ARRAY_TASK_MIN={}, "
                           "SLURM_ARRAY_TASK_COUNT={})",
                           id, min, count);
  return out;
}

}  // namespace

std::string process_env(const std::string& name) {
  const char* v = std::getenv(name.c_str());
  return v ? v : "";
}

ShardSpec parse_shard(const std::string& text, const EnvFn& env) {
  if (text == "auto") return shard_from_slurm(env);
  const auto slash = text.find('/');
  if (slash == std::string::npos) {
    throw Error(fmt::format("--shard: expected i/n (shard i of n, 0 <= i < n) or auto, got '{}'", text.substr(0, 60)));
  }
  ShardSpec out;
  out.index = shard_int(text.substr(0, slash), "shard index");
  out.count = shard_int(text.substr(slash + 1), "shard count");
  if (out.count < 1 || out.count > kMaxShards) {
    throw Error(fmt::format("--shard: the shard count must be in [1, {}], got {}", kMaxShards, out.count));
  }
  if (out.index < 0 || out.index >= out.count) {
    throw Error(fmt::format("--shard: the shard index must be in [0, {}] for {} shards, got {}", out.count - 1,
                            out.count, out.index));
  }
  out.source = "--shard " + text;
  return out;
}

double point_cost(const Scenario& s, const Point& p) {
  if (!p.skip_reason.empty()) return 0.0;
  const double b = static_cast<double>(p.batch()), t = static_cast<double>(p.length());
  const double nodes = static_cast<double>(p.stats.n_nodes);
  // The dense op computes every pair even when causal.
  const double pairs = is_dense_attention(p.attention()) ? t * t : static_cast<double>(p.stats.n_edges);
  const bool backward = p.mode != "forward";
  if (s.kind == ScenarioKind::attention) {
    const double pass = 4.0 * pairs * b * static_cast<double>(s.attention.heads * s.attention.head_dim);
    return (backward ? 3.5 : 1.0) * pass * static_cast<double>(s.warmup + s.repeats);
  }
  const ModelConfig& m = p.config.model;
  const double d = static_cast<double>(m.dim), f = static_cast<double>(m.ffn);
  const double layer = nodes * 2.0 * (4.0 * d * d + 2.0 * d * f) + 4.0 * pairs * d;
  const double forward = b * (static_cast<double>(m.layers) * layer + t * 2.0 * 256.0 * d);
  if (s.kind == ScenarioKind::model) return (backward ? 3.0 : 1.0) * forward * static_cast<double>(s.warmup + s.repeats);
  return 3.0 * forward * static_cast<double>(p.config.steps);
}

std::vector<int64_t> assign_shards(const Scenario& s, const std::vector<Point>& points, int64_t count) {
  if (count < 1) throw Error(fmt::format("shard count {} < 1", count));
  std::vector<int64_t> shard(points.size(), 0);
  std::vector<double> cost(points.size());
  std::vector<size_t> order;
  for (size_t i = 0; i < points.size(); ++i) {
    cost[i] = point_cost(s, points[i]);
    if (cost[i] > 0.0) order.push_back(i);
  }
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return cost[a] > cost[b]; });
  std::vector<double> load(static_cast<size_t>(count), 0.0);
  for (size_t i : order) {
    const size_t least = static_cast<size_t>(std::min_element(load.begin(), load.end()) - load.begin());
    shard[i] = static_cast<int64_t>(least);
    load[least] += cost[i];
  }
  int64_t next = 0;
  for (size_t i = 0; i < points.size(); ++i) {
    if (cost[i] > 0.0) continue;
    shard[i] = next;
    next = (next + 1) % count;
  }
  return shard;
}

int64_t available_cpus() { return cpu_allowance().usable; }

}  // namespace sb
