// `sparsebench plot RUN_DIR`: rewrites records.csv and runs plots/plot_run.py over a run directory.
#include <cstdlib>
#include <filesystem>

#include <fmt/format.h>

#include "harness/cli/cli.h"
#include "harness/scenario/records.h"
#include "common/error.h"

namespace sb {

namespace fs = std::filesystem;

namespace {

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

}  // namespace

int run_plot_script(const std::string& run_dir) {
  const RecordFile records = read_records((fs::path(run_dir) / "records.jsonl").string());
  for (const std::string& p : records.problems) fmt::print(stderr, "warning: {}\n", p);
  write_records_csv(records.records, (fs::path(run_dir) / "records.csv").string());
  const std::string script = find_source_file("plots/plot_run.py");
  if (script.empty()) {
    fmt::print(stderr, "plot: plots/plot_run.py not found beside the sources or the binary\n");
    return 1;
  }
  const std::string cmd = fmt::format("python3 {} {}", shell_quote(script), shell_quote(run_dir));
  std::fflush(stdout);
  const int rc = std::system(cmd.c_str());
  return rc == 0 ? 0 : 1;
}

int cmd_plot(const std::vector<std::string>& argv) {
  Args args(argv, {"help"});
  args.check_known({});
  if (args.flag("help") || args.positional().size() != 1) {
    fmt::print("usage: sparsebench plot RUN_DIR\n"
               "  Rewrites RUN_DIR/records.csv from records.jsonl and draws the figures (PNG and SVG) and\n"
               "  report.md from the records with python3 plots/plot_run.py RUN_DIR.\n");
    return args.flag("help") ? 0 : 2;
  }
  const std::string dir = args.positional()[0];
  if (!fs::is_directory(dir)) throw Error(fmt::format("plot: {}: not a directory", dir));
  if (!fs::exists(fs::path(dir) / "records.jsonl")) throw Error(fmt::format("plot: {}/records.jsonl: not found", dir));
  return run_plot_script(dir);
}

}  // namespace sb
