// `sparsebench run SCENARIO.json`: validates, expands and runs a scenario, recording every point.
#include <filesystem>

#include <fmt/format.h>

#include "harness/cli/cli.h"
#include "harness/measure/build_info.h"
#include "harness/scenario/measure.h"
#include "harness/scenario/paths.h"
#include "harness/scenario/records.h"
#include "harness/scenario/sweep.h"
#include "harness/scenario/scenario.h"
#include "harness/measure/device.h"
#include "harness/measure/memory_tracker.h"
#include "common/error.h"

namespace sb {

int cmd_run(const std::vector<std::string>& argv) {
  Args args(argv, {"help", "dry-run", "resume", "no-plot", "overwrite", "allow-changes"});
  args.check_known({"set", "out", "results"});
  if (args.flag("help") || args.positional().size() != 1) {
    fmt::print(
        "usage: sparsebench run SCENARIO.json [--set path=value ...] [--dry-run] [--out DIR] [--resume]\n"
        "                       [--results ROOT] [--no-plot]\n"
        "  Validates the scenario (scenarios/schema.json, scenarios/README.md), expands its axes and runs\n"
        "  every point, appending one record per point to RUN_DIR/records.jsonl, then writes records.csv\n"
        "  and the plots (sparsebench plot RUN_DIR).\n"
        "  RUN_DIR is --out DIR, or ROOT/<scenario>/<UTC time>-<commit> (ROOT: --results, default results).\n"
        "  --set axes/lengths=[512,1024]  overrides one field (slash path, JSON value); repeatable.\n"
        "  --dry-run  prints the expanded points with analytic memory and skip decisions, runs nothing.\n"
        "  --resume   continues RUN_DIR (--out, or the latest run of this scenario), skipping recorded points;\n"
        "             refused when the scenario differs from the one in RUN_DIR/run.json unless --allow-changes\n"
        "             (run.json then records what changed, before and after).\n"
        "  --overwrite  replaces the records of an earlier run in --out DIR.\n");
    return args.flag("help") ? 0 : 2;
  }
  const std::string file = args.positional()[0];
  const Scenario s = load_scenario(file, args.all("set"));
  const std::vector<Point> points = expand_scenario(s);
  // A device this build or machine lacks is refused first (a dry run only prints), then what every point needs.
  if (!args.flag("dry-run")) resolve_device(s.device);
  check_points(s, points);
  if (args.flag("allow-changes") && !args.flag("resume")) throw Error("--allow-changes applies only with --resume");
  if (args.flag("overwrite") && args.flag("resume")) throw Error("--overwrite and --resume exclude each other");
  if (args.flag("dry-run")) {
    print_points(s, points);
    return 0;
  }
  const std::string root = args.str("results", "results");
  std::string run_dir;
  if (auto out = args.maybe("out")) {
    run_dir = *out;
  } else if (args.flag("resume")) {
    run_dir = latest_run_dir(root, s.name);
    if (run_dir.empty()) throw Error(fmt::format("--resume: no earlier run of {} under {}/{}", s.name, root, s.name));
  } else {
    run_dir = path_under_root(root, {s.name, fmt::format("{}-{}", utc_stamp(), git_commit())}, "scenario name");
  }
  SweepOptions opt;
  opt.run_dir = run_dir;
  opt.resume = args.flag("resume");
  opt.overwrite = args.flag("overwrite");
  opt.allow_changes = args.flag("allow-changes");
  opt.environment = run_environment();
  // Installed before any point allocates, so every point's live memory (weights, inputs) is counted alike.
  MemoryTracker::install();
  const SweepSummary sum = run_sweep(s, points, opt, measure_point);
  if (!args.flag("no-plot")) {
    if (run_plot_script(run_dir) != 0) fmt::print(stderr, "warning: plotting failed; the records are intact\n");
  }
  return sum.failed > 0 ? 1 : 0;
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
