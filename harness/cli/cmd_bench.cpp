// `sparsebench bench SUITE [Google Benchmark flags]`: registers a suite and hands the flags to Google Benchmark.
#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include "common/error.h"
#include "common/limits.h"
#include "harness/cli/cli.h"
#include "harness/measure/bench.h"

namespace sb {

int cmd_bench(const std::vector<std::string>& argv) {
  const std::string usage =
      "usage: sparsebench bench SUITE [--threads N] [Google Benchmark flags]\n"
      "  SUITE: kernels (graph attention vs dense LibTorch) or graphs (pattern construction)\n"
      "  e.g. --benchmark_filter=bpt --benchmark_format=json --benchmark_repetitions=3\n";
  if (argv.empty() || argv[0] == "--help") {
    fmt::print("{}", usage);
    return argv.empty() ? 2 : 0;
  }
  const std::string suite = argv[0];
  std::vector<std::string> rest;
  int threads = 0;
  for (size_t i = 1; i < argv.size(); ++i) {
    if (argv[i] == "--threads") {
      if (i + 1 >= argv.size()) throw Error("option --threads needs a value");
      threads = static_cast<int>(parse_int_option("threads", argv[++i], 0, kMaxThreads));
    } else if (argv[i].rfind("--threads=", 0) == 0) {
      threads = static_cast<int>(parse_int_option("threads", argv[i].substr(10), 0, kMaxThreads));
    } else {
      rest.push_back(argv[i]);
    }
  }
  if (suite == "graphs") {
    register_graph_benchmarks();
  } else if (suite == "kernels") {
    register_kernel_benchmarks();
  } else {
    throw Error(fmt::format("bench: unknown suite '{}'; valid suites: kernels, graphs", suite));
  }
  benchmark::AddCustomContext("threads", std::to_string(set_cpu_threads(threads)));
  benchmark::AddCustomContext("suite", suite);
  std::vector<char*> bargv;
  std::string prog = "sparsebench bench " + suite;
  bargv.push_back(prog.data());
  for (std::string& s : rest) bargv.push_back(s.data());
  int bargc = static_cast<int>(bargv.size());
  benchmark::Initialize(&bargc, bargv.data());
  if (benchmark::ReportUnrecognizedArguments(bargc, bargv.data())) return 2;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

}  // namespace sb
