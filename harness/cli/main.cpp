// sparsebench: the command-line entry point; dispatches to the subcommands declared in harness/cli/cli.h.
#include <cstdio>
#include <exception>
#include <filesystem>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "harness/measure/blas.h"
#include "harness/measure/float_env.h"
#include "harness/cli/cli.h"
#include "common/error.h"

namespace {

struct Command {
  const char* name;
  int (*run)(const std::vector<std::string>&);
  const char* summary;
};

const Command kCommands[] = {
    {"patterns", sb::cmd_patterns, "list every pattern with its parameters, defaults, ranges and causal support"},
    {"pattern", sb::cmd_pattern, "build one pattern's graph: statistics and JSON export"},
    {"bench", sb::cmd_bench, "benchmarks: `bench kernels` and `bench graphs` (Google Benchmark flags pass through)"},
    {"train", sb::cmd_train, "train a character-level language model on enwik8 over a causal pattern"},
    {"run", sb::cmd_run, "run a scenario file: sweeps recorded under results/"},
    {"plot", sb::cmd_plot, "regenerate the plots and report of a run directory"},
    {"merge", sb::cmd_merge, "merge run directories of one scenario (shards of run --shard i/n) and draw them"},
    {"run-point", sb::cmd_run_point, "one point of a sweep's run directory (started by run --jobs N)"},
    {"schema", sb::cmd_schema, "print the JSON Schema of scenario files (scenarios/schema.json)"},
};

void print_usage() {
  fmt::print("usage: sparsebench COMMAND [options]   (sparsebench COMMAND --help for details)\n\ncommands:\n");
  for (const Command& c : kCommands) fmt::print("  {:<10} {}\n", c.name, c.summary);
}

}  // namespace

int main(int argc, char** argv) {
  sb::configure_blas_runtime(argv);
  try {
    sb::configure_denormals();  // before any thread starts: they inherit it
  } catch (const sb::Error& e) {
    fmt::print(stderr, "sparsebench: error: {}\n", e.what());
    return 2;
  }
  {
    std::error_code ec;
    const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
    if (!ec) sb::set_point_executable(self.string());
  }
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h" ||
      std::string(argv[1]) == "help") {
    print_usage();
    return argc < 2 ? 2 : 0;
  }
  const std::string name = argv[1];
  const std::vector<std::string> rest(argv + 2, argv + argc);
  for (const Command& c : kCommands) {
    if (name != c.name) continue;
    try {
      return c.run(rest);
    } catch (const sb::Error& e) {
      fmt::print(stderr, "sparsebench {}: error: {}\n", name, e.what());
      return 2;
    } catch (const std::exception& e) {
      fmt::print(stderr, "sparsebench {}: internal error: {}\n", name, e.what());
      return 3;
    }
  }
  fmt::print(stderr, "sparsebench: unknown command '{}'\n\n", name);
  print_usage();
  return 2;
}
