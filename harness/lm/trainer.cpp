// Trainer: AdamW with warm-up + cosine decay, clipping, periodic evaluation, atomic checkpoints and resume.
#include "harness/lm/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>
#include <thread>

#include <unistd.h>

#include <fmt/format.h>

#include "common/durable_file.h"
#include "common/error.h"
#include "common/hash.h"
#include "common/limits.h"
#include "common/run_lock.h"
#include "common/text.h"
#include "harness/parallel/process_group.h"
#include "kernels/gsa_cpu.h"
#include "harness/lm/checkpoint.h"
#include "harness/lm/data.h"
#include "harness/lm/fast_dropout.h"
#include "harness/lm/fast_linear.h"
#include "harness/lm/loss_scale.h"
#include "harness/lm/tasks.h"
#include "harness/measure/build_info.h"
#include "harness/measure/contention.h"
#include "harness/measure/device.h"
#include "harness/measure/machine.h"
#include "harness/measure/memory_tracker.h"
#include "harness/measure/op_profile.h"
#include "harness/lm/captured_step.h"
#include "harness/lm/optimizer.h"
#include "harness/measure/threads.h"
#include "common/config_changes.h"

namespace sb {

namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Where the run lives, how often it is saved or reports and what it evaluates at the end change nothing it trains:
// a resume may change them.
const std::vector<std::string> kUntrainedKeys = {"out_dir", "checkpoint_every", "log_every", "profile", "final_eval",
                                                 "lens_bytes"};

// Learning rate at optimizer step `step` (1-based): linear warm-up, then cosine decay to lr * min_lr_ratio.
// With a time budget, progress is the larger of the step and the time fraction.
double learning_rate(const TrainConfig& cfg, int64_t step, double train_s) {
  if (cfg.warmup > 0 && step <= cfg.warmup) return cfg.lr * static_cast<double>(step) / cfg.warmup;
  double progress = static_cast<double>(step - cfg.warmup) / std::max<int64_t>(1, cfg.steps - cfg.warmup);
  if (cfg.minutes > 0) progress = std::max(progress, train_s / (cfg.minutes * 60.0));
  progress = std::min(1.0, std::max(0.0, progress));
  const double cosine = 0.5 * (1.0 + std::cos(M_PI * progress));
  return cfg.lr * (cfg.min_lr_ratio + (1.0 - cfg.min_lr_ratio) * cosine);
}

struct EvalResult {
  double bpc = 0.0;
  int64_t bytes = 0;
  double seconds = 0.0;
};

// Bits per byte of the targets `windows` score, `eval_batch` windows (of one length) per pass. With a process
// group, rank r scores batches r, r + W, ... and the sums are exchanged (every rank returns the whole total).
EvalResult score_windows(LanguageModel& model, const Enwik8& data, const std::vector<EvalWindow>& windows,
                         int64_t eval_batch, ProcessGroup* pg) {
  const double t0 = now_s();
  torch::NoGradGuard no_grad;
  const bool was_training = model->is_training();
  model->eval();
  const uint8_t* bytes = data.bytes().data();
  const auto device = model->parameters().front().device();
  double nats = 0.0;
  int64_t scored = 0;
  const size_t ranks = pg ? static_cast<size_t>(pg->size()) : 1, me = pg ? static_cast<size_t>(pg->rank()) : 0;
  size_t batch_index = 0;
  for (size_t first = 0; first < windows.size(); first += static_cast<size_t>(eval_batch), ++batch_index) {
    if (batch_index % ranks != me) continue;
    const size_t count = std::min(windows.size() - first, static_cast<size_t>(eval_batch));
    const int64_t len = windows[first].len;
    auto inputs = torch::empty({static_cast<int64_t>(count), len}, torch::kInt64);
    auto targets = torch::empty({static_cast<int64_t>(count), len}, torch::kInt64);
    auto mask = torch::zeros({static_cast<int64_t>(count), len}, torch::kFloat64);
    auto in_a = inputs.accessor<int64_t, 2>();
    auto tg_a = targets.accessor<int64_t, 2>();
    auto mk_a = mask.accessor<double, 2>();
    for (size_t w = 0; w < count; ++w) {
      const EvalWindow& win = windows[first + w];
      for (int64_t t = 0; t < len; ++t) {
        in_a[w][t] = bytes[win.start + t];
        tg_a[w][t] = bytes[win.start + t + 1];
        mk_a[w][t] = t >= win.score_from ? 1.0 : 0.0;
      }
    }
    auto logits = model->forward(inputs.to(device));  // [b, len, 256]
    auto logp = torch::log_softmax(logits.to(torch::kFloat64), -1);
    auto nll = -logp.gather(2, targets.to(device).unsqueeze(2)).squeeze(2).cpu();  // [b, len]
    nats += (nll * mask).sum().item<double>();
    scored += static_cast<int64_t>(mask.sum().item<double>());
  }
  if (pg) {
    auto sums = torch::tensor({nats, static_cast<double>(scored)}, torch::kFloat64);
    pg->all_reduce_sum(sums, "the evaluation sums");
    nats = sums[0].item<double>();
    scored = std::llround(sums[1].item<double>());
  }
  if (was_training) model->train();
  EvalResult r;
  r.bytes = scored;
  r.bpc = scored ? nats / scored / std::log(2.0) : std::numeric_limits<double>::quiet_NaN();
  r.seconds = now_s() - t0;
  return r;
}

// Bits per byte over a split, each target scored once with at least half a context of history.
EvalResult evaluate(LanguageModel& model, const Enwik8& data, Split split, int64_t context, int64_t limit,
                    int64_t eval_batch, ProcessGroup* pg) {
  return score_windows(model, data, eval_windows(split, context, limit), eval_batch, pg);
}

// BPC by available context: the same `bytes` valid targets scored with only their last c bytes visible, for c in
// {16, 64, 256, context}, through the pattern's graph built at length c. The drop from c = 16 to the full context
// is how much distant context the model uses. Passes keep about eval_batch * context tokens.
json context_lens(LanguageModel& model, const Enwik8& data, int64_t context, int64_t bytes, int64_t eval_batch,
                  ProcessGroup* pg, double& seconds) {
  json out = json::array();
  for (const int64_t c : {int64_t{16}, int64_t{64}, int64_t{256}, context}) {
    if (c > context || (!out.empty() && out.back()["context"] == c)) continue;  // a context of 16, 64 or 256 once
    const auto windows = lens_windows(data.valid(), context, c, bytes);
    if (windows.empty()) break;
    const EvalResult r = score_windows(model, data, windows, eval_batch * std::max<int64_t>(1, context / c), pg);
    out.push_back({{"context", c}, {"bpc", r.bpc}, {"bytes", r.bytes}});
    seconds += r.seconds;
  }
  return out;
}

// Metrics are records: every line is checked and fsync'd, so a full disk stops the run with a message.
void append_line(const std::string& path, const json& record) { append_line_durable(path, record.dump()); }

// Keeps only the records of steps <= `step` (a resumed run rewrites what came after its checkpoint).
void truncate_metrics(const std::string& path, int64_t step) {
  std::ifstream in(path);
  if (!in) return;
  std::string kept, line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    json r = json::parse(line, nullptr, false);
    if (r.is_discarded()) continue;  // a line cut short by a crash
    // The end-of-run lines (final evaluation, context lens) are written again by the resumed run.
    const std::string kind = r.value("kind", "");
    if (r.value("step", int64_t{0}) <= step && kind != "final" && kind != "lens") kept += line + '\n';
  }
  in.close();
  write_file_atomic(path, kept);
}

// A run without --resume starts in a directory holding no earlier run, unless --overwrite replaces it (the
// old checkpoint and result go first, so nothing of the old run can be mistaken for the new one).
void start_fresh(const std::string& dir, const std::vector<std::string>& files, bool overwrite) {
  for (const std::string& f : files) {
    std::error_code ec;
    const bool held = fs::exists(f, ec) && (!fs::is_regular_file(f, ec) || fs::file_size(f, ec) > 0);
    if (!held) continue;
    if (!overwrite) {
      throw Error(fmt::format("--out {} already holds a run ({}); pass --resume to continue it, --overwrite to "
                              "replace it, or choose another --out",
                              dir, fs::path(f).filename().string()));
    }
    fs::remove(f, ec);
    if (ec) throw Error(fmt::format("--overwrite: cannot remove '{}': {}", f, ec.message()));
  }
}

// The --profile split of a step: operator self times by category (forward and backward), the time outside any
// operator (autograd and model glue), the optimizer and data. Prints one line unless quiet.
json profile_report(const OpProfile& prof, double fwd_s, double bwd_s, double opt_s, double data_s, int64_t steps,
                    bool quiet) {
  const double step_total = fwd_s + bwd_s + opt_s + data_s;
  json out = {{"optimizer_s", opt_s}, {"data_s", data_s}, {"steps", steps}};
  double in_ops[OpProfile::kPhases] = {0.0, 0.0};
  for (int c = 0; c < OpProfile::kCategories; ++c) {
    const std::string name = OpProfile::category_name(c);
    out[name + "_forward_s"] = prof.seconds(0, c);
    out[name + "_backward_s"] = prof.seconds(1, c);
    out[name + "_fraction"] = step_total > 0 ? prof.seconds(c) / step_total : 0.0;
    in_ops[0] += prof.seconds(0, c), in_ops[1] += prof.seconds(1, c);
  }
  out["outside_ops_s"] = std::max(0.0, fwd_s - in_ops[0]) + std::max(0.0, bwd_s - in_ops[1]);
  if (!quiet) {
    const double n = static_cast<double>(std::max<int64_t>(1, steps));
    std::string line = "profile (ms per step, share of the step):";
    auto add = [&](const std::string& name, double s) {
      line += fmt::format(" {} {:.1f} ({:.0f}%) |", name, 1e3 * s / n, step_total > 0 ? 100.0 * s / step_total : 0.0);
    };
    for (int c = 0; c < OpProfile::kCategories; ++c) add(OpProfile::category_name(c), prof.seconds(c));
    add("outside ops", out["outside_ops_s"].get<double>());
    add("optimizer+clip", opt_s);
    add("data", data_s);
    line.pop_back();
    fmt::print("{}\n", line);
  }
  return out;
}

// A lower bound on what training `c` allocates: weights, gradients and two AdamW moments (4 floats per
// parameter), plus each layer's activations kept for backward and the logits. Refuses, naming the options,
// only what cannot fit in this machine's memory at all, before anything is allocated.
void check_training_memory(const TrainConfig& c, int ranks_here) {
  const ModelConfig& m = c.model;
  const double d = static_cast<double>(m.dim), f = static_cast<double>(m.ffn), l = static_cast<double>(m.layers);
  const double params = 512.0 * d + l * (4.0 * d * d + 2.0 * d * f) + (m.positions == "absolute" ? m.context * d : 0.0);
  const double tokens = static_cast<double>(std::max(c.batch, c.eval_batch)) * static_cast<double>(m.context);
  // Parameters, gradients and moments stay float32 under bfloat16/float16 compute; activations shrink.
  const double per_weight = c.dtype == "float64" ? 8.0 : 4.0;
  const double per_value = c.dtype == "float64" ? 8.0 : c.dtype == "float32" ? 4.0 : 2.0;
  const double bytes =
      ranks_here * (per_weight * 4.0 * params + per_value * tokens * (l * (4.0 * d + f) + 256.0));
  const int64_t have = physical_memory_bytes();
  if (have > 0 && bytes > static_cast<double>(have)) {
    throw Error(fmt::format(
        "--layers {} --dim {} --ffn {} --batch {} (--eval-batch {}) --context {} --dtype {} on {} rank(s) here need at "
        "least {:.1f} GiB, more than this machine's {:.1f} GiB of memory; make them smaller",
        m.layers, m.dim, m.ffn, c.batch, c.eval_batch, m.context, c.dtype, ranks_here, bytes / double(1 << 30),
        static_cast<double>(have) / double(1 << 30)));
  }
}

// Runs `step` on every rank; when it throws on any of them, every rank stops: those that failed with their own
// error, the others with one naming `what` (so no rank waits in a collective for a peer that has given up).
template <typename F>
void on_all_ranks(ProcessGroup* pg, const std::string& what, F&& step) {
  if (!pg) {
    step();
    return;
  }
  std::exception_ptr failed;
  try {
    step();
  } catch (...) {
    failed = std::current_exception();
  }
  auto flag = torch::tensor({failed ? 1.0 : 0.0}, torch::kFloat64);
  pg->all_reduce_sum(flag, "the agreement after " + what);
  if (failed) std::rethrow_exception(failed);
  if (flag.item<double>() > 0) {
    throw Error(fmt::format("rank {} of {}: stopping: another rank failed {} (see its message)", pg->rank(),
                            pg->size(), what));
  }
}

// Sets the dropout shard for one run and restores one-process masks afterwards (train() may run many times).
struct DropoutShard {
  explicit DropoutShard(int64_t shard) { set_dropout_shard(shard); }
  ~DropoutShard() { set_dropout_shard(0); }
};

}  // namespace

json train(const TrainConfig& cfg_in, const RankLayout& layout) {
  const double t_start = now_s();
  TrainConfig cfg = cfg_in;
  const bool lead = layout.rank == 0;
  const int world = layout.world_size;
  if (layout.distributed()) {
    if (cfg.nproc != 1 && cfg.nproc != world) {
      throw Error(fmt::format("--nproc {} differs from the world size {} of the {}; leave --nproc out there",
                              cfg.nproc, world, layout.source));
    }
    std::string why;
    if (!process_group_available(cfg.device, &why)) {
      throw Error(fmt::format("world size {} ({}): {}", world, layout.source, why));
    }
    cfg.nproc = world;  // recorded: the ranks that ran, however they were started
    if (!lead) cfg.quiet = true;
  } else if (cfg.nproc > 1) {
    throw Error(fmt::format("--nproc {}: this process is one rank; start the ranks with `sparsebench train --nproc {}`, "
                            "torchrun or srun",
                            cfg.nproc, cfg.nproc));
  }
  const TaskSpec task = task_spec(cfg);  // a generated task: no data file (refused with one), before anything is written
  if (!task.active() && cfg.data.empty()) {
    throw Error(
        "no training data: pass --data PATH to an enwik8 file (download it with scripts/fetch_enwik8.sh, or use "
        "the 4 MB prefix shared/data/enwik8-head.bin), or --task NAME for a generated task");
  }
  validate_model_config(cfg.model);  // option ranges were checked where the config was read (CLI, scenario)
  check_training_memory(cfg, layout.local_world_size);
  torch::Device device = resolve_device(cfg.device);  // refuses before anything is written
  if (device.is_cuda() && layout.distributed()) {
    device = torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(layout.local_rank % torch::cuda::device_count()));
  }
  int64_t want_threads = cfg.threads;  // 0: the cores this process may use, split between the ranks on this machine
  if (want_threads == 0 && layout.distributed()) {
    want_threads = std::max<int64_t>(1, cpu_allowance().usable / layout.local_world_size);
  }
  const int threads = set_cpu_threads(static_cast<int>(want_threads));
  MemoryTracker::install();  // large blocks kept for reuse, as in `run` and `bench` (host_large_blocks)
  const auto [dtype, compute] = precision_of(cfg.dtype);  // of the parameters, of the matmuls and attention
  std::optional<Enwik8> data;
  if (!task.active()) data.emplace(cfg.data, min_data_bytes(cfg.model.context));
  std::unique_ptr<ProcessGroup> pg;
  if (layout.distributed()) {
    pg = std::make_unique<ProcessGroup>(layout, device,
                                        std::chrono::milliseconds(static_cast<int64_t>(cfg.dist_timeout * 1000.0)));
  }
  const DropoutShard dropout_shard(layout.rank);

  const std::string metrics_path = (fs::path(cfg.out_dir) / "metrics.jsonl").string();
  const std::string ckpt_path = (fs::path(cfg.out_dir) / "checkpoint.pt").string();
  const std::string result_path = (fs::path(cfg.out_dir) / "result.json").string();

  // Only rank 0 writes; the others wait for its verdict on --out.
  std::optional<RunDirLock> out_lock;  // rank 0's, held until train() returns
  on_all_ranks(pg.get(), "preparing --out", [&] {
    if (!lead) return;
    std::error_code ec;
    fs::create_directories(cfg.out_dir, ec);
    if (ec) throw Error(fmt::format("--out: cannot create directory '{}': {}", cfg.out_dir, ec.message()));
    // One writer per run directory, before --resume attaches to a checkpoint or --overwrite replaces anything.
    out_lock.emplace(cfg.out_dir, "--out");
    if (cfg.resume && !fs::exists(ckpt_path)) {
      throw Error(fmt::format("--resume: no checkpoint '{}' to resume from (run without --resume first)", ckpt_path));
    }
    if (!cfg.resume) {
      start_fresh(cfg.out_dir, {metrics_path, ckpt_path, result_path}, cfg.overwrite);
      write_file_atomic(metrics_path, "");
    }
  });

  // Paired runs: weights from per-parameter streams of the seed, and the dropout stream started after the model
  // exists, so every pattern trained with one seed starts from the same shared weights and masks.
  LanguageModel model(cfg.model);
  model->reset_parameters(static_cast<uint64_t>(cfg.seed));
  torch::manual_seed(cfg.seed);
  model->to(device, dtype);
  model->set_compute_dtype(compute);
  model->train();
  LossScale loss_scale(compute == torch::kFloat16);
  OpProfile op_profile;  // counts only while started, under --profile

  // Weight decay on matrices only (not on biases, norms, embeddings or relation tables).
  std::vector<torch::Tensor> decay, no_decay;
  for (const auto& item : model->named_parameters()) {
    const bool is_matrix = item.value().dim() == 2 && item.key().find("embed") == std::string::npos &&
                           item.key().find("rel_emb") == std::string::npos &&
                           item.key().find("pos_emb") == std::string::npos;
    (is_matrix ? decay : no_decay).push_back(item.value());
  }
  auto adamw = [&](double wd) {
    return std::make_unique<torch::optim::AdamWOptions>(
        torch::optim::AdamWOptions(cfg.lr).betas({cfg.beta1, cfg.beta2}).weight_decay(wd).eps(1e-8));
  };
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(decay, adamw(cfg.weight_decay));
  groups.emplace_back(no_decay, adamw(0.0));
  torch::optim::AdamW optimizer(groups, torch::optim::AdamWOptions(cfg.lr));
  AdamWStepper stepper(optimizer);  // fused where LibTorch has it (SB_OPTIMIZER chooses)

  std::mt19937_64 rng(cfg.seed);
  int64_t step = 0;
  double train_s = 0.0;
  json evals = json::array();
  json config_history = json::array();  // settings changed at resumes (--allow-changes)
  json resumes = json::array();         // the steps this run was resumed at
  json resumed_state = json::object();  // the checkpoint's running figures (progress line, last loss)
  const json config = train_config_json(cfg);
  // Every rank loads rank 0's checkpoint (--out must be shared between machines).
  if (cfg.resume) on_all_ranks(pg.get(), "loading the checkpoint", [&] {
    if (!fs::exists(ckpt_path)) {
      throw Error(fmt::format("--resume: no checkpoint '{}' to resume from (run without --resume first)", ckpt_path));
    }
    TrainState st = load_checkpoint(ckpt_path, *model, optimizer);
    const json saved_config = st.info.value("config", json::object());
    const json saved_model = saved_config.value("model", json::object());
    if (saved_model != config["model"]) {
      throw Error(fmt::format("--resume: checkpoint '{}' was written for a different model: {}", ckpt_path,
                              describe_changes(config_changes(saved_model, config["model"]))));
    }
    const auto changes = config_changes(saved_config, config, kUntrainedKeys);
    refuse_changes(changes, cfg.allow_changes, "--resume", ckpt_path);
    config_history = st.info.value("config_changes", json::array());
    if (!changes.empty()) {
      config_history.push_back({{"at_step", st.step}, {"previous", saved_config}, {"changed", changes_json(changes)}});
    }
    step = st.step;
    train_s = st.train_s;
    resumes = st.info.value("resumes", json::array());
    resumes.push_back(step);
    std::istringstream rng_text(st.data_rng);
    rng_text >> rng;
    if (rng_text.fail()) {
      throw Error(fmt::format("checkpoint '{}' is damaged (/meta/data_rng is not a random engine state); delete it or "
                              "drop --resume to start over",
                              ckpt_path));
    }
    evals = st.info.value("evals", json::array());
    resumed_state = st.info.value("progress", json::object());
    if (st.info.contains("loss_scale")) loss_scale.restore(st.info["loss_scale"]);
    if (lead) truncate_metrics(metrics_path, step);
  });

  // Every rank starts from rank 0's weights (the seed makes them equal; this makes it certain), and the ranks are
  // recorded.
  json ranks = json::array();
  const json me = {{"rank", layout.rank}, {"local_rank", layout.local_rank}, {"host", host_name()},
                   {"threads", threads}, {"device", device_name(device)}};
  std::optional<GradientBuckets> buckets;
  if (pg) {
    std::vector<torch::Tensor> weights;
    for (const auto& p : model->parameters()) weights.push_back(p.detach());
    pg->broadcast(weights, 0, "the initial weight broadcast");
    for (const std::string& r : pg->all_gather_text("rank_info", me.dump())) ranks.push_back(json::parse(r));
    buckets.emplace(model->parameters());
  } else {
    ranks.push_back(me);
  }
  const json distributed = {{"world_size", world},
                            {"backend", pg ? pg->backend() : "none"},
                            {"launch", layout.source},
                            {"bucket_count", buckets ? buckets->count() : 0},
                            {"ranks", ranks}};

  const auto& sg = model->sequence_graph(cfg.model.context);
  const int64_t n_edges = sg.graph.col.defined() ? sg.graph.col.numel() : sg.n_tokens * (sg.n_tokens + 1) / 2;
  json graph_info = {{"n_tokens", sg.n_tokens}, {"n_nodes", sg.n_nodes}, {"n_edges", n_edges},
                     {"fingerprint", sg.fingerprint}};
  json provenance = task.active() ? task_json(task) : data->provenance();
  if (!cfg.quiet) {
    fmt::print("train: {} parameters, pattern {} {} ({} nodes, {} edges at context {}), {}, {} threads\n",
               model->parameter_count(), config["model"]["pattern"].get<std::string>(),
               json(model->resolved_params()).dump(), sg.n_nodes, n_edges, cfg.model.context, cfg.dtype, threads);
    if (pg) {
      fmt::print("train: {} ranks over {} ({}), {} windows per rank, {} per step\n", world, pg->backend(),
                 layout.source, cfg.batch, cfg.batch * world);
    }
    if (task.active()) {
      fmt::print("train: task {} (chance {:.4f}), scored on answer positions\n", provenance.dump(), task_chance(task));
    } else {
      fmt::print("train: data {} ({} bytes, sha256 {}), split train {} / valid {} / test {}\n", data->path(),
                 data->size(), data->sha256(), data->train().size(), data->valid().size(), data->test().size());
    }
    if (step > 0) fmt::print("train: resumed from {} at step {}\n", ckpt_path, step);
    std::fflush(stdout);
  }

  double interval_loss = resumed_state.value("interval_loss", 0.0);
  double interval_train_s = resumed_state.value("interval_train_s", 0.0);
  int64_t interval_steps = resumed_state.value("interval_steps", int64_t{0});
  const json saved_loss = resumed_state.value("last_loss", json(nullptr));
  double last_loss = saved_loss.is_number() ? saved_loss.get<double>() : std::numeric_limits<double>::quiet_NaN();

  auto save = [&]() {
    if (!lead) return 0.0;
    const double t0 = now_s();
    TrainState st;
    st.step = step;
    st.train_s = train_s;
    std::ostringstream r;
    r << rng;
    st.data_rng = r.str();
    // The progress line's running sums, so the first line after a resume covers the same steps as without it.
    st.info = {{"config", config},
               {"evals", evals},
               {"config_changes", config_history},
               {"resumes", resumes},
               {"progress", {{"interval_loss", interval_loss},
                             {"interval_train_s", interval_train_s},
                             {"interval_steps", interval_steps},
                             {"last_loss", std::isfinite(last_loss) ? json(last_loss) : json(nullptr)}}}};
    if (loss_scale.enabled) st.info["loss_scale"] = loss_scale.state();
    save_checkpoint(ckpt_path, *model, optimizer, st);
    return now_s() - t0;
  };

  const double budget_s = cfg.minutes * 60.0;
  const int64_t window = cfg.model.context + 1;
  const int64_t tokens_per_step = cfg.batch * world * cfg.model.context;
  std::string status = "ok";
  double eval_s = 0.0, checkpoint_s = 0.0;
  double fwd_s = 0.0, bwd_s = 0.0, opt_s = 0.0, data_s = 0.0, comm_s = 0.0;
  auto log_record = [&](const json& record) {
    if (lead) append_line(metrics_path, record);
  };
  int64_t steps_this_run = 0;
  // On CUDA in one process a step enqueues its work and returns: its loss stays on the device until a log, eval or
  // checkpoint step (or the last) reads the pending losses at once, so the host never waits inside a step. With
  // ranks (the loss is all-reduced with the gradients) or on the CPU every step is read at once, as before.
  // SB_DEFER_LOSS_READS=1 defers on the CPU too, so the tests cover this path without a GPU.
  const char* defer_env = std::getenv("SB_DEFER_LOSS_READS");
  const bool defer_reads = !pg && (device.is_cuda() || (defer_env && std::string(defer_env) == "1"));
  const bool sync_sections = cfg.profile && device.is_cuda();  // sections end when their kernels have run
  auto device_sync = [&] {
    if (device.is_cuda()) torch::cuda::synchronize(device.index() < 0 ? -1 : device.index());
  };
  std::vector<std::pair<int64_t, torch::Tensor>> pending;  // (step, loss on the device) not yet read
  // SB_CUDA_GRAPHS=1: after kCaptureAfter steps of this process, the step (forward, backward, clipping, fused AdamW)
  // is captured once as a CUDA graph and replayed with the batch and learning rate in device tensors. Where it
  // cannot be, the reason is recorded and the steps run as before.
  constexpr int64_t kCaptureAfter = 3;
  const char* graphs_env = std::getenv("SB_CUDA_GRAPHS");
  const bool want_graphs = graphs_env && std::string(graphs_env) == "1";
  std::string graphs_why;
  if (want_graphs) {
    if (!device.is_cuda()) graphs_why = "CUDA graphs need --device cuda";
    else if (pg) graphs_why = "not with data-parallel ranks (the gradient exchange runs on the host)";
    else if (loss_scale.enabled) graphs_why = "not with float16 loss scaling (its skip decision is read on the host)";
    else if (cfg.profile) graphs_why = "not under --profile (its sections synchronise)";
    else if (cfg.model.dropout > 0) graphs_why = "not with dropout (its masks are seeded from the host each step)";
    else if (stepper.name() != "fused") graphs_why = "needs the fused AdamW (its learning rate as a device tensor)";
    else if (task.active()) graphs_why = "not with a generated task (its answer positions change each step)";
    else if (!CapturedStep::available()) graphs_why = "this build's LibTorch has no CUDA graphs";
  }
  CapturedStep captured;
  torch::Tensor static_batch, static_loss, device_lr;
  bool diverged = false;
  // Takes the loss of step `at`: a non-finite one stops the run there; false then.
  auto take_loss = [&](int64_t at, double v) {
    last_loss = v;
    if (std::isfinite(v)) {
      interval_loss += v;
      return true;
    }
    diverged = true;
    status = "diverged";
    step = at - 1;  // the steps after it (enqueued before the read) do not count
    if (!cfg.quiet) fmt::print("train: step {}: loss is {}, stopping (status diverged)\n", at, v);
    log_record({{"kind", "diverged"}, {"step", at}, {"loss", v}});
    return false;
  };
  // Reads the pending losses in one copy and takes them in order, as per-step reads would.
  auto read_pending = [&] {
    if (pending.empty()) return;
    std::vector<torch::Tensor> values;
    for (auto& [s, l] : pending) values.push_back(l.to(torch::kFloat64).reshape({}));
    const torch::Tensor host = torch::stack(values).cpu();
    const double* v = host.data_ptr<double>();
    for (size_t i = 0; i < pending.size(); ++i) {
      if (!take_loss(pending[i].first, v[i])) break;
    }
    pending.clear();
  };

  while (step < cfg.steps && !(budget_s > 0 && train_s >= budget_s)) {
    const double t0 = now_s();
    const double lr = learning_rate(cfg, step + 1, train_s);
    for (auto& group : optimizer.param_groups()) group.options().set_lr(lr);
    // A task's step is a function of (seed, step): nothing to restore at a resume.
    const TaskBatch tb = task.active() ? task_batch(task, cfg.seed, TaskSplit::train, step, cfg.batch * world,
                                                    layout.rank * cfg.batch, cfg.batch)
                                       : TaskBatch{};
    const torch::Tensor host_batch =
        task.active() ? tb.tokens
                      : sample_windows(*data, data->train(), cfg.batch * world, window, rng, layout.rank * cfg.batch,
                                       cfg.batch);
    if (want_graphs && graphs_why.empty() && !captured.ready() && steps_this_run >= kCaptureAfter) {
      // Static inputs and gradients exist before the capture, so every replay reads and writes the same memory.
      static_batch = host_batch.to(device);
      device_lr = torch::full({}, lr, torch::TensorOptions().dtype(torch::kFloat32).device(device));
      const std::vector<torch::Tensor> params = model->parameters();
      for (const auto& p : params) {
        if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
      }
      captured.capture(
          device,
          [&] {
            for (const auto& p : params) p.grad().zero_();
            auto logits = model->forward(static_batch.slice(1, 0, cfg.model.context));
            static_loss = torch::nn::functional::cross_entropy(logits.reshape({-1, 256}),
                                                               static_batch.slice(1, 1, window).reshape({-1}));
            static_loss.backward();
            if (cfg.clip > 0) clip_grad_norm_no_sync(params, cfg.clip);
            stepper.step(device_lr);
          },
          &graphs_why);
      if (captured.ready()) captured.replay();  // the capture only recorded the step: this runs it
    } else if (captured.ready()) {
      static_batch.copy_(host_batch.pin_memory(), /*non_blocking=*/true);
      device_lr.fill_(lr);
      captured.replay();
      stepper.advance_host_steps();
    }
    double t1, t2, t3, t3c;
    if (captured.ready()) {  // forward, backward and the update ran in the graph
      pending.emplace_back(step + 1, static_loss.detach().clone());
      t1 = t2 = t3 = t3c = now_s();
    } else {
      // Pinned and asynchronous on CUDA: a pageable copy would wait for the device's queue to drain.
      auto batch = device.is_cuda() ? host_batch.pin_memory().to(device, /*non_blocking=*/true) : host_batch.to(device);
      auto inputs = batch.slice(1, 0, cfg.model.context);
      auto targets = batch.slice(1, 1, window);
      if (sync_sections) device_sync();
      t1 = now_s();
      if (cfg.profile) op_profile.start(0);
      auto logits = model->forward(inputs);
      auto loss =
          task.active()
              ? task_loss(logits, targets, device.is_cuda() ? tb.answer.pin_memory().to(device, true) : tb.answer)
              : torch::nn::functional::cross_entropy(logits.reshape({-1, 256}), targets.reshape({-1}));
      double loss_v = defer_reads ? 0.0 : loss.item<double>();
      op_profile.stop();
      if (sync_sections) device_sync();
      t2 = now_s();
      optimizer.zero_grad();
      if (cfg.profile) op_profile.start(1);
      if (defer_reads || std::isfinite(loss_v)) (loss_scale.enabled ? loss * loss_scale.scale : loss).backward();
      op_profile.stop();
      if (sync_sections) device_sync();
      t3 = now_s();
      if (pg) {  // the mean gradient and loss over the ranks (equal shares of the global batch), in one exchange
        auto loss_sum = torch::tensor({loss_v}, torch::kFloat64);
        buckets->average(*pg, {loss_sum});
        loss_v = loss_sum.item<double>() / world;
      }
      t3c = now_s();
      if (defer_reads) {
        pending.emplace_back(step + 1, loss.detach());
      } else if (!take_loss(step + 1, loss_v)) {
        break;
      }
      // After the all-reduce every rank holds the same gradients, so all take the same skip decision.
      if (loss_scale.unscale_and_check(model->parameters())) {
        if (cfg.clip > 0) clip_grad_norm_no_sync(model->parameters(), cfg.clip);
        stepper.step();
      } else {
        log_record({{"kind", "skipped"}, {"step", step + 1}, {"loss_scale", loss_scale.scale}});
      }
    }
    if (sync_sections) device_sync();
    const double t4 = now_s();
    comm_s += t3c - t3;
    data_s += t1 - t0, fwd_s += t2 - t1, bwd_s += t3 - t2, opt_s += t4 - t3c;
    train_s += t4 - t0;
    if (pg && budget_s > 0) {  // the time budget is rank 0's clock, so every rank stops at the same step
      std::vector<torch::Tensor> clock{torch::tensor({train_s}, torch::kFloat64)};
      pg->broadcast(clock, 0, "the training-time broadcast");
      train_s = clock[0].item<double>();
    }
    ++step;
    ++steps_this_run;
    interval_train_s += t4 - t0;
    ++interval_steps;

    const bool last = step >= cfg.steps || (budget_s > 0 && train_s >= budget_s);
    const bool logs = step % cfg.log_every == 0 || last;
    const bool evals_now = cfg.eval_every > 0 && (step % cfg.eval_every == 0 || last);
    const bool saves = cfg.checkpoint_every > 0 && step % cfg.checkpoint_every == 0;
    const bool stops = cfg.stop_after > 0 && steps_this_run >= cfg.stop_after && !last;
    if (!pending.empty() && (logs || evals_now || saves || stops)) {
      // The wait for the queued steps belongs to the training time of the interval that queued them.
      const double w0 = now_s();
      read_pending();
      const double waited = now_s() - w0;
      train_s += waited;
      interval_train_s += waited;
      if (diverged) break;
    }
    if (logs) {
      const double mean_loss = interval_loss / interval_steps;
      const double tps = interval_steps * tokens_per_step / std::max(1e-9, interval_train_s);
      const double per_step = interval_train_s / interval_steps;
      double eta = (cfg.steps - step) * per_step;
      if (budget_s > 0) eta = std::min(eta, budget_s - train_s);
      // batch_fnv: a digest of this step's windows (rank 0's rows), so paired runs can be checked to share data.
      const torch::Tensor rows = host_batch.contiguous();
      log_record({{"kind", "train"},
                  {"step", step},
                  {"loss", mean_loss},
                  {task.active() ? "answer_loss" : "bpc", task.active() ? mean_loss : mean_loss / std::log(2.0)},
                  {"lr", lr},
                  {"tokens_per_s", tps},
                  {"train_s", train_s},
                  {"batch_fnv", fmt::format("{:016x}", fnv1a64(rows.data_ptr(), rows.nbytes()))}});
      if (!cfg.quiet) {
        fmt::print("step {:>6}  loss {:.4f}  {} {:.4f}  lr {:.2e}  {:.0f} tok/s  elapsed {}  eta {}\n", step,
                   mean_loss, task.active() ? "answer loss" : "bpc", task.active() ? mean_loss : mean_loss / std::log(2.0),
                   lr, tps, format_duration(train_s), format_duration(eta));
        std::fflush(stdout);
      }
      interval_loss = interval_train_s = 0.0;
      interval_steps = 0;
    }
    // The last step is evaluated too, so every learning curve ends where training did (on the same bytes).
    if (evals_now && task.active()) {
      const double te = now_s();
      json rec = task_evaluate(model, task, static_cast<uint64_t>(cfg.seed), TaskSplit::valid, cfg.task_eval,
                               cfg.eval_batch, pg.get());
      rec.erase("by_distance");
      eval_s += now_s() - te;
      rec.update(json{{"kind", "eval"}, {"step", step}, {"train_s", train_s}});
      evals.push_back(rec);
      log_record(rec);
      if (!cfg.quiet) fmt::print("eval  {:>6}  valid accuracy {}\n", step, rec["accuracy"].dump());
    } else if (evals_now) {
      const EvalResult r =
          evaluate(model, *data, data->valid(), cfg.model.context, cfg.eval_bytes, cfg.eval_batch, pg.get());
      eval_s += r.seconds;
      json rec = {{"kind", "eval"}, {"split", "valid"}, {"step", step}, {"bpc", r.bpc},
                  {"bytes", r.bytes}, {"train_s", train_s}};
      evals.push_back(rec);
      log_record(rec);
      if (!cfg.quiet) {
        fmt::print("eval  {:>6}  valid bpc {:.4f} ({} bytes, {:.1f} s)\n", step, r.bpc, r.bytes, r.seconds);
        std::fflush(stdout);
      }
    }
    if (saves) checkpoint_s += save();
    if (stops) {
      status = "stopped";
      break;
    }
  }

  json result = {{"config", config},
                 {"data", provenance},
                 {"graph", graph_info},
                 {"parameters", model->parameter_count()},
                 {"pattern_params", model->resolved_params()},
                 {"steps", step},
                 {"status", status},
                 {"final_loss", std::isfinite(last_loss) ? json(last_loss) : json(nullptr)},
                 {"threads", threads},
                 {"world_size", world},
                 {"distributed", distributed},
                 {"device", device_name(model->parameters().front().device())},
                 {"simd_target", gsa_cpu_target()},  // the CPU kernels' target (SB_CPU_TARGET pins it)
                 {"host_large_blocks", MemoryTracker::large_blocks()},
                 {"cpu", cpu_summary()},
                 {"attention_backend", model->attention_backend()},
                 // the linear layers' products: fast_linear's library for float32 on the CPU, else LibTorch's
                 {"matmul", model->parameters().front().device().is_cpu() && compute == torch::kFloat32
                                ? matmul_backend()
                                : std::string("libtorch")},
                 {"precision", {{"parameters", dtype_name(dtype)}, {"compute", dtype_name(compute)}}},
                 {"optimizer", "adamw:" + stepper.name()},
                 {"cuda_graphs", want_graphs ? (captured.ready() ? json("captured") : json(graphs_why)) : json("off")},
                 {"git_commit", git_commit()},
                 {"torch_version", libtorch_version()},
                 {"evals", evals},
                 {"resumed_at_steps", resumes}};
  if (loss_scale.enabled) result["precision"]["loss_scale"] = loss_scale.state();
  if (!config_history.empty()) result["config_changes"] = config_history;
  if (status == "stopped") return result;  // as if killed: the checkpoint is the only trace
  if (status == "ok") checkpoint_s += save();

  json valid_bpc = nullptr, test_bpc = nullptr;
  if (task.active()) {  // accuracy on answers, by distance, beside the graph's reach; never a BPC
    result["task"] = task_json(task);
    result["reach"] = task_reach(cfg, task);
  }
  if (status == "ok" && cfg.final_eval && task.active()) {
    const double te = now_s();
    const json v = task_evaluate(model, task, static_cast<uint64_t>(cfg.seed), TaskSplit::valid, cfg.task_eval,
                                 cfg.eval_batch, pg.get());
    const json t = task_evaluate(model, task, static_cast<uint64_t>(cfg.seed), TaskSplit::test, cfg.task_eval,
                                 cfg.eval_batch, pg.get());
    eval_s += now_s() - te;
    result["valid_accuracy"] = v["accuracy"];
    result["test_accuracy"] = t["accuracy"];
    result["accuracy_by_distance"] = t["by_distance"];
    log_record({{"kind", "final"}, {"step", step}, {"valid", v}, {"test", t}});
    if (!cfg.quiet) fmt::print("final  valid accuracy {}  test accuracy {}\n", v["accuracy"].dump(), t["accuracy"].dump());
  } else if (status == "ok" && cfg.final_eval) {
    const EvalResult v = evaluate(model, *data, data->valid(), cfg.model.context, 0, cfg.eval_batch, pg.get());
    const EvalResult t = evaluate(model, *data, data->test(), cfg.model.context, 0, cfg.eval_batch, pg.get());
    eval_s += v.seconds + t.seconds;
    valid_bpc = v.bpc;
    test_bpc = t.bpc;
    log_record({{"kind", "final"}, {"step", step}, {"valid_bpc", v.bpc}, {"valid_bytes", v.bytes},
                               {"test_bpc", t.bpc}, {"test_bytes", t.bytes}});
    if (!cfg.quiet) fmt::print("final  valid bpc {:.4f}  test bpc {:.4f}\n", v.bpc, t.bpc);
    if (cfg.lens_bytes > 0) {
      const json lens = context_lens(model, *data, cfg.model.context, cfg.lens_bytes, cfg.eval_batch, pg.get(), eval_s);
      result["context_lens"] = lens;
      log_record({{"kind", "lens"}, {"step", step}, {"context_lens", lens}});
      if (!cfg.quiet && !lens.empty()) {
        std::string line = "lens   valid bpc seeing the last";
        for (const json& l : lens) line += fmt::format("  {} bytes: {:.4f}", l["context"].get<int64_t>(), l["bpc"].get<double>());
        fmt::print("{}\n", line);
      }
    }
  }
  if (!task.active()) result["valid_bpc"] = valid_bpc, result["test_bpc"] = test_bpc;
  result["tokens_per_s"] = train_s > 0 ? step * tokens_per_step / train_s : 0.0;
  json timing = {{"train_s", train_s},
                 {"eval_s", eval_s},
                 {"checkpoint_s", checkpoint_s},
                 {"total_s", now_s() - t_start},
                 {"this_run", {{"steps", steps_this_run},
                               {"data_s", data_s},
                               {"forward_s", fwd_s},
                               {"backward_s", bwd_s},
                               {"allreduce_s", comm_s},
                               {"optimizer_s", opt_s}}}};
  if (cfg.profile) timing["profile"] = profile_report(op_profile, fwd_s, bwd_s, opt_s, data_s, steps_this_run, cfg.quiet);
  result["timing"] = timing;
  if (lead) write_file_atomic(result_path, result.dump(2) + "\n");
  return result;
}

int64_t resumable_step(const TrainConfig& cfg, std::string* why) {
  const std::string path = (fs::path(cfg.out_dir) / "checkpoint.pt").string();
  std::error_code ec;
  why->clear();
  if (!fs::is_regular_file(path, ec)) return -1;  // nothing to continue, nothing to explain
  try {
    const CheckpointBody body = read_checkpoint(path);
    const json saved = body.meta.value("info", json::object()).value("config", json::object());
    const auto changes = config_changes(saved, train_config_json(cfg), kUntrainedKeys);
    if (!changes.empty()) {
      *why = fmt::format("checkpoint '{}' has other settings: {}", path, describe_changes(changes));
      return -1;
    }
    const json step = body.meta.value("step", json());
    if (!step.is_number_unsigned()) throw Error(fmt::format("checkpoint '{}' is damaged (/meta/step)", path));
    return step.get<int64_t>();
  } catch (const Error& e) {
    *why = e.what();
    return -1;
  }
}

std::vector<std::string> train_command_args(const TrainConfig& cfg) {
  std::vector<std::string> args;
  for (const auto& [flag, value] : train_config_options(cfg)) {
    const FieldSpec* f = nullptr;
    for (const FieldSpec& x : config_fields()) {
      if (x.flag == flag) f = &x;
    }
    args.push_back("--" + flag);
    if (!f || !f->is_switch()) args.push_back(value);
  }
  return args;
}

json train_local_ranks(const TrainConfig& cfg) {
  if (cfg.nproc <= 1) return train(cfg);
  std::vector<std::string> argv = {"sparsebench", "train"};
  for (std::string& a : train_command_args(cfg)) argv.push_back(std::move(a));
  const int rc = run_local_ranks(argv, static_cast<int>(cfg.nproc));
  const std::string result_path = (fs::path(cfg.out_dir) / "result.json").string();
  if (rc != 0) {
    throw Error(fmt::format("training with {} ranks failed (exit status {}; see the ranks' messages above)",
                            cfg.nproc, rc));
  }
  std::ifstream in(result_path);
  json result = json::parse(in, nullptr, false);
  if (!in || result.is_discarded()) {
    // A run stopped by --stop-after leaves no result: its checkpoint is the trace, as in one process.
    if (cfg.stop_after > 0) return json{{"status", "stopped"}, {"config", train_config_json(cfg)}};
    throw Error(fmt::format("training with {} ranks wrote no readable result '{}'", cfg.nproc, result_path));
  }
  return result;
}

}  // namespace sb
