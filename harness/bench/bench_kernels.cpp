// `sparsebench bench kernels`: graph attention (forward, forward+backward) vs the dense LibTorch ops, one Google
// Benchmark per point of a scenario file (default scenarios/bench_kernels.json; `--scenario FILE` picks another):
// the axes are data, expanded by the scenario runner's expander, and timed with its FLOP count and GEMM yardstick.
// Counters: edges_per_s (attended pairs per second), gflops (harness/measure/timing.h: 4*E*H*D*B forward, 3.5x
// that forward+backward), gemm_gflops (the fp32 2048^3 LibTorch matmul at the same threads), gemm_fraction,
// peak_bytes (bytes allocated at the peak of one call beyond what was live, sb::PeakProbe). Skipped points say why
// (the expander's skips; or, from the graph each point builds when it runs, analytic memory over the scenario's
// budget or over what is available). Graph attention forward+backward runs
// graph_attention_forward + graph_attention_backward (what the autograd op runs); the dense op's backward goes
// through LibTorch autograd. The CPU kernels' SIMD target (SB_CPU_TARGET pins it) is in the context block
// (simd_target) and each graph point's label; a dense point's label names its kernel (backend=sdpa:..., materialised).
// The context also says how large CPU blocks were served (host_large_blocks: kept for reuse, or plain).
// e.g. sparsebench bench kernels --benchmark_filter='fwd/bpt' --benchmark_format=json
#include <benchmark/benchmark.h>
#include <fmt/format.h>
#include <torch/torch.h>

#include <memory>
#include <optional>

#include "common/error.h"
#include "harness/bench/bench.h"
#include "harness/scenario/scenario.h"
#include "harness/measure/contention.h"
#include "harness/measure/device.h"
#include "harness/measure/float_env.h"
#include "harness/measure/machine.h"
#include "harness/measure/memory_tracker.h"
#include "harness/measure/timing.h"
#include "kernels/gsa_cpu.h"
#include "kernels/torch/graph_attention_op.h"

namespace sb {

namespace {

void set_counters(benchmark::State& state, const Scenario& s, const Point& p, double pairs, bool backward,
                  int64_t peak, torch::Device device) {
  const double flops_per_call = attention_flops(pairs, p.batch(), s.attention.heads, s.attention.head_dim, backward);
  const double gemm = gemm_gflops(device);
  state.counters["edges_per_s"] = benchmark::Counter(pairs * static_cast<double>(p.batch()),
                                                     benchmark::Counter::kIsIterationInvariantRate);
  state.counters["gflops"] = benchmark::Counter(flops_per_call / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["gemm_gflops"] = gemm;
  state.counters["peak_bytes"] = static_cast<double>(peak);
  state.counters["edges"] = pairs;
  state.counters["gemm_fraction"] =
      benchmark::Counter(flops_per_call / 1e9 / gemm, benchmark::Counter::kIsIterationInvariantRate);
}

// " BUSY" for a label when the timed loop ran on a busy machine.
std::string busy_label(benchmark::State& state) {
  const auto it = state.counters.find("busy_machine");
  return it != state.counters.end() && it->second.value > 0.0 ? " BUSY" : "";
}

// Warm-up, the timed loop (under the contention probe: counters cpu_share, busy_machine 0/1, runnable_others,
// run_wait_share, steal_share, -1 where unknown; a busy point also says so in its label and on stderr), then one
// more call under the peak probe.
template <typename F>
void time_calls(benchmark::State& state, const Scenario& s, const Point& p, torch::Device device, F&& run,
                int64_t* peak) {
  for (int64_t i = 0; i < s.warmup; ++i) run();
  sync_device(device);
  ContentionProbe busy(at::get_num_threads(), 100);  // sampled beside the loop: nothing is added inside it
  busy.start();
  for (auto _ : state) {
    run();
    sync_device(device);
  }
  const Contention c = busy.stop();
  state.counters["cpu_share"] = c.cpu_share;
  state.counters["busy_machine"] = c.busy ? 1.0 : 0.0;
  state.counters["runnable_others"] = c.runnable_others;
  state.counters["run_wait_share"] = c.run_wait_share;
  state.counters["steal_share"] = c.steal_share;
  if (c.busy) {
    std::string why;
    for (const std::string& r : c.reasons) why += (why.empty() ? "" : "; ") + r;
    fmt::print(stderr, "warning: {} n={} {}: busy machine ({}); this timing reflects the load\n", p.label, p.length(),
               p.mode, why);
  }
  PeakProbe probe(device);
  probe.reset();
  run();
  sync_device(device);
  *peak = probe.peak() - probe.base();
}

void bench_point(benchmark::State& state, const Scenario& s, const Point& point) {
  if (!point.skip_reason.empty()) {
    state.SkipWithError(point.skip_reason.c_str());
    return;
  }
  // The point's graph is built here, not by the expansion (see register_kernel_benchmarks): its statistics give the
  // analytic memory and the scenario's budget skip that expand_scenario leaves out.
  Point p = point;
  std::optional<Graph> graph;
  if (!is_dense_attention(p.attention())) {
    try {
      graph.emplace(build_pattern(p.pattern(), p.length(), p.causal(), p.params()));
    } catch (const Error& err) {
      state.SkipWithError(fmt::format("error: {}", err.what()).c_str());
      return;
    }
    p.stats = graph->stats(256);
    p.analytic_bytes = analytic_memory_bytes(s, p);
    const std::string over_budget = memory_budget_skip(s, p);
    if (!over_budget.empty()) {
      state.SkipWithError(over_budget.c_str());
      return;
    }
  }
  // Every point starts with no idle kept blocks (its warm-up keeps its own), and they do not hide free memory here.
  MemoryTracker::release_cached();
  const double avail = static_cast<double>(available_memory_bytes());
  if (static_cast<double>(p.analytic_bytes) > 0.9 * avail) {
    state.SkipWithError(fmt::format("needs about {:.1f} GB (analytic), {:.1f} GB available",
                                    static_cast<double>(p.analytic_bytes) / 1e9, avail / 1e9)
                            .c_str());
    return;
  }
  const torch::Device device = resolve_device(s.device);
  const bool backward = p.mode == "forward_backward";
  const int64_t b = p.batch(), h = s.attention.heads, d = s.attention.head_dim;
  const auto opts = torch::TensorOptions().dtype(torch::kFloat32).device(device);
  torch::manual_seed(static_cast<uint64_t>(s.seed));
  int64_t peak = 0;
  if (is_dense_attention(p.attention())) {
    // q, k, v, d_o: [B, T, H, D]
    const torch::Tensor q = torch::randn({b, p.length(), h, d}, opts).requires_grad_(backward),
                        k = torch::randn({b, p.length(), h, d}, opts).requires_grad_(backward),
                        v = torch::randn({b, p.length(), h, d}, opts).requires_grad_(backward),
                        d_o = torch::randn({b, p.length(), h, d}, opts);
    const bool naive = p.attention() == "dense_naive";
    auto dense = [&] { return dense_baseline(q, k, v, p.causal(), naive); };
    auto run = [&] {
      if (!backward) {
        torch::NoGradGuard no_grad;
        benchmark::DoNotOptimize(dense());
      } else {
        benchmark::DoNotOptimize(torch::autograd::grad({dense()}, {q, k, v}, {d_o}));
      }
    };
    time_calls(state, s, p, device, run, &peak);
    set_counters(state, s, p, static_cast<double>(p.length()) * static_cast<double>(p.length()), backward, peak, device);
    state.SetLabel(fmt::format("backend={}{}", dense_attention_backend(q, k, v, p.causal(), naive), busy_label(state)));
    return;
  }
  const Graph& g = *graph;
  const TorchGraph tg = TorchGraph::from_graph(g, device);
  const int64_t nn = g.n_nodes();
  // q, k, v, d_o: [B, N, H, D] over all graph nodes; rel: [R, D]
  const torch::Tensor q = torch::randn({b, nn, h, d}, opts), k = torch::randn({b, nn, h, d}, opts),
                      v = torch::randn({b, nn, h, d}, opts), d_o = torch::randn({b, nn, h, d}, opts);
  const torch::Tensor rel = s.attention.relations ? torch::randn({tg.n_relations, d}, opts) * 0.1 : torch::Tensor();
  auto run = [&] {
    torch::NoGradGuard no_grad;
    auto [o, lse] = graph_attention_forward(q, k, v, rel, tg);
    if (backward) benchmark::DoNotOptimize(graph_attention_backward(d_o, q, k, v, rel, o, lse, tg));
    else benchmark::DoNotOptimize(o);
  };
  time_calls(state, s, p, device, run, &peak);
  set_counters(state, s, p, static_cast<double>(g.n_edges()), backward, peak, device);
  state.SetLabel(fmt::format("nodes={} edges={} simd={}{}", nn, g.n_edges(), gsa_cpu_target(), busy_label(state)));
}

}  // namespace

void register_kernel_benchmarks(const std::string& scenario_file) {
  // Registered benchmarks outlive this call: the scenario and its points are kept for the process.
  static std::vector<std::unique_ptr<Scenario>> scenarios;
  static std::vector<std::unique_ptr<std::vector<Point>>> expanded;
  benchmark::AddCustomContext("simd_target", gsa_cpu_target());
  benchmark::AddCustomContext("denormals", denormals_mode());
  benchmark::AddCustomContext("busy_rule", kBusyRule);
  MemoryTracker::install();
  benchmark::AddCustomContext("host_large_blocks", MemoryTracker::large_blocks());
  scenarios.push_back(std::make_unique<Scenario>(load_scenario(scenario_file, {})));
  const Scenario& s = *scenarios.back();
  if (s.kind != ScenarioKind::attention) {
    throw Error(fmt::format("{}: bench kernels needs a scenario of kind \"attention\", got \"{}\"", scenario_file, kind_name(s.kind)));
  }
  // Graphs are built per point as it runs, so a filter waits only for the points it selects.
  expanded.push_back(std::make_unique<std::vector<Point>>(expand_scenario(s, false)));
  for (const Point& p : *expanded.back()) {
    const std::string mode = p.mode == "forward_backward" ? "fwdbwd" : "fwd";
    const std::string name =
        fmt::format("{}/{}{}/n={}", mode, p.label, p.causal() ? "/causal" : "", p.length());
    benchmark::RegisterBenchmark(name.c_str(), [&s, &p](benchmark::State& st) { bench_point(st, s, p); })
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond)
        ->MinTime(0.5);
  }
  register_op_call_benchmarks();
}

}  // namespace sb
