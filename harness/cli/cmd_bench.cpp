// `sparsebench bench SUITE [Google Benchmark flags]`: registers a suite and hands the flags to Google Benchmark.
#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include "common/error.h"
#include "harness/cli/cli.h"
#include "harness/lm/config.h"
#include "harness/bench/bench.h"
#include "harness/measure/build_info.h"
#include "harness/measure/contention.h"
#include "harness/measure/machine.h"
#include "harness/measure/threads.h"

namespace sb {

int cmd_bench(const std::vector<std::string>& argv) {
  const std::string usage =
      "usage: sparsebench bench SUITE [--threads N] [--scenario FILE] [Google Benchmark flags]\n"
      "  SUITE: kernels (graph attention vs dense LibTorch, one benchmark per point of --scenario FILE, default\n"
      "         scenarios/bench_kernels.json) or graphs (pattern construction)\n"
      "  --threads N  CPU threads; 0 (default) = the cores this process may use (affinity mask and cgroup CPU\n"
      "         quota), not the machine's\n"
      "  kernels: counters cpu_share, busy_machine (1: another process competed for the cores; the rule is in the\n"
      "         context's busy_rule), runnable_others, run_wait_share, steal_share\n"
      "  e.g. --benchmark_filter=bpt --benchmark_format=json --benchmark_repetitions=3\n";
  if (argv.empty() || argv[0] == "--help") {
    fmt::print("{}", usage);
    return argv.empty() ? 2 : 0;
  }
  const std::string suite = argv[0];
  std::vector<std::string> rest;
  int threads = 0;
  std::string scenario;
  // Our options (--name VALUE or --name=VALUE); everything else goes to Google Benchmark.
  auto value_of = [&](size_t& i, const std::string& name, std::string* out) {
    const std::string opt = "--" + name;
    if (argv[i] == opt) {
      if (i + 1 >= argv.size()) throw Error(fmt::format("option {} needs a value", opt));
      *out = argv[++i];
      return true;
    }
    if (argv[i].rfind(opt + "=", 0) == 0) {
      *out = argv[i].substr(opt.size() + 1);
      return true;
    }
    return false;
  };
  for (size_t i = 1; i < argv.size(); ++i) {
    std::string text;
    if (value_of(i, "threads", &text)) {
      threads = static_cast<int>(parse_cli_value(*find_config_field("threads"), text).get<int64_t>());
    } else if (value_of(i, "scenario", &text)) {
      scenario = text;
    } else {
      rest.push_back(argv[i]);
    }
  }
  if (suite == "graphs") {
    if (!scenario.empty()) throw Error("bench graphs: --scenario applies to the kernels suite only");
    register_graph_benchmarks();
  } else if (suite == "kernels") {
    if (scenario.empty()) scenario = find_source_file("scenarios/bench_kernels.json");
    if (scenario.empty()) throw Error("bench kernels: scenarios/bench_kernels.json not found; pass --scenario FILE");
    register_kernel_benchmarks(scenario);
  } else {
    throw Error(fmt::format("bench: unknown suite '{}'; valid suites: kernels, graphs", suite));
  }
  benchmark::AddCustomContext("threads", std::to_string(set_cpu_threads(threads)));
  benchmark::AddCustomContext("usable_cpus", std::to_string(cpu_allowance().usable));  // what --threads 0 means
  benchmark::AddCustomContext("omp_wait_policy", omp_wait_policy());
  benchmark::AddCustomContext("suite", suite);
  benchmark::AddCustomContext("cpu", cpu_summary());  // Google Benchmark's own context gives no model name
  benchmark::AddCustomContext("git_commit", git_commit());
  benchmark::AddCustomContext("sparsebench_build_type", build_type());  // library_build_type is Google Benchmark's
  if (!scenario.empty()) benchmark::AddCustomContext("scenario", scenario);
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
