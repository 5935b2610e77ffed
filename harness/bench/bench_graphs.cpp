// `sparsebench bench graphs`: graph construction speed and memory (edges/s, bytes/edge) for bpt and window.
// Run: sparsebench bench graphs [--benchmark_filter=bpt/k=4] [--benchmark_format=json]
#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <string>

#include "harness/bench/bench.h"
#include "harness/measure/machine.h"
#include "patterns/pattern.h"
#include "patterns/patterns.h"

namespace sb {

namespace {

// Bytes a graph holds per edge (col, rel, t_col, t_edge) and per node (row_ptr twice, NodeInfo),
// plus the builder's transient per-node cursor.
constexpr int64_t kBytesPerEdge = 4 + 2 + 4 + 4;
constexpr int64_t kBytesPerNode = 8 + 8 + 16 + 8;

struct GraphCase {
  std::string pattern;
  Params params;
  int64_t n;
};

// Exact edge count, computed without building: bpt walks each token's levels, window has a closed form.
int64_t estimate_edges(const GraphCase& c) {
  if (c.pattern == "bpt") return bpt_edge_count(c.n, c.params.at("k"), false);
  const int64_t w = c.params.at("w");
  const int64_t left = (w - 1) / 2, right = w / 2;
  int64_t e = 0;
  for (int64_t i = 0; i < c.n; ++i) e += std::min(i, left) + std::min(c.n - 1 - i, right) + 1;
  return e;
}

void run_case(benchmark::State& state, const GraphCase& c) {
  const int64_t edges = estimate_edges(c);
  const int64_t nodes = c.pattern == "bpt" ? 2 * c.n : c.n;
  const int64_t need = edges * kBytesPerEdge + nodes * kBytesPerNode;
  const int64_t avail = available_memory_bytes();
  if (edges > kMaxEdges) {
    state.SkipWithError(fmt::format("{} edges exceed the 32-bit edge index limit", edges).c_str());
    return;
  }
  // Keep a quarter of the free memory for the rest of the machine.
  if (need > avail / 4 * 3) {
    state.SkipWithError(fmt::format("needs ~{:.1f} GiB for {} edges, {:.1f} GiB available", need / 1073741824.0,
                                    edges, avail / 1073741824.0)
                            .c_str());
    return;
  }
  int64_t built_edges = 0, bytes = 0;
  for (auto _ : state) {
    Graph g = build_pattern(c.pattern, c.n, false, c.params);
    built_edges = g.n_edges();
    bytes = g.bytes();
    benchmark::DoNotOptimize(g.col.data());
  }
  state.counters["edges"] = static_cast<double>(built_edges);
  state.counters["edges_per_s"] = benchmark::Counter(static_cast<double>(built_edges), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["bytes_per_edge"] = static_cast<double>(bytes) / static_cast<double>(built_edges);
}

}  // namespace

void register_graph_benchmarks() {
  std::vector<GraphCase> cases;
  for (int64_t n : {int64_t{4096}, int64_t{65536}, int64_t{1048576}}) {
    for (int64_t k : {1, 4, 64}) cases.push_back({"bpt", {{"k", k}}, n});
    cases.push_back({"window", {{"w", 256}}, n});
  }
  for (const GraphCase& c : cases) {
    const auto& [key, value] = *c.params.begin();
    const std::string name = fmt::format("graphs/{}/{}={}/n={}/bidir", c.pattern, key, value, c.n);
    benchmark::RegisterBenchmark(name.c_str(), [c](benchmark::State& state) { run_case(state, c); })
        ->Unit(benchmark::kMillisecond)
        ->Threads(1);
  }
}

}  // namespace sb
