// Measuring scenario points with LibTorch: the attention op alone, a whole model step, or a training run.
#include "harness/scenario/measure.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <thread>

#include <fmt/format.h>
#include <torch/torch.h>

#include "common/durable_file.h"
#include "common/error.h"
#include "common/files.h"
#include "harness/lm/config.h"
#include "harness/lm/data.h"
#include "harness/lm/tasks.h"
#include "harness/lm/fast_linear.h"
#include "harness/lm/model.h"
#include "harness/lm/run_state.h"
#include "harness/lm/trainer.h"
#include "harness/measure/blas.h"
#include "harness/measure/build_info.h"
#include "harness/measure/contention.h"
#include "harness/measure/device.h"
#include "harness/measure/float_env.h"
#include "harness/measure/machine.h"
#include "harness/measure/memory_tracker.h"
#include "harness/measure/threads.h"
#include "harness/measure/timing.h"
#include "common/config_changes.h"
#include "kernels/gsa_cpu.h"
#include "kernels/torch/graph_attention_op.h"
#include "patterns/pattern.h"

namespace sb {

namespace fs = std::filesystem;

namespace {

// Warm-up, then `repeats` timed runs of `work`; fills samples, median, spread, tokens/s and peak memory.
void time_work(const Scenario& s, const Point& p, torch::Device device, const std::function<void()>& work,
               json& record) {
  using clock = std::chrono::steady_clock;
  MemoryTracker::release_cached();  // every point starts alike; its warm-up keeps the blocks its calls reuse
  for (int64_t i = 0; i < s.warmup; ++i) work();
  sync_device(device);
  PeakProbe probe(device);
  std::vector<double> samples;
  int64_t peak_extra = 0, base = 0;
  // Over the timed calls only; its samples are taken between them.
  ContentionProbe busy(record["threads_used"].get<int64_t>());
  busy.start();
  for (int64_t i = 0; i < s.repeats; ++i) {
    probe.reset();
    const auto t0 = clock::now();
    work();
    sync_device(device);
    samples.push_back(std::chrono::duration<double>(clock::now() - t0).count());
    busy.sample();
    peak_extra = std::max(peak_extra, probe.peak() - probe.base());
    base = probe.base();
  }
  contention_to_json(busy.stop(), record);
  const double tokens = static_cast<double>(p.batch() * p.length());
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
  record["host_large_blocks"] = MemoryTracker::large_blocks();  // kept for reuse or mapped per call
  if (probe.available()) {
    record["peak_bytes"] = peak_extra;          // above what was live before the work (weights, inputs, graph)
    record["live_before_bytes"] = base;
    record["peak_total_bytes"] = base + peak_extra;
  } else {
    record["peak_bytes"] = nullptr;
  }
}

// The op's form of the last graph, reused by consecutive points that share it (axes are ordered graph-outermost);
// the graph itself is the one the expansion built (shared_pattern_graph).
const TorchGraph& cached_graph(const Point& p, torch::Device device) {
  static std::shared_ptr<const Graph> graph;
  static std::unique_ptr<TorchGraph> torch_graph;
  static torch::Device on = torch::kCPU;
  const std::shared_ptr<const Graph> g = shared_pattern_graph(p.pattern(), p.length(), p.causal(), p.params());
  if (g != graph || device != on || !torch_graph) {
    torch_graph.reset();
    torch_graph = std::make_unique<TorchGraph>(TorchGraph::from_graph(*g, device));
    graph = g;
    on = device;
  }
  return *torch_graph;
}

void measure_attention(const Scenario& s, const Point& p, torch::Device device, json& record) {
  const int64_t b = p.batch(), h = s.attention.heads, d = s.attention.head_dim;
  const bool backward = p.mode == "forward_backward";
  const torch::Dtype dtype = precision_of(p.dtype()).compute;
  const auto opts = torch::TensorOptions().dtype(dtype).device(device).requires_grad(backward);
  torch::Tensor q, k, v, rel_emb;
  std::function<torch::Tensor()> op;
  if (is_dense_attention(p.attention())) {
    // q, k, v: [B, T, H, D]
    q = torch::randn({b, p.length(), h, d}, opts);
    k = torch::randn({b, p.length(), h, d}, opts);
    v = torch::randn({b, p.length(), h, d}, opts);
    const bool naive = p.attention() == "dense_naive";
    record["attention_backend"] = dense_attention_backend(q, k, v, p.causal(), naive);
    op = [&, naive] { return dense_baseline(q, k, v, p.causal(), naive); };
  } else {
    record["attention_backend"] = graph_attention_backend(device, dtype);
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
  if (!is_dense_attention(p.attention())) {
    const std::string kernels = graph_attention_last_call(device);
    if (!kernels.empty()) record["attention_kernels"] = kernels;
  }
  // Work counts all T*T pairs for the dense ops, causal or not (the naive op computes them all).
  const double pairs = is_dense_attention(p.attention()) ? static_cast<double>(p.length()) * static_cast<double>(p.length())
                                              : static_cast<double>(p.stats.n_edges);
  const double flops = attention_flops(pairs, b, h, d, backward);
  const double med = record["median_s"].get<double>();
  if (med > 0) {
    const double gflops = flops / med / 1e9;
    const double gemm = gemm_gflops(device, dtype);  // the same dtype's GEMM: the fair ceiling on tensor cores
    record["gflops"] = gflops;
    record["gemm_gflops"] = gemm;
    record["gemm_dtype"] = dtype_name(dtype);
    record["gemm_fraction"] = gflops / gemm;
  }
}

void measure_model(const Scenario& s, const Point& p, torch::Device device, json& record) {
  torch::manual_seed(static_cast<uint64_t>(s.seed));
  LanguageModel model(p.config.model);
  const Precision precision = precision_of(p.dtype());
  model->to(device, precision.params);
  model->set_compute_dtype(precision.compute);
  const bool backward = p.mode == "forward_backward";
  if (backward) model->train();
  else model->eval();
  record["parameters"] = model->parameter_count();
  // bytes: [B, T] int64
  const torch::Tensor bytes =
      torch::randint(0, 256, {p.batch(), p.length()}, torch::TensorOptions().dtype(torch::kInt64).device(device));
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
  record["attention_backend"] = model->attention_backend();
  const std::string kernels = model->attention_kernels();
  if (!kernels.empty()) record["attention_kernels"] = kernels;
}

// What measure_point derives once for a point and hands to the kind's runner.
struct PointContext {
  const Scenario& s;
  const Point& p;
  const std::string& run_dir;
  torch::Device device;
  int threads;  // set for this process
  const json* recorded_config;  // the point's config as its parent process recorded it, else null
};

// The trainer configuration of a training point: the point's typed config, writing under `out_dir`. A point that
// is not recorded yet starts over (overwrite) unless `out_dir` holds a checkpoint of this very configuration (a
// sweep killed mid-point): then it continues from there, as `train --resume` would.
TrainConfig train_config_for_point(const Point& p, const std::string& out_dir) {
  TrainConfig cfg = p.config;
  if (cfg.data.empty() && cfg.task == "enwik8") {
    throw Error("kind \"train\" needs /train/data (the enwik8 file) or a generated /train/task");
  }
  cfg.out_dir = out_dir;
  cfg.overwrite = true;
  return cfg;
}

// The fields of a training result that go into the point's record ("device": where the tensors lived).
void record_train_result(const json& result, const std::string& out_dir, json& record) {
  copy_present_keys(result,
                    {"valid_bpc", "test_bpc", "tokens_per_s", "steps", "parameters", "final_loss", "world_size",
                     "context_lens", "resumed_at_steps", "reused_from", "attention_backend", "attention_kernels",
                     "timing", "device", "evals", "task", "valid_accuracy", "test_accuracy", "accuracy_by_distance",
                     "reach"},
                    record);
  record["train_dir"] = out_dir;
  const std::string status = result.value("status", std::string("ok"));
  if (status != "ok") {
    record["status"] = "failed";
    record["reason"] = fmt::format("trainer finished with status '{}'", status);
  }
}

// Settings that change neither the trained weights nor what the result reports.
const std::vector<std::string> kReuseIgnoredKeys = {"out_dir", "log_every", "profile", "checkpoint_every"};

// A finished run under one of `runs` (run directories, e.g. of another scenario: their train/*/result.json) with
// this configuration, on the same data bytes, SIMD target and subnormal mode: its result (with "dir"), or null when
// there is none.
json find_reusable_run(const PreparedTraining& run, const std::vector<std::string>& runs) {
  // Read once: the mode is a parallel region over every intra-op thread.
  const std::string denormals = denormals_mode();
  for (const std::string& dir_of_run : runs) {
    std::error_code ec;
    std::vector<fs::path> dirs;
    for (const auto& entry : fs::directory_iterator(fs::path(dir_of_run) / "train", ec)) dirs.push_back(entry.path());
    std::sort(dirs.begin(), dirs.end());
    for (const fs::path& dir : dirs) {
      bool exists = false;
      const std::string text = read_file((dir / "result.json").string(), &exists);
      if (!exists) continue;
      const json result = json::parse(text, nullptr, false);
      if (!result.is_object() || result.value("status", std::string()) != "ok" || !result.contains("config") ||
          result.contains("reused_from")) {
        continue;  // unfinished, failed, damaged, or itself a copy (reuse the original instead)
      }
      if (!config_changes(result["config"], run.config, kReuseIgnoredKeys).empty()) continue;
      if (result.value("simd_target", std::string()) != gsa_cpu_target()) continue;
      // Flushing subnormals changes the numbers; a result without the field predates flushing, so it kept them.
      if (result.value("denormals", std::string("kept")) != denormals) continue;
      // A generated task is its configuration, compared above; enwik8 runs compare the data's bytes too.
      if (run.data && (!result.contains("data") || result["data"].value("sha256", std::string()) != run.data->sha256())) {
        continue;
      }
      json found = result;
      found["dir"] = dir.string();
      return found;
    }
  }
  return nullptr;
}

// What a reused run's record says of its CPU when its result.json predates the field.
constexpr const char* kCpuNotRecorded = "not recorded (the reused run predates the field)";

// Copies the finished run `src` into out_dir, its result marked with where it came from.
json reuse_run(const json& src, const std::string& out_dir) {
  const fs::path from = src["dir"].get<std::string>();
  fs::create_directories(out_dir);
  for (const auto& entry : fs::directory_iterator(from)) {
    // Not the source's lock file: it says who wrote there, not here.
    const fs::path name = entry.path().filename();
    if (!entry.is_regular_file() || name == "result.json" || name == ".lock") continue;
    fs::copy_file(entry.path(), fs::path(out_dir) / entry.path().filename(), fs::copy_options::overwrite_existing);
  }
  json result = src;
  result.erase("dir");
  result["reused_from"] = {{"train_dir", from.string()},
                           {"git_commit", src.value("git_commit", std::string())},
                           {"torch_version", src.value("torch_version", std::string())},
                           {"cpu", src.value("cpu", std::string(kCpuNotRecorded))}};
  write_file_atomic((fs::path(out_dir) / "result.json").string(), result.dump(2) + "\n");
  return result;
}

void measure_train(const PointContext& c, json& record) {
  const Point& p = c.p;
  const std::string out_dir = fmt::format("{}/train/{:04}", c.run_dir, p.index);
  // The config is serialised here once (or taken as the parent recorded it) and the data read once per process.
  // A handed point's recorded config lacks only where this run writes.
  std::optional<json> handed;
  if (c.recorded_config) {
    handed = *c.recorded_config;
    (*handed)["out_dir"] = out_dir;
  }
  PreparedTraining run = prepare_training(train_config_for_point(p, out_dir), c.device, c.threads, RankLayout{},
                                          handed ? &*handed : nullptr);
  const bool quiet = run.cfg.quiet;
  const json src = find_reusable_run(run, c.s.reuse_runs);
  if (!src.is_null()) {
    if (!quiet) {
      fmt::print("point {}: reusing the finished run {} (same settings, data, SIMD target and subnormal mode)\n",
                 p.index, src["dir"].get<std::string>());
    }
    const json result = reuse_run(src, out_dir);
    record_train_result(result, out_dir, record);
    // The record describes the run that made these numbers, not this process.
    record["cpu"] = result["reused_from"]["cpu"];
    if (result.contains("threads")) record["threads_used"] = result["threads"];
    return;
  }
  // The resume decision, made once: the checkpoint read for it is the one train() restores.
  std::string why;
  int64_t from = 0;
  run.checkpoint = resumable_checkpoint(out_dir, run.config, &why, &from);
  if (run.checkpoint && from > 0) {
    run.cfg.resume = true;
    run.cfg.overwrite = false;
    if (!quiet) fmt::print("point {}: continuing its training from step {} ({})\n", p.index, from, out_dir);
  } else {
    run.checkpoint.reset();
    if (!why.empty() && !quiet) fmt::print("point {}: starting over: {}\n", p.index, why);  // cannot be continued
  }
  // The whole training run, sampled every 200 ms; ranks in child processes add their CPU time when they end.
  const int64_t ranks = std::max<int64_t>(1, run.cfg.nproc);
  const int64_t per_rank =
      run.cfg.threads > 0 ? run.cfg.threads
                          : (ranks > 1 ? std::max<int64_t>(1, cpu_allowance().usable / ranks) : int64_t{c.threads});
  ContentionProbe busy(ranks * per_rank, 200);
  busy.start();
  const json result = train_local_ranks(run);  // run.cfg.nproc ranks: processes when more than one
  contention_to_json(busy.stop(), record);
  record_train_result(result, out_dir, record);
}

void measure_timed(const PointContext& c, json& record) {
  torch::manual_seed(static_cast<uint64_t>(c.s.seed));
  if (c.s.kind == ScenarioKind::attention) measure_attention(c.s, c.p, c.device, record);
  else measure_model(c.s, c.p, c.device, record);
  record["device"] = device_name(c.device);
}

// What every point needs checked before anything runs, by kind.
void check_train_point(const Scenario&, const Point& p) {
  const TrainConfig cfg = train_config_for_point(p, "check");
  validate_train_config(cfg);
  if (task_spec(cfg).active()) return;  // checks the task fields; no data file
  check_data_file(cfg.data, min_data_bytes(cfg.model.context));
}

void check_model_point(const Scenario&, const Point& p) { validate_model_config(p.config.model); }

void check_nothing(const Scenario&, const Point&) {}

// The kinds' table: how a point of each kind is checked and measured.
struct KindRow {
  ScenarioKind kind;
  void (*check)(const Scenario&, const Point&);
  void (*measure)(const PointContext&, json&);
};
constexpr KindRow kKinds[] = {
    {ScenarioKind::attention, check_nothing, measure_timed},
    {ScenarioKind::model, check_model_point, measure_timed},
    {ScenarioKind::train, check_train_point, measure_train},
};

const KindRow& kind_row(ScenarioKind kind) {
  for (const KindRow& row : kKinds) {
    if (row.kind == kind) return row;
  }
  throw Error(fmt::format("internal: no runner for scenario kind {}", kind_name(kind)));
}

}  // namespace

void check_points(const Scenario& s, const std::vector<Point>& points) {
  const KindRow& row = kind_row(s.kind);
  for (const Point& p : points) {
    if (!p.skip_reason.empty()) continue;
    try {
      row.check(s, p);
    } catch (const Error& e) {
      throw Error(fmt::format("{}: point {} ({}): {}", s.file, p.index, p.label, e.what()));
    }
  }
}

namespace {

void measure_with(const Scenario& s, const Point& p, const std::string& run_dir, const json* recorded_config,
                  json& record) {
  // Derived once here and handed down: the device, the threads, (train) the data, config and resume decision.
  const PointContext c{s, p, run_dir, resolve_device(p.config.device), set_cpu_threads(static_cast<int>(p.threads())),
                       recorded_config};
  record["threads_used"] = c.threads;
  record["omp_wait_policy"] = omp_wait_policy();
  record["simd_target"] = gsa_cpu_target();  // the CPU kernels' SIMD target (SB_CPU_TARGET pins it)
  record["denormals"] = denormals_mode();     // flushed unless SB_DENORMALS=keep: subnormals slow x86 cores
  record["cpu"] = cpu_summary();              // per point: a resumed sweep may finish on another machine
  kind_row(s.kind).measure(c, record);
}

}  // namespace

void measure_point(const Scenario& s, const Point& p, const std::string& run_dir, json& record) {
  measure_with(s, p, run_dir, nullptr, record);
}

void measure_handed_point(const Scenario& s, const Point& p, const std::string& run_dir, const json& recorded_config,
                          json& record) {
  measure_with(s, p, run_dir, &recorded_config, record);
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
  env["matmul"] = matmul_backend();  // the model's float32 CPU linear layers (fast_linear)
  env["threads_default"] = at::get_num_threads();
  env["hardware_threads"] = std::thread::hardware_concurrency();
  const CpuAllowance& cpus = cpu_allowance();
  env["usable_cpus"] = cpus.usable;  // what threads 0 resolves to
  env["affinity_cpus"] = cpus.affinity;
  env["cpu_quota"] = cpus.quota > 0.0 ? json(cpus.quota) : json(nullptr);
  env["omp_wait_policy"] = omp_wait_policy();
  env["busy_rule"] = kBusyRule;
  env["cpu"] = cpu_summary();
  env["simd_target"] = gsa_cpu_target();
  env["simd_targets_available"] = gsa_cpu_targets();
  env["denormals"] = denormals_mode();
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
