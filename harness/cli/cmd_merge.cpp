// `sparsebench merge RUN_DIR... --out DIR`: joins the run directories of one scenario (shards, reruns) and draws them.
#include <fmt/format.h>

#include "harness/cli/cli.h"
#include "harness/scenario/merge.h"

namespace sb {

int cmd_merge(const std::vector<std::string>& argv) {
  Args args(argv, {"help", "no-plot", "overwrite", "skip-corrupt"});
  args.check_known({"out"});
  if (args.flag("help") || args.positional().empty() || !args.has("out")) {
    fmt::print(
        "usage: sparsebench merge RUN_DIR... --out DIR [--overwrite] [--skip-corrupt] [--no-plot]\n"
        "  Merges run directories of the same scenario (run.json's scenario_sha256; others are refused),\n"
        "  e.g. the shards of `run --shard i/n`, into DIR: records.jsonl with each point once (ok or skipped\n"
        "  before failed, then the first RUN_DIR given), run.json (the scenario, shared provenance, and under\n"
        "  \"merged\" the sources, missing points and conflicts), records.csv, graphs/ and the plots.\n"
        "  A conflict is one point recorded with different results (fields other than time, wall_s, shard,\n"
        "  jobs, train_dir and log) by two directories.\n"
        "  Every line of each RUN_DIR/records.jsonl must parse: a corrupt or truncated line is named (FILE:LINE)\n"
        "  and the merge refused (exit 2), unless --skip-corrupt, which merges without those lines and lists\n"
        "  them in DIR/run.json (merged.skipped_lines). A RUN_DIR without records.jsonl is named.\n"
        "  DIR is locked while the merge writes it (DIR/.lock): a second writer is refused.\n"
        "  Exit code: 0 when the merge is complete (every point recorded, no conflict, none failed), 1 when\n"
        "  points are missing or failed or records conflict (DIR is still written), 2 when refused.\n");
    return args.flag("help") ? 0 : 2;
  }
  MergeOptions opt;
  opt.dirs = args.positional();
  opt.out = args.str("out", "");
  opt.overwrite = args.flag("overwrite");
  opt.skip_corrupt = args.flag("skip-corrupt");
  const MergeReport rep = merge_runs(opt);
  for (const std::string& n : rep.notes) fmt::print(stderr, "note: {}\n", n);
  for (const std::string& l : rep.skipped_lines) fmt::print(stderr, "skipped (--skip-corrupt): {}\n", l);
  for (const std::string& c : rep.conflicts) fmt::print(stderr, "conflict: {}\n", c);
  const size_t shown = 50;
  for (size_t i = 0; i < rep.missing.size() && i < shown; ++i) fmt::print(stderr, "missing: {}\n", rep.missing[i]);
  if (rep.missing.size() > shown) fmt::print(stderr, "missing: ... {} more (all in {}/run.json)\n", rep.missing.size() - shown, opt.out);
  const int64_t recorded = rep.ok + rep.skipped + rep.failed;
  fmt::print("merge: {}: {} of {} points recorded ({} ok, {} skipped, {} failed) from {} run directories; {} missing, "
             "{} conflicts, {} duplicates dropped, {} failed records replaced by later successes -> {}\n",
             rep.scenario, recorded, rep.points, rep.ok, rep.skipped, rep.failed, opt.dirs.size(), rep.missing.size(),
             rep.conflicts.size(), rep.duplicates, rep.replaced_failures, opt.out);
  fmt::print("merge: {}\n", rep.complete() ? "complete" : "INCOMPLETE (exit code 1)");
  if (!args.flag("no-plot") && recorded > 0) {
    if (run_plot_script(opt.out) != 0) fmt::print(stderr, "warning: plotting failed; the merged records are intact\n");
  }
  return rep.complete() ? 0 : 1;
}

}  // namespace sb
