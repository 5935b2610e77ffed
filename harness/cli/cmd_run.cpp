// `sparsebench run SCENARIO.json`: validates, expands and runs a scenario (all of it or one shard, one point or several
// at once), recording every point; `run-point` is one point of a parallel sweep, started by `run --jobs N`.
#include <filesystem>
#include <limits>
#include <optional>

#include <fmt/format.h>

#include "common/error.h"
#include "common/files.h"
#include "common/json_guard.h"
#include "common/limits.h"
#include "common/run_lock.h"
#include "common/sha256.h"
#include "harness/cli/cli.h"
#include "harness/measure/build_info.h"
#include "harness/measure/device.h"
#include "harness/measure/memory_tracker.h"
#include "harness/scenario/measure.h"
#include "harness/scenario/paths.h"
#include "harness/scenario/records.h"
#include "harness/scenario/scenario.h"
#include "harness/scenario/shard.h"
#include "harness/scenario/sweep.h"

namespace sb {

namespace {

std::string& point_executable() {
  static std::string exe;
  return exe;
}

// --jobs N|auto for this scenario's kind; timing kinds run one point at a time unless asked otherwise, with a warning.
int64_t choose_jobs(const Args& args, const Scenario& s, int64_t cpus) {
  const bool timing = s.kind != ScenarioKind::train;
  const std::string given = args.str("jobs", "1");
  if (given == "auto") {
    if (timing) {
      fmt::print("{}: kind {} times its points, so they run one at a time (an explicit --jobs N runs N at once, "
                 "disturbing each other's timings)\n",
                 s.name, kind_name(s.kind));
      return 1;
    }
    return cpus;
  }
  const int64_t jobs = parse_int_option("jobs", given, 1, kMaxThreads);
  if (jobs > 1 && timing) {
    fmt::print(stderr,
               "warning: --jobs {}: kind {} times its points, and points run at once disturb each other's timings "
               "and peaks; every record says jobs={}\n",
               jobs, kind_name(s.kind), jobs);
  }
  return jobs;
}

}  // namespace

void set_point_executable(const std::string& path) { point_executable() = path; }

int cmd_run(const std::vector<std::string>& argv) {
  Args args(argv, {"help", "dry-run", "resume", "no-plot", "overwrite", "allow-changes"});
  args.check_known({"set", "out", "results", "jobs", "shard", "reuse-from"});
  if (args.flag("help") || args.positional().size() != 1) {
    fmt::print(
        "usage: sparsebench run SCENARIO.json [--set path=value ...] [--dry-run] [--out DIR] [--resume]\n"
        "                       [--results ROOT] [--no-plot] [--jobs N|auto] [--shard i/n|auto]\n"
        "                       [--reuse-from RUN_DIR ...]\n"
        "  Validates the scenario (scenarios/schema.json, scenarios/README.md), expands its axes and runs\n"
        "  every point, appending one record per point to RUN_DIR/records.jsonl, then writes records.csv\n"
        "  and the plots (sparsebench plot RUN_DIR).\n"
        "  A point's threads 0 = the cores this process may use (affinity mask and cgroup CPU quota). A point\n"
        "  timed while other processes competed for its cores is recorded busy_machine: true (with cpu_share and\n"
        "  the rule), warned about, and listed in report.md.\n"
        "  RUN_DIR is --out DIR, or ROOT/<scenario>/<UTC time>-<commit> (ROOT: --results, default results).\n"
        "  --set axes/lengths=[512,1024]  overrides one field (slash path, JSON value); repeatable.\n"
        "  --dry-run  prints the expanded points with analytic memory and skip decisions, runs nothing.\n"
        "  The point count is printed first; more than the scenario's /max_points (default 100000) is refused\n"
        "  before anything is expanded (--set max_points=N raises it).\n"
        "  --resume   continues RUN_DIR (--out, or the latest run of this scenario), skipping recorded points;\n"
        "             refused when the scenario differs from the one in RUN_DIR/run.json unless --allow-changes\n"
        "             (run.json then records what changed, before and after).\n"
        "  --overwrite  replaces the records of an earlier run in --out DIR.\n"
        "  --jobs N   runs N points at once, each in its own process (a crashing point is recorded as failed,\n"
        "             the others go on); a point with threads 0 gets an equal share of this process's CPUs.\n"
        "             Default 1. auto: one job per CPU for train scenarios, 1 for the timing kinds (attention,\n"
        "             model), whose points would disturb each other's timings; N > 1 on those warns.\n"
        "  --shard i/n  runs shard i (0-based) of n: a fixed subset of the points, balanced by estimated cost\n"
        "             (analytic FLOPs x passes), into RUN_DIR/shard-i-of-n (RUN_DIR: --out DIR, else\n"
        "             ROOT/<scenario>/shards-<scenario hash>). auto: from Slurm's SLURM_ARRAY_TASK_ID,\n"
        "             SLURM_ARRAY_TASK_MIN and SLURM_ARRAY_TASK_COUNT. sparsebench merge joins the shards.\n"
        "  --reuse-from RUN_DIR  train points copy a finished run of RUN_DIR (e.g. another scenario's) whose\n"
        "             settings, data bytes, SIMD target and subnormal mode are this point's, instead of\n"
        "             training it again; the record and result say where it came from (reused_from). Repeatable.\n");
    return args.flag("help") ? 0 : 2;
  }
  const std::string file = args.positional()[0];
  Scenario s = load_scenario(file, args.all("set"));
  s.reuse_runs = args.all("reuse-from");
  for (const std::string& dir : s.reuse_runs) {
    std::error_code ec;
    if (!std::filesystem::is_directory(dir, ec)) throw Error(fmt::format("--reuse-from {}: not a directory", dir));
  }
  {
    // The count first: expansion builds every point's graph, and a scenario over /max_points is refused here.
    const PointCount count = count_points(s);
    fmt::print("{}: {} points ({})\n", s.name, count.total, count.detail);
    std::fflush(stdout);
  }
  const std::vector<Point> all_points = expand_scenario(s);
  std::optional<ShardSpec> shard;
  if (auto spec = args.maybe("shard")) shard = parse_shard(*spec);
  std::vector<Point> points;
  if (shard) {
    const std::vector<int64_t> of = assign_shards(s, all_points, shard->count);
    double mine = 0.0, total = 0.0;
    for (size_t i = 0; i < all_points.size(); ++i) {
      total += point_cost(s, all_points[i]);
      if (of[i] != shard->index) continue;
      mine += point_cost(s, all_points[i]);
      points.push_back(all_points[i]);
    }
    fmt::print("{}: shard {}/{} ({}): {} of {} points, {:.1f}% of the estimated cost\n", s.name, shard->index,
               shard->count, shard->source, points.size(), all_points.size(), total > 0 ? 100.0 * mine / total : 0.0);
  } else {
    points = all_points;
  }
  // A device this build or machine lacks is refused first (a dry run only prints), then what every point needs.
  if (!args.flag("dry-run")) resolve_device(s.device);
  check_points(s, points);
  if (args.flag("allow-changes") && !args.flag("resume")) throw Error("--allow-changes applies only with --resume");
  if (args.flag("overwrite") && args.flag("resume")) throw Error("--overwrite and --resume exclude each other");
  const int64_t cpus = available_cpus();
  const int64_t jobs = choose_jobs(args, s, cpus);
  if (jobs > 1 && point_executable().empty() && !args.flag("dry-run")) {
    throw Error("--jobs: points run at once in child processes of the sparsebench binary, which this program is not");
  }
  if (args.flag("dry-run")) {
    print_points(s, points);
    return 0;
  }
  const std::string root = args.str("results", "results");
  std::string run_dir;
  if (auto out = args.maybe("out")) {
    run_dir = *out;
  } else if (shard) {
    // Every shard of one scenario meets in one place, whichever machine or time it runs at.
    run_dir = path_under_root(root, {s.name, "shards-" + sha256_hex(s.doc.dump()).substr(0, 12)}, "scenario name");
  } else if (args.flag("resume")) {
    run_dir = latest_run_dir(root, s.name);
    if (run_dir.empty()) throw Error(fmt::format("--resume: no earlier run of {} under {}/{}", s.name, root, s.name));
  } else {
    run_dir = path_under_root(root, {s.name, fmt::format("{}-{}", utc_stamp(), git_commit())}, "scenario name");
  }
  SweepOptions opt;
  if (shard) {
    run_dir = (std::filesystem::path(run_dir) / fmt::format("shard-{}-of-{}", shard->index, shard->count)).string();
    opt.shard = {{"index", shard->index}, {"count", shard->count}, {"source", shard->source}};
  }
  opt.run_dir = run_dir;
  opt.resume = args.flag("resume");
  opt.overwrite = args.flag("overwrite");
  opt.allow_changes = args.flag("allow-changes");
  opt.environment = run_environment();
  opt.jobs = jobs;
  opt.cpu_budget = cpus;
  opt.point_command = {point_executable(), "run-point"};
  for (const std::string& dir : s.reuse_runs) {
    opt.point_command.push_back("--reuse-from");
    opt.point_command.push_back(dir);
  }
  if (!s.reuse_runs.empty()) opt.environment["reuse_from"] = s.reuse_runs;
  for (const Point& p : all_points) opt.scenario_point_ids.push_back(p.id);
  // Installed before any point allocates, so every point's live memory (weights, inputs) is counted alike.
  MemoryTracker::install();
  const SweepSummary sum = run_sweep(s, points, opt, measure_point);
  if (sum.stop_signal != 0) return 128 + sum.stop_signal;
  if (!args.flag("no-plot")) {
    if (run_plot_script(run_dir) != 0) fmt::print(stderr, "warning: plotting failed; the records are intact\n");
  }
  return sum.failed > 0 ? 1 : 0;
}

int cmd_run_point(const std::vector<std::string>& argv) {
  Args args(argv, {"help"});
  args.check_known({"run-dir", "index", "id", "threads", "reuse-from"});
  if (args.flag("help") || !args.positional().empty() || !args.has("run-dir") || !args.has("index") ||
      !args.has("id")) {
    fmt::print("usage: sparsebench run-point --run-dir DIR --index I --id POINT_ID [--threads T] [--reuse-from D ...]\n"
               "  Measures point I of the scenario in DIR/.points/scenario.json, as the sweep handed it over in\n"
               "  DIR/.points/I.point.json, and writes its result fields to DIR/.points/I.json; `sparsebench run\n"
               "  --jobs N` starts one per point and records the result.\n");
    return args.flag("help") ? 0 : 2;
  }
  const std::string dir = args.str("run-dir", "");
  const int64_t index = parse_int_option("index", args.str("index", ""), 0, std::numeric_limits<int64_t>::max());
  const std::string id = args.str("id", "");
  const int64_t threads = parse_int_option("threads", args.str("threads", "0"), 0, kMaxThreads);
  // Started by `run --jobs N`, a point writes under its sweep's lock; started by hand, it takes the lock itself.
  std::optional<RunDirLock> lock;
  if (!lock_held_by_parent(dir)) lock.emplace(dir, "run-point --run-dir");
  const std::string spec_path = point_scenario_path(dir);
  bool exists = false;
  const std::string text = read_file(spec_path, &exists);
  if (!exists) throw Error(fmt::format("{}: not found; run-point runs points of a sweep started by run --jobs", spec_path));
  const json spec = parse_json_guarded(text, spec_path, false);
  if (!spec.is_object() || !spec.contains("doc") || !spec.contains("file") || !spec["file"].is_string()) {
    throw Error(fmt::format("{}: expected {{\"file\": ..., \"doc\": ...}}", spec_path));
  }
  Scenario s = scenario_from_json(spec["doc"], spec["file"].get<std::string>());
  s.reuse_runs = args.all("reuse-from");
  // The point as the sweep expanded it: no expansion (degree search, graphs for statistics) again here.
  const std::string handoff_path = point_handoff_path(dir, index);
  const std::string handoff_text = read_file(handoff_path, &exists);
  if (!exists) throw Error(fmt::format("{}: not found; run-point runs points of a sweep started by run --jobs", handoff_path));
  json handoff = parse_json_guarded(handoff_text, handoff_path, false);
  Point p = point_from_handoff(handoff, handoff_path);
  if (p.index != index || p.id != id) {
    throw Error(fmt::format("--index {}: the sweep in {} handed no point '{}' there", index, dir, id));
  }
  p.config.threads = threads;
  handoff["config"]["threads"] = threads;
  MemoryTracker::install();
  json record = json::object();
  try {
    measure_handed_point(s, p, dir, handoff["config"], record);
  } catch (const std::exception& e) {
    record["status"] = "failed";
    record["reason"] = e.what();
  }
  write_file_atomic(point_result_path(dir, index), record.dump(-1, ' ', false, json::error_handler_t::replace) + "\n");
  return 0;
}

int cmd_schema(const std::vector<std::string>& argv) {
  Args args(argv, {"help"});
  args.check_known({});
  if (args.flag("help") || !args.positional().empty()) {
    fmt::print("usage: sparsebench schema > scenarios/schema.json\n"
               "  Prints the JSON Schema of scenario files, generated from the field tables the validator uses.\n");
    return args.flag("help") ? 0 : 2;
  }
  fmt::print("{}\n", scenario_schema().dump(2));
  return 0;
}

}  // namespace sb
