// Measuring scenario points with LibTorch: the attention op alone, a whole model step, or a training run.
#include "harness/scenario/measure.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <memory>
#include <thread>

#include <fmt/format.h>
#include <torch/torch.h>

#include "common/error.h"
#include "harness/lm/data.h"
#include "harness/lm/model.h"
#include "harness/lm/trainer.h"
#include "harness/measure/blas.h"
#include "harness/measure/build_info.h"
#include "harness/measure/device.h"
#include "harness/measure/machine.h"
#include "harness/measure/threads.h"
#include "harness/measure/timing.h"
#include "kernels/gsa_cpu.h"
#include "kernels/torch/graph_attention_op.h"

namespace sb {

namespace {

// Warm-up, then `repeats` timed runs of `work`; fills samples, median, spread, tokens/s and peak memory.
void time_work(const Scenario& s, const Point& p, torch::Device device, const std::function<void()>& work,
               json& record) {
  using clock = std::chrono::steady_clock;
  for (int64_t i = 0; i < s.warmup; ++i) work();
  sync_device(device);
  PeakProbe probe(device);
  std::vector<double> samples;
  int64_t peak_extra = 0, base = 0;
  for (int64_t i = 0; i < s.repeats; ++i) {
    probe.reset();
    const auto t0 = clock::now();
    work();
    sync_device(device);
    samples.push_back(std::chrono::duration<double>(clock::now() - t0).count());
    peak_extra = std::max(peak_extra, probe.peak() - probe.base());
    base = probe.base();
  }
  const double tokens = static_cast<double>(p.batch * p.length);
  const double med = median_of(samples);
  const double lo = *std::min_element(samples.begin(), samples.end());
  const double hi = *std::max_element(samples.begin(), samples.end());
  record["samples_s"] = samples;
  record["median_s"] = med;
  record["spread"] = med > 0 ? (hi - lo) / (2.0 * med) : 0.0;  // half range relative to the median
  record["tokens_per_s"] = med > 0 ? tokens / med : 0.0;
  record["tokens_per_s_min"] = hi > 0 ? tokens / hi : 0.0;
  record["tokens_per_s_max"] = lo > 0 ? tokens / lo : 0.0;
  record["peak_source"] = probe.source();
  if (probe.available()) {
    record["peak_bytes"] = peak_extra;          // above what was live before the work (weights, inputs, graph)
    record["live_before_bytes"] = base;
    record["peak_total_bytes"] = base + peak_extra;
  } else {
    record["peak_bytes"] = nullptr;
  }
}

// The last graph built, reused by consecutive points that share it (axes are ordered graph-outermost).
struct GraphCache {
  std::string key;
  std::unique_ptr<Graph> graph;
  std::unique_ptr<TorchGraph> torch_graph;
};

const TorchGraph& cached_graph(const Point& p, torch::Device device) {
  static GraphCache cache;
  std::string key = fmt::format("{}|{}|{}|{}|", p.pattern, p.length, p.causal, device.str());
  for (const auto& [k, v] : p.params) key += fmt::format("{}={};", k, v);
  if (cache.key != key) {
    cache.torch_graph.reset();
    cache.graph.reset();
    cache.key.clear();
    cache.graph = std::make_unique<Graph>(build_pattern(p.pattern, p.length, p.causal, p.params));
    cache.torch_graph = std::make_unique<TorchGraph>(TorchGraph::from_graph(*cache.graph, device));
    cache.key = key;
  }
  return *cache.torch_graph;
}

void measure_attention(const Scenario& s, const Point& p, torch::Device device, json& record) {
  const int64_t b = p.batch, h = s.attention.heads, d = s.attention.head_dim;
  const bool backward = p.mode == "forward_backward";
  const auto opts = torch::TensorOptions().dtype(torch::kFloat32).device(device).requires_grad(backward);
  torch::Tensor q, k, v, rel_emb;
  std::function<torch::Tensor()> op;
  if (p.attention == "dense") {
    // q, k, v: [B, T, H, D]
    q = torch::randn({b, p.length, h, d}, opts);
    k = torch::randn({b, p.length, h, d}, opts);
    v = torch::randn({b, p.length, h, d}, opts);
    op = [&] { return dense_attention(q, k, v, p.causal); };
  } else {
    const TorchGraph& g = cached_graph(p, device);
    // q, k, v: [B, N, H, D] over all graph nodes; rel_emb: [R, D]
    q = torch::randn({b, g.n_nodes, h, d}, opts);
    k = torch::randn({b, g.n_nodes, h, d}, opts);
    v = torch::randn({b, g.n_nodes, h, d}, opts);
    if (s.attention.relations) rel_emb = torch::randn({g.n_relations, d}, opts) * 0.1;
    if (rel_emb.defined() && backward) rel_emb = rel_emb.detach().requires_grad_(true);
    op = [&, gp = &g] { return graph_attention(q, k, v, rel_emb, *gp); };
  }
  auto work = [&] {
    if (!backward) {
      torch::NoGradGuard no_grad;
      op();
      return;
    }
    for (torch::Tensor* t : {&q, &k, &v, &rel_emb}) {
      if (t->defined()) t->mutable_grad() = torch::Tensor();
    }
    op().sum().backward();
  };
  time_work(s, p, device, work, record);
  // The dense op computes all T*T pairs even when causal.
  const double pairs = p.attention == "dense" ? static_cast<double>(p.length) * static_cast<double>(p.length)
                                              : static_cast<double>(p.stats.n_edges);
  const double flops = attention_flops(pairs, b, h, d, backward);
  const double med = record["median_s"].get<double>();
  if (med > 0) {
    const double gflops = flops / med / 1e9;
    const double gemm = gemm_gflops(device);
    record["gflops"] = gflops;
    record["gemm_gflops"] = gemm;
    record["gemm_fraction"] = gflops / gemm;
  }
}

void measure_model(const Scenario& s, const Point& p, torch::Device device, json& record) {
  torch::manual_seed(static_cast<uint64_t>(s.seed));
  LanguageModel model(p.config.model);
  model->to(device);
  const bool backward = p.mode == "forward_backward";
  if (backward) model->train();
  else model->eval();
  record["parameters"] = model->parameter_count();
  // bytes: [B, T] int64
  const torch::Tensor bytes =
      torch::randint(0, 256, {p.batch, p.length}, torch::TensorOptions().dtype(torch::kInt64).device(device));
  const torch::Tensor targets = bytes.roll(-1, 1);
  auto work = [&] {
    if (!backward) {
      torch::NoGradGuard no_grad;
      model->forward(bytes);
      return;
    }
    model->zero_grad(true);
    const torch::Tensor logits = model->forward(bytes);  // [B, T, 256]
    torch::nn::functional::cross_entropy(logits.reshape({-1, 256}), targets.reshape({-1})).backward();
  };
  time_work(s, p, device, work, record);
}

// The trainer configuration of a training point: the point's typed config, writing under `out_dir`. A point that
// is not recorded yet starts over (overwrite) unless `out_dir` holds a checkpoint of this very configuration (a
// sweep killed mid-point): then it continues from there, as `train --resume` would.
TrainConfig train_config_for_point(const Point& p, const std::string& out_dir) {
  TrainConfig cfg = p.config;
  if (cfg.data.empty()) throw Error("kind \"train\" needs /train/data (the enwik8 file)");
  cfg.out_dir = out_dir;
  cfg.overwrite = true;
  return cfg;
}

void measure_train(const Point& p, json& record, const std::string& out_dir) {
  TrainConfig cfg = train_config_for_point(p, out_dir);
  std::string why;
  const int64_t from = resumable_step(cfg, &why);
  if (from > 0) {
    cfg.resume = true;
    cfg.overwrite = false;
    if (!cfg.quiet) fmt::print("point {}: continuing its training from step {} ({})\n", p.index, from, out_dir);
  } else if (!why.empty() && !cfg.quiet) {
    fmt::print("point {}: starting over: {}\n", p.index, why);  // a checkpoint is there but cannot be continued
  }
  const json result = train_local_ranks(cfg);  // cfg.nproc ranks: processes of this binary when more than one
  for (const char* key : {"valid_bpc", "test_bpc", "tokens_per_s", "steps", "parameters", "final_loss", "world_size",
                          "context_lens", "resumed_at_steps"}) {
    if (result.contains(key)) record[key] = result[key];
  }
  if (result.contains("timing")) record["timing"] = result["timing"];
  if (result.contains("device")) record["device"] = result["device"];  // where the tensors lived
  if (result.contains("evals")) record["evals"] = result["evals"];
  record["train_dir"] = out_dir;
  const std::string status = result.value("status", std::string("ok"));
  if (status != "ok") {
    record["status"] = "failed";
    record["reason"] = fmt::format("trainer finished with status '{}'", status);
  }
}

}  // namespace

void check_points(const Scenario& s, const std::vector<Point>& points) {
  for (const Point& p : points) {
    if (!p.skip_reason.empty()) continue;
    const std::string where = fmt::format("{}: point {} ({})", s.file, p.index, p.label);
    try {
      if (s.kind == "train") {
        const TrainConfig cfg = train_config_for_point(p, "check");
        validate_train_config(cfg);
        check_data_file(cfg.data, min_data_bytes(cfg.model.context));
      } else if (s.kind == "model") {
        validate_model_config(p.config.model);
      }
    } catch (const Error& e) {
      throw Error(fmt::format("{}: {}", where, e.what()));
    }
  }
}

void measure_point(const Scenario& s, const Point& p, const std::string& run_dir, json& record) {
  const torch::Device device = resolve_device(p.config.device);
  record["threads_used"] = set_cpu_threads(static_cast<int>(p.threads));
  record["simd_target"] = gsa_cpu_target();  // the CPU kernels' SIMD target (SB_CPU_TARGET pins it)
  if (s.kind == "train") {
    measure_train(p, record, fmt::format("{}/train/{:04}", run_dir, p.index));
    return;
  }
  torch::manual_seed(static_cast<uint64_t>(s.seed));
  if (s.kind == "attention") measure_attention(s, p, device, record);
  else measure_model(s, p, device, record);
  record["device"] = device_name(device);
}

json run_environment() {
  json env;
  env["commit"] = git_commit();
  env["build_type"] = build_type();
#if defined(__clang__)
  env["compiler"] = fmt::format("clang {}", __clang_version__);
#elif defined(__GNUC__)
  env["compiler"] = fmt::format("gcc {}", __VERSION__);
#else
  env["compiler"] = "unknown";
#endif
  env["libtorch"] = libtorch_version();
  env["blas"] = blas_info();
  env["threads_default"] = at::get_num_threads();
  env["hardware_threads"] = std::thread::hardware_concurrency();
  env["cpu"] = cpu_model();
  env["simd_target"] = gsa_cpu_target();
  env["simd_targets_available"] = gsa_cpu_targets();
  env["cuda_available"] = torch::cuda::is_available();
  env["gpu_count"] = torch::cuda::is_available() ? static_cast<int64_t>(torch::cuda::device_count()) : 0;
#ifdef SB_WITH_CUDA
  env["cuda_kernels_built"] = true;
#else
  env["cuda_kernels_built"] = false;
#endif
  char host[256] = {0};
  if (gethostname(host, sizeof host - 1) == 0) env["host"] = host;
  return env;
}

}  // namespace sb
