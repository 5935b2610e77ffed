// `sparsebench bench kernels`: graph attention (forward, forward+backward) vs the dense LibTorch baseline.
// Axes: pattern in {bpt k=1,4,16,64; window w=64,256; fixed l=128,c=8; bigbird b=32,r=2} plus dense LibTorch,
// n in {1024, 4096, 8192, 16384, 65536}, B=1, H=8, D=64, bidirectional, graph attention with relation embeddings.
// Counters: edges_per_s (attended pairs per second), gflops (forward 4*E*H*D flops; forward+backward
// 14*E*H*D: the backward counted as 2.5x the forward, the FlashAttention convention, recomputation
// excluded), gemm_fraction (gflops / the fp32 2048^3 LibTorch matmul rate measured once in this process),
// gemm_gflops, peak_bytes (LibTorch CPU bytes allocated at the peak of one call beyond its inputs, by
// sb::MemoryTracker). Skipped combinations say why (pattern not registered, too much memory). The CPU kernels' SIMD
// target (SB_CPU_TARGET pins it) is in the context block (simd_target) and each graph case's label.
// Graph attention forward+backward runs graph_attention_forward + graph_attention_backward (what the
// autograd op runs); the dense baseline's backward goes through LibTorch autograd.
// e.g. sparsebench bench kernels --benchmark_filter='fwd/bpt' --benchmark_format=json
#include <benchmark/benchmark.h>
#include <fmt/format.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <optional>

#include "harness/bench.h"
#include "kernels/gsa_cpu.h"
#include "kernels/torch/graph_attention_op.h"
#include "kernels/torch/memory_tracker.h"
#include "patterns/error.h"
#include "patterns/pattern.h"

namespace sb {

namespace {

constexpr int64_t kB = 1, kH = 8, kD = 64;

// fp32 GEMM rate (GFLOP/s) of a 2048^3 LibTorch matmul: best of 5 after a warm-up, measured once.
double gemm_gflops() {
  static const double rate = [] {
    torch::NoGradGuard no_grad;
    const int64_t n = 2048;
    const torch::Tensor a = torch::randn({n, n}), b = torch::randn({n, n});
    torch::Tensor c = torch::matmul(a, b);
    double best = 1e30;
    for (int rep = 0; rep < 5; ++rep) {
      const auto t0 = std::chrono::steady_clock::now();
      c = torch::matmul(a, b);
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    return 2.0 * n * n * n / best / 1e9;
  }();
  return rate;
}

// MemAvailable from /proc/meminfo (free plus reclaimable cache); the free page count when unreadable.
double available_bytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  double kib = 0.0;
  std::string unit;
  while (meminfo >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib * 1024.0;
  }
  return static_cast<double>(sysconf(_SC_AVPHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGESIZE));
}

struct PatternSpec {
  std::string name;
  Params params;
  std::string label() const {
    std::string s = name;
    for (const auto& [k, v] : params) s += fmt::format(":{}={}", k, v);
    return s;
  }
};

void set_counters(benchmark::State& state, double pairs, bool backward, int64_t peak) {
  const double flops_per_call = (backward ? 14.0 : 4.0) * pairs * kH * kD * kB;
  const double gflops = gemm_gflops();
  state.counters["edges_per_s"] = benchmark::Counter(pairs * kB, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["gflops"] =
      benchmark::Counter(flops_per_call / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["gemm_gflops"] = gflops;
  state.counters["peak_bytes"] = static_cast<double>(peak);
  state.counters["edges"] = pairs;
  state.counters["gemm_fraction"] =
      benchmark::Counter(flops_per_call / 1e9 / gflops, benchmark::Counter::kIsIterationInvariantRate);
}

// One call's peak LibTorch CPU allocation beyond what was live before it.
template <typename F>
int64_t measure_peak(F&& f) {
  MemoryTracker::install();
  MemoryTracker::reset_peak();
  const int64_t base = MemoryTracker::current_bytes();
  f();
  return MemoryTracker::peak_bytes() - base;
}

void bench_graph(benchmark::State& state, const PatternSpec& spec, int64_t n, bool backward) {
  std::optional<Graph> g;
  try {
    g.emplace(build_pattern(spec.name, n, false, spec.params));
  } catch (const Error& e) {
    state.SkipWithError(fmt::format("pattern {} unavailable: {}", spec.label(), e.what()).c_str());
    return;
  }
  const TorchGraph tg = TorchGraph::from_graph(*g);
  const int64_t nn = g->n_nodes();
  torch::manual_seed(0);
  const torch::Tensor q = torch::randn({kB, nn, kH, kD}), k = torch::randn({kB, nn, kH, kD}),
                      v = torch::randn({kB, nn, kH, kD}), rel = torch::randn({tg.n_relations, kD}) * 0.1,
                      d_o = torch::randn({kB, nn, kH, kD});
  auto run = [&] {
    if (!backward) {
      torch::NoGradGuard no_grad;
      benchmark::DoNotOptimize(graph_attention_forward(q, k, v, rel, tg));
    } else {
      auto [o, lse] = graph_attention_forward(q, k, v, rel, tg);
      benchmark::DoNotOptimize(graph_attention_backward(d_o, q, k, v, rel, o, lse, tg));
    }
  };
  run();  // warm-up
  for (auto _ : state) run();
  set_counters(state, static_cast<double>(g->n_edges()), backward, measure_peak(run));
  state.SetLabel(fmt::format("nodes={} edges={} simd={}", nn, g->n_edges(), gsa_cpu_target()));
}

void bench_dense(benchmark::State& state, int64_t n, bool backward) {
  const double score_bytes = static_cast<double>(kB * kH) * n * n * 4.0;
  const double need = score_bytes * (backward ? 4.5 : 2.05);  // scores + probabilities (+ their grads)
  if (need > 0.9 * available_bytes()) {
    state.SkipWithError(fmt::format("dense n={} needs about {:.1f} GB, {:.1f} GB available", n, need / 1e9,
                                    available_bytes() / 1e9)
                            .c_str());
    return;
  }
  torch::manual_seed(0);
  const torch::Tensor q = torch::randn({kB, n, kH, kD}).requires_grad_(backward),
                      k = torch::randn({kB, n, kH, kD}).requires_grad_(backward),
                      v = torch::randn({kB, n, kH, kD}).requires_grad_(backward), d_o = torch::randn({kB, n, kH, kD});
  auto run = [&] {
    if (!backward) {
      torch::NoGradGuard no_grad;
      benchmark::DoNotOptimize(dense_attention(q, k, v, false));
    } else {
      const torch::Tensor o = dense_attention(q, k, v, false);
      benchmark::DoNotOptimize(torch::autograd::grad({o}, {q, k, v}, {d_o}));
    }
  };
  run();
  for (auto _ : state) run();
  set_counters(state, static_cast<double>(n) * n, backward, measure_peak(run));
}

}  // namespace

void register_kernel_benchmarks() {
  const std::vector<PatternSpec> specs = {{"bpt", {{"k", 1}}},   {"bpt", {{"k", 4}}},
                                          {"bpt", {{"k", 16}}},  {"bpt", {{"k", 64}}},
                                          {"window", {{"w", 64}}},  {"window", {{"w", 256}}},
                                          {"fixed", {{"l", 128}, {"c", 8}}}, {"bigbird", {{"b", 32}, {"r", 2}}}};
  benchmark::AddCustomContext("simd_target", gsa_cpu_target());
  const std::vector<int64_t> lengths = {1024, 4096, 8192, 16384, 65536};
  for (bool backward : {false, true}) {
    const std::string mode = backward ? "fwdbwd" : "fwd";
    for (const PatternSpec& spec : specs) {
      for (int64_t n : lengths) {
        benchmark::RegisterBenchmark(fmt::format("{}/{}/n={}", mode, spec.label(), n).c_str(),
                                     [spec, n, backward](benchmark::State& s) { bench_graph(s, spec, n, backward); })
            ->UseRealTime()
            ->Unit(benchmark::kMillisecond)
            ->MinTime(0.5);
      }
    }
    for (int64_t n : lengths) {
      benchmark::RegisterBenchmark(fmt::format("{}/dense_torch/n={}", mode, n).c_str(),
                                   [n, backward](benchmark::State& s) { bench_dense(s, n, backward); })
          ->UseRealTime()
          ->Unit(benchmark::kMillisecond)
          ->MinTime(0.5);
    }
  }
}

}  // namespace sb
