// `sparsebench bench kernels --benchmark_filter=op_calls`: the cost of one small graph_attention call
// (forward + backward through autograd) on a graph prepared once, against the same call that prepares the
// graph from its tensors every time (what each call did before prepared graphs). Counters:
// host_preparations_per_call (GsaHostGraph::preparations() added per call: 0 on a prepared graph, 1 when
// preparing per call), calls_per_s. Their time ratio is the host work a prepared graph saves.
#include <benchmark/benchmark.h>
#include <fmt/format.h>
#include <torch/torch.h>

#include "harness/bench/bench.h"
#include "kernels/gsa_cpu.h"
#include "kernels/gsa_host_graph.h"
#include "kernels/torch/graph_attention_op.h"
#include "patterns/pattern.h"

namespace sb {

namespace {

void bench_op_calls(benchmark::State& state, int64_t n, bool prepare_each_call) {
  const Graph g = build_pattern("window", n, true, {{"w", 8}});
  const TorchGraph tg = TorchGraph::from_graph(g);
  torch::manual_seed(0);
  const torch::Tensor q = torch::randn({1, g.n_nodes(), 2, 16}).requires_grad_();
  const torch::Tensor rel = (torch::randn({tg.n_relations, 16}) * 0.1).requires_grad_();
  auto call = [&] {
    const TorchGraph graph = prepare_each_call ? TorchGraph::from_tensors(tg.row_ptr, tg.col, tg.rel, tg.n_relations) : tg;
    graph_attention(q, q, q, rel, graph).sum().backward();
  };
  call();  // warm-up
  const int64_t before = GsaHostGraph::preparations();
  for (auto _ : state) call();
  state.counters["host_preparations_per_call"] =
      static_cast<double>(GsaHostGraph::preparations() - before) / static_cast<double>(state.iterations());
  state.counters["calls_per_s"] = benchmark::Counter(1.0, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(fmt::format("window w=8 causal, nodes={} edges={}, B=1 H=2 D=16 simd={}", g.n_nodes(), g.n_edges(),
                             gsa_cpu_target()));
}

}  // namespace

void register_op_call_benchmarks() {
  for (int64_t n : {256, 4096}) {
    for (bool each : {false, true}) {
      benchmark::RegisterBenchmark(
          fmt::format("op_calls/{}/n={}", each ? "prepare_each_call" : "prepared_graph", n).c_str(),
          [n, each](benchmark::State& s) { bench_op_calls(s, n, each); })
          ->UseRealTime()
          ->Unit(benchmark::kMicrosecond);
    }
  }
}

}  // namespace sb
