// Trainer: AdamW with warm-up + cosine decay, clipping, periodic evaluation, atomic checkpoints and resume.
#include "harness/lm/trainer.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
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
#include "harness/measure/blas.h"
#include "harness/measure/build_info.h"
#include "harness/measure/contention.h"
#include "harness/measure/device.h"
#include "harness/measure/float_env.h"
#include "harness/measure/machine.h"
#include "harness/measure/memory_tracker.h"
#include "harness/measure/op_profile.h"
#include "harness/lm/captured_step.h"
#include "harness/lm/optimizer.h"
#include "harness/measure/threads.h"
#include "common/config_changes.h"
#include "common/files.h"
#include "common/json_guard.h"
#include "harness/lm/evaluation.h"
#include "harness/lm/run_state.h"

namespace sb {

namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

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

constexpr const char* kNoTrainingData =
    "no training data: pass --data PATH to an enwik8 file (download it with scripts/fetch_enwik8.sh, or use the 4 MB "
    "prefix shared/data/enwik8-head.bin), or --task NAME for a generated task";

// Training in this process with more than one rank asked for and no launcher around it.
void refuse_ranks_here(const TrainConfig& cfg, const RankLayout& layout) {
  if (layout.distributed() || cfg.nproc <= 1) return;
  throw Error(fmt::format("--nproc {}: this process is one rank; start the ranks with `sparsebench train --nproc {}`, "
                          "torchrun or srun",
                          cfg.nproc, cfg.nproc));
}

// Step timings of this process's steps (`timing.this_run` in the result).
struct StepTimes {
  double data_s = 0.0, forward_s = 0.0, backward_s = 0.0, allreduce_s = 0.0, optimizer_s = 0.0;
};

// One training run: the state train() used to keep in locals, with the loop's parts as methods.
class Training {
 public:
  Training(const PreparedTraining& run, const RankLayout& layout);
  json run();

 private:
  void prepare_dir_and_model();
  void restore_or_start();
  void join_ranks();
  void print_header() const;
  void choose_cuda_graphs();
  torch::Tensor next_batch(TaskBatch& tb);
  void capture_step(const torch::Tensor& host_batch, const TaskBatch& tb, double lr);
  bool eager_step(const torch::Tensor& host_batch, const TaskBatch& tb, double t[4]);
  torch::Tensor step_loss(const torch::Tensor& logits, const torch::Tensor& targets,
                          const torch::Tensor& answer) const;
  bool run_step();
  bool after_step();
  void device_sync() const {
    if (device_.is_cuda()) torch::cuda::synchronize(device_.index() < 0 ? -1 : device_.index());
  }
  bool take_loss(int64_t at, double v);
  void read_pending();
  void log_progress();
  double save();
  json finish();
  EvalSource eval_source() const { return {cfg_, task_, in_.data.get(), pg_.get()}; }
  void log(const json& record) const {
    if (lead_) append_metrics_line(paths_.metrics, record);
  }

  const double t_start_;
  const TrainConfig& cfg_;
  const PreparedTraining& in_;
  const RankLayout& layout_;
  const bool lead_;
  const int world_;
  const TaskSpec task_;
  const torch::Device device_;
  const RunPaths paths_;
  const torch::Dtype dtype_, compute_;  // of the parameters; of the matmuls and attention
  std::unique_ptr<ProcessGroup> pg_;
  std::optional<RunDirLock> out_lock_;  // rank 0's, held until the run ends
  LanguageModel model_{nullptr};
  LossScale loss_scale_;
  OpProfile op_profile_;  // counts only while started, under --profile
  std::unique_ptr<torch::optim::AdamW> optimizer_;
  std::unique_ptr<AdamWStepper> stepper_;
  std::optional<GradientBuckets> buckets_;
  RunProgress progress_;
  json distributed_, graph_info_, provenance_;

  // The loop's state.
  const double budget_s_;
  const int64_t window_, tokens_per_step_;
  std::string status_ = "ok";
  double eval_s_ = 0.0, checkpoint_s_ = 0.0;
  StepTimes times_;
  int64_t steps_this_run_ = 0;
  bool defer_reads_ = false, sync_sections_ = false, diverged_ = false;
  std::vector<std::pair<int64_t, torch::Tensor>> pending_;  // (step, loss on the device) not yet read
  bool want_graphs_ = false;
  std::string graphs_why_;
  CapturedStep captured_;
  torch::Tensor static_batch_, static_inputs_, static_answer_, static_loss_, device_lr_;
  torch::Tensor last_batch_;  // the last step's rows (the progress record's digest)
  double last_lr_ = 0.0;
};

Training::Training(const PreparedTraining& run, const RankLayout& layout)
    : t_start_(now_s()),
      cfg_(run.cfg),
      in_(run),
      layout_(layout),
      lead_(layout.rank == 0),
      world_(layout.world_size),
      task_(task_spec(run.cfg)),  // a generated task: no data file (refused with one), before anything is written
      device_(run.device),
      paths_(run.cfg.out_dir),
      dtype_(precision_of(run.cfg.dtype).params),
      compute_(precision_of(run.cfg.dtype).compute),
      loss_scale_(compute_ == torch::kFloat16),
      budget_s_(run.cfg.minutes * 60.0),
      window_(run.cfg.model.context + 1),
      tokens_per_step_(run.cfg.batch * layout.world_size * run.cfg.model.context) {
  if (!task_.active() && !in_.data) {
    throw Error(kNoTrainingData);
  }
  MemoryTracker::install();  // large blocks kept for reuse, as in `run` and `bench` (host_large_blocks)
  if (layout.distributed()) {
    pg_ = std::make_unique<ProcessGroup>(layout, device_,
                                         std::chrono::milliseconds(static_cast<int64_t>(cfg_.dist_timeout * 1000.0)));
  }
}

void Training::prepare_dir_and_model() {
  // Only rank 0 writes; the others wait for its verdict on --out.
  on_all_ranks(pg_.get(), "preparing --out", [&] {
    if (lead_) prepare_run_dir(cfg_, paths_, out_lock_);
  });
  // Paired runs: weights from per-parameter streams of the seed, and the dropout stream started after the model
  // exists, so every pattern trained with one seed starts from the same shared weights and masks.
  model_ = LanguageModel(cfg_.model);
  model_->reset_parameters(static_cast<uint64_t>(cfg_.seed));
  torch::manual_seed(cfg_.seed);
  model_->to(device_, dtype_);
  model_->set_compute_dtype(compute_);
  model_->train();
  optimizer_ = make_adamw(*model_, cfg_.lr, cfg_.beta1, cfg_.beta2, cfg_.weight_decay);
  stepper_ = std::make_unique<AdamWStepper>(*optimizer_);  // fused where LibTorch has it (SB_OPTIMIZER chooses)
}

void Training::restore_or_start() {
  progress_.rng.seed(static_cast<std::mt19937_64::result_type>(cfg_.seed));
  if (!cfg_.resume) return;
  // Every rank loads rank 0's checkpoint (--out must be shared between machines); the runner hands over the one it
  // read for its resume decision.
  on_all_ranks(pg_.get(), "loading the checkpoint", [&] {
    const std::shared_ptr<const CheckpointBody> body = in_.checkpoint ? in_.checkpoint : read_resume_checkpoint(paths_);
    restore_run(*body, paths_, cfg_, in_.config, lead_, *model_, *optimizer_, progress_, loss_scale_);
  });
}

void Training::join_ranks() {
  // Every rank starts from rank 0's weights (the seed makes them equal; this makes it certain), and the ranks are
  // recorded.
  json ranks = json::array();
  const json me = {{"rank", layout_.rank}, {"local_rank", layout_.local_rank}, {"host", host_name()},
                   {"threads", in_.threads}, {"device", device_name(device_)}};
  if (pg_) {
    std::vector<torch::Tensor> weights;
    for (const auto& p : model_->parameters()) weights.push_back(p.detach());
    pg_->broadcast(weights, 0, "the initial weight broadcast");
    for (const std::string& r : pg_->all_gather_text("rank_info", me.dump())) ranks.push_back(json::parse(r));
    buckets_.emplace(model_->parameters());
  } else {
    ranks.push_back(me);
  }
  distributed_ = {{"world_size", world_},
                  {"backend", pg_ ? pg_->backend() : "none"},
                  {"launch", layout_.source},
                  {"bucket_count", buckets_ ? buckets_->count() : 0},
                  {"ranks", ranks}};
  const auto& sg = model_->sequence_graph(cfg_.model.context);
  const int64_t n_edges = sg.graph.col.defined() ? sg.graph.col.numel() : sg.n_tokens * (sg.n_tokens + 1) / 2;
  graph_info_ = {{"n_tokens", sg.n_tokens}, {"n_nodes", sg.n_nodes}, {"n_edges", n_edges}, {"fingerprint", sg.fingerprint}};
  provenance_ = task_.active() ? task_json(task_) : in_.data->provenance();
}

void Training::print_header() const {
  if (cfg_.quiet) return;
  const json& g = graph_info_;
  fmt::print("train: {} parameters, pattern {} {} ({} nodes, {} edges at context {}), {}, {} threads\n",
             model_->parameter_count(), in_.config["model"]["pattern"].get<std::string>(),
             json(model_->resolved_params()).dump(), g["n_nodes"].get<int64_t>(), g["n_edges"].get<int64_t>(),
             cfg_.model.context, cfg_.dtype, in_.threads);
  if (pg_) {
    fmt::print("train: {} ranks over {} ({}), {} windows per rank, {} per step\n", world_, pg_->backend(),
               layout_.source, cfg_.batch, cfg_.batch * world_);
  }
  if (task_.active()) {
    fmt::print("train: task {} (chance {:.4f}), scored on answer positions\n", provenance_.dump(), task_chance(task_));
  } else {
    const Enwik8& data = *in_.data;
    fmt::print("train: data {} ({} bytes, sha256 {}), split train {} / valid {} / test {}\n", data.path(), data.size(),
               data.sha256(), data.train().size(), data.valid().size(), data.test().size());
  }
  if (progress_.step > 0) fmt::print("train: resumed from {} at step {}\n", paths_.checkpoint, progress_.step);
  std::fflush(stdout);
}

// On CUDA in one process a step enqueues its work and returns: its loss stays on the device until a log, eval or
// checkpoint step (or the last) reads the pending losses at once, so the host never waits inside a step. With
// ranks (the loss is all-reduced with the gradients) or on the CPU every step is read at once. SB_DEFER_LOSS_READS=1
// defers on the CPU too, so the tests cover this path without a GPU. CUDA graphs: after kCaptureAfter steps of
// this process, the step (forward, backward, clipping, fused AdamW) is captured once as a CUDA graph and replayed
// with the batch and learning rate in device tensors. Where it cannot be, the reason is recorded.
void Training::choose_cuda_graphs() {
  const char* defer_env = std::getenv("SB_DEFER_LOSS_READS");
  defer_reads_ = !pg_ && (device_.is_cuda() || (defer_env && std::string(defer_env) == "1"));
  sync_sections_ = cfg_.profile && device_.is_cuda();  // sections end when their kernels have run
  // On by default on CUDA: replays matched eager steps and evaluations exactly (results/train/); SB_CUDA_GRAPHS=0
  // turns them off, =1 asks for them anywhere (a CPU run records why it has none).
  const char* graphs_env = std::getenv("SB_CUDA_GRAPHS");
  const std::string graphs = graphs_env ? graphs_env : "";
  want_graphs_ = graphs == "1" || (graphs.empty() && device_.is_cuda());
  if (!want_graphs_) return;
  if (!device_.is_cuda()) graphs_why_ = "CUDA graphs need --device cuda";
  else if (pg_) graphs_why_ = "not with data-parallel ranks (the gradient exchange runs on the host)";
  else if (loss_scale_.enabled) graphs_why_ = "not with float16 loss scaling (its skip decision is read on the host)";
  else if (cfg_.profile) graphs_why_ = "not under --profile (its sections synchronise)";
  else if (cfg_.model.dropout > 0) graphs_why_ = "not with dropout (its masks are seeded from the host each step)";
  else if (stepper_->name() != "fused") graphs_why_ = "needs the fused AdamW (its learning rate as a device tensor)";
  else if (!CapturedStep::available()) graphs_why_ = "this build's LibTorch has no CUDA graphs";
}

torch::Tensor Training::next_batch(TaskBatch& tb) {
  // A task's step is a function of (seed, step): nothing to restore at a resume.
  if (task_.active()) {
    tb = task_batch(task_, cfg_.seed, TaskSplit::train, progress_.step, cfg_.batch * world_,
                    layout_.rank * cfg_.batch, cfg_.batch);
    return tb.tokens;
  }
  return sample_windows(*in_.data, in_.data->train(), cfg_.batch * world_, window_, progress_.rng,
                        layout_.rank * cfg_.batch, cfg_.batch);
}

void Training::capture_step(const torch::Tensor& host_batch, const TaskBatch& tb, double lr) {
  // Static inputs and gradients exist before the capture, so every replay reads and writes the same memory; a task's
  // answer positions are one more static input.
  static_batch_ = host_batch.to(device_);
  // A task's inputs are their own tensor (hidden answers differ from the shifted targets); otherwise a view.
  static_inputs_ = task_.active() ? tb.inputs.to(device_) : static_batch_.slice(1, 0, cfg_.model.context);
  if (task_.active()) static_answer_ = tb.answer.to(device_);
  device_lr_ = torch::full({}, lr, torch::TensorOptions().dtype(torch::kFloat32).device(device_));
  const std::vector<torch::Tensor> params = model_->parameters();
  for (const auto& p : params) {
    if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
  }
  captured_.capture(
      device_,
      [&] {
        for (const auto& p : params) p.grad().zero_();
        auto logits = model_->forward(static_inputs_);
        const auto targets = static_batch_.slice(1, 1, window_);
        static_loss_ = step_loss(logits, targets, static_answer_);
        static_loss_.backward();
        if (cfg_.clip > 0) clip_grad_norm_no_sync(params, cfg_.clip);
        stepper_->step(device_lr_);
      },
      &graphs_why_);
  if (captured_.ready()) captured_.replay();  // the capture only recorded the step: this runs it
}

// A step's loss, eager or captured: a task's over its answer positions (answer on the device; unused otherwise), else
// every byte's.
torch::Tensor Training::step_loss(const torch::Tensor& logits, const torch::Tensor& targets,
                                  const torch::Tensor& answer) const {
  if (task_.active()) return task_loss(logits, targets, answer);
  return torch::nn::functional::cross_entropy(logits.reshape({-1, 256}), targets.reshape({-1}));
}

// t: when the forward started, the backward started, the backward ended, the gradient exchange ended. False when
// the step's loss, read at once, is not finite (the run stops there).
bool Training::eager_step(const torch::Tensor& host_batch, const TaskBatch& tb, double t[4]) {
  // Pinned and asynchronous on CUDA: a pageable copy would wait for the device's queue to drain.
  auto to_device = [&](const torch::Tensor& h) {
    return device_.is_cuda() ? h.pin_memory().to(device_, /*non_blocking=*/true) : h.to(device_);
  };
  auto batch = to_device(host_batch);
  auto inputs = task_.active() ? to_device(tb.inputs) : batch.slice(1, 0, cfg_.model.context);
  auto targets = batch.slice(1, 1, window_);
  if (sync_sections_) device_sync();
  t[0] = now_s();
  if (cfg_.profile) op_profile_.start(0);
  auto logits = model_->forward(inputs);
  auto loss = step_loss(logits, targets, task_.active() ? to_device(tb.answer) : tb.answer);
  double loss_v = defer_reads_ ? 0.0 : loss.item<double>();
  op_profile_.stop();
  if (sync_sections_) device_sync();
  t[1] = now_s();
  optimizer_->zero_grad();
  if (cfg_.profile) op_profile_.start(1);
  if (defer_reads_ || std::isfinite(loss_v)) (loss_scale_.enabled ? loss * loss_scale_.scale : loss).backward();
  op_profile_.stop();
  if (sync_sections_) device_sync();
  t[2] = now_s();
  if (pg_) {  // the mean gradient and loss over the ranks (equal shares of the global batch), in one exchange
    auto loss_sum = torch::tensor({loss_v}, torch::kFloat64);
    buckets_->average(*pg_, {loss_sum});
    loss_v = loss_sum.item<double>() / world_;
  }
  t[3] = now_s();
  if (defer_reads_) {
    pending_.emplace_back(progress_.step + 1, loss.detach());
  } else if (!take_loss(progress_.step + 1, loss_v)) {
    return false;
  }
  // After the all-reduce every rank holds the same gradients, so all take the same skip decision.
  if (loss_scale_.unscale_and_check(model_->parameters())) {
    if (cfg_.clip > 0) clip_grad_norm_no_sync(model_->parameters(), cfg_.clip);
    stepper_->step();
  } else {
    log({{"kind", "skipped"}, {"step", progress_.step + 1}, {"loss_scale", loss_scale_.scale}});
  }
  return true;
}

// Takes the loss of step `at`: a non-finite one stops the run there; false then.
bool Training::take_loss(int64_t at, double v) {
  progress_.last_loss = v;
  if (std::isfinite(v)) {
    progress_.interval_loss += v;
    return true;
  }
  diverged_ = true;
  status_ = "diverged";
  progress_.step = at - 1;  // the steps after it (enqueued before the read) do not count
  if (!cfg_.quiet) fmt::print("train: step {}: loss is {}, stopping (status diverged)\n", at, v);
  log({{"kind", "diverged"}, {"step", at}, {"loss", v}});
  return false;
}

// Reads the pending losses in one copy and takes them in order, as per-step reads would.
void Training::read_pending() {
  if (pending_.empty()) return;
  std::vector<torch::Tensor> values;
  for (auto& [s, l] : pending_) values.push_back(l.to(torch::kFloat64).reshape({}));
  const torch::Tensor host = torch::stack(values).cpu();
  const double* v = host.data_ptr<double>();
  for (size_t i = 0; i < pending_.size(); ++i) {
    if (!take_loss(pending_[i].first, v[i])) break;
  }
  pending_.clear();
}

// One optimizer step, timed; false when the run stops inside it.
bool Training::run_step() {
  constexpr int64_t kCaptureAfter = 3;
  const double t0 = now_s();
  const double lr = learning_rate(cfg_, progress_.step + 1, progress_.train_s);
  for (auto& group : optimizer_->param_groups()) group.options().set_lr(lr);
  TaskBatch tb;
  const torch::Tensor host_batch = next_batch(tb);
  if (want_graphs_ && graphs_why_.empty() && !captured_.ready() && steps_this_run_ >= kCaptureAfter) {
    capture_step(host_batch, tb, lr);
  } else if (captured_.ready()) {
    static_batch_.copy_(host_batch.pin_memory(), /*non_blocking=*/true);
    if (task_.active()) {
      static_inputs_.copy_(tb.inputs.pin_memory(), /*non_blocking=*/true);
      static_answer_.copy_(tb.answer.pin_memory(), /*non_blocking=*/true);
    }
    device_lr_.fill_(lr);
    captured_.replay();
    stepper_->advance_host_steps();
  }
  double t[4];
  if (captured_.ready()) {  // forward, backward and the update ran in the graph
    pending_.emplace_back(progress_.step + 1, static_loss_.detach().clone());
    t[0] = t[1] = t[2] = t[3] = now_s();
  } else if (!eager_step(host_batch, tb, t)) {
    return false;
  }
  if (sync_sections_) device_sync();
  const double t4 = now_s();
  times_.allreduce_s += t[3] - t[2];
  times_.data_s += t[0] - t0, times_.forward_s += t[1] - t[0], times_.backward_s += t[2] - t[1];
  times_.optimizer_s += t4 - t[3];
  progress_.train_s += t4 - t0;
  if (pg_ && budget_s_ > 0) {  // the time budget is rank 0's clock, so every rank stops at the same step
    std::vector<torch::Tensor> clock{torch::tensor({progress_.train_s}, torch::kFloat64)};
    pg_->broadcast(clock, 0, "the training-time broadcast");
    progress_.train_s = clock[0].item<double>();
  }
  ++progress_.step;
  ++steps_this_run_;
  progress_.interval_train_s += t4 - t0;
  ++progress_.interval_steps;
  last_batch_ = host_batch;
  last_lr_ = lr;
  return true;
}

// Reads, logs, evaluates and saves where the step just done calls for it; false when the run stops here.
bool Training::after_step() {
  const int64_t step = progress_.step;
  const bool last = step >= cfg_.steps || (budget_s_ > 0 && progress_.train_s >= budget_s_);
  const bool logs = step % cfg_.log_every == 0 || last;
  const bool evals_now = cfg_.eval_every > 0 && (step % cfg_.eval_every == 0 || last);
  const bool saves = cfg_.checkpoint_every > 0 && step % cfg_.checkpoint_every == 0;
  const bool stops = cfg_.stop_after > 0 && steps_this_run_ >= cfg_.stop_after && !last;
  if (!pending_.empty() && (logs || evals_now || saves || stops)) {
    // The wait for the queued steps belongs to the training time of the interval that queued them.
    const double w0 = now_s();
    read_pending();
    const double waited = now_s() - w0;
    progress_.train_s += waited;
    progress_.interval_train_s += waited;
    if (diverged_) return false;
  }
  if (logs) log_progress();
  // The last step is evaluated too, so every learning curve ends where training did (on the same bytes). A task
  // run's final evaluation scores the same valid sequences at that step: it supplies that point instead.
  const bool final_supplies = last && task_.active() && cfg_.final_eval;
  if (evals_now && !final_supplies) {
    const json rec = evaluate_during_training(model_, eval_source(), step, progress_.train_s, eval_s_);
    progress_.evals.push_back(rec);
    log(rec);
  }
  if (saves) checkpoint_s_ += save();
  if (stops) {
    status_ = "stopped";
    return false;
  }
  return true;
}

void Training::log_progress() {
  const double mean_loss = progress_.interval_loss / progress_.interval_steps;
  const double tps = progress_.interval_steps * tokens_per_step_ / std::max(1e-9, progress_.interval_train_s);
  const double per_step = progress_.interval_train_s / progress_.interval_steps;
  double eta = (cfg_.steps - progress_.step) * per_step;
  if (budget_s_ > 0) eta = std::min(eta, budget_s_ - progress_.train_s);
  // batch_fnv: a digest of this step's windows (rank 0's rows), so paired runs can be checked to share data.
  const torch::Tensor rows = last_batch_.contiguous();
  const bool task = task_.active();
  log({{"kind", "train"},
       {"step", progress_.step},
       {"loss", mean_loss},
       {task ? "answer_loss" : "bpc", task ? mean_loss : mean_loss / std::log(2.0)},
       {"lr", last_lr_},
       {"tokens_per_s", tps},
       {"train_s", progress_.train_s},
       {"batch_fnv", fmt::format("{:016x}", fnv1a64(rows.data_ptr(), rows.nbytes()))}});
  if (!cfg_.quiet) {
    fmt::print("step {:>6}  loss {:.4f}  {} {:.4f}  lr {:.2e}  {:.0f} tok/s  elapsed {}  eta {}\n", progress_.step,
               mean_loss, task ? "answer loss" : "bpc", task ? mean_loss : mean_loss / std::log(2.0), last_lr_, tps,
               format_duration(progress_.train_s), format_duration(eta));
    std::fflush(stdout);
  }
  progress_.interval_loss = progress_.interval_train_s = 0.0;
  progress_.interval_steps = 0;
}

double Training::save() {
  if (!lead_) return 0.0;
  const double t0 = now_s();
  save_run(paths_, in_.config, progress_, loss_scale_, *model_, *optimizer_);
  return now_s() - t0;
}

// The result record; the end-of-run checkpoint and evaluation; result.json on rank 0.
json Training::finish() {
  const torch::Device where = model_->parameters().front().device();
  const double last_loss = progress_.last_loss;
  json result = {{"config", in_.config},
                 {"data", provenance_},
                 {"graph", graph_info_},
                 {"parameters", model_->parameter_count()},
                 {"pattern_params", model_->resolved_params()},
                 {"steps", progress_.step},
                 {"status", status_},
                 {"final_loss", std::isfinite(last_loss) ? json(last_loss) : json(nullptr)},
                 {"threads", in_.threads},
                 {"world_size", world_},
                 {"distributed", distributed_},
                 {"device", device_name(where)},
                 {"simd_target", gsa_cpu_target()},  // the CPU kernels' target (SB_CPU_TARGET pins it)
                 {"denormals", denormals_mode()},     // flushed unless SB_DENORMALS=keep
                 {"host_large_blocks", MemoryTracker::large_blocks()},
                 {"cpu", cpu_summary()},
                 {"attention_backend", model_->attention_backend()},
                 // the linear layers' products: fast_linear's library for float32 on the CPU, else LibTorch's
                 {"matmul", where.is_cpu() && compute_ == torch::kFloat32 ? matmul_backend() : std::string("libtorch")},
                 {"blas", blas_info()},  // the BLAS under LibTorch's own CPU products
                 {"precision", {{"parameters", dtype_name(dtype_)}, {"compute", dtype_name(compute_)}}},
                 {"optimizer", "adamw:" + stepper_->name()},
                 {"cuda_graphs", want_graphs_ ? (captured_.ready() ? json("captured") : json(graphs_why_)) : json("off")},
                 {"git_commit", git_commit()},
                 {"torch_version", libtorch_version()},
                 {"evals", progress_.evals},
                 {"resumed_at_steps", progress_.resumes}};
  if (loss_scale_.enabled) result["precision"]["loss_scale"] = loss_scale_.state();
  const std::string kernels = model_->attention_kernels();  // before the final evaluation's own calls
  if (!kernels.empty()) result["attention_kernels"] = kernels;
  if (!progress_.config_history.empty()) result["config_changes"] = progress_.config_history;
  if (status_ == "stopped") return result;  // as if killed: the checkpoint is the only trace
  if (status_ == "ok") checkpoint_s_ += save();
  if (task_.active()) {  // accuracy on answers, by distance, beside the graph's reach; never a BPC
    result["task"] = task_json(task_);
    result["reach"] = task_reach(cfg_, task_);
  } else {
    result["valid_bpc"] = nullptr, result["test_bpc"] = nullptr;
  }
  if (status_ == "ok" && cfg_.final_eval) {
    // A task run's curve ends at its last step from this evaluation (after_step left that point to it, also when
    // a resumed run has nothing left to train).
    const int64_t curve_ends = progress_.evals.empty() ? -1 : progress_.evals.back().value("step", int64_t{-1});
    const bool supplies = task_.active() && cfg_.eval_every > 0 && curve_ends != progress_.step;
    json curve_end;
    evaluate_at_end(model_, eval_source(), progress_.step, [&](const json& r) { log(r); }, result, eval_s_,
                    progress_.train_s, supplies ? &curve_end : nullptr);
    if (!curve_end.is_null()) {
      progress_.evals.push_back(curve_end);
      result["evals"] = progress_.evals;
    }
  }
  result["tokens_per_s"] = progress_.train_s > 0 ? progress_.step * tokens_per_step_ / progress_.train_s : 0.0;
  json timing = {{"train_s", progress_.train_s},
                 {"eval_s", eval_s_},
                 {"checkpoint_s", checkpoint_s_},
                 {"total_s", now_s() - t_start_},
                 {"this_run", {{"steps", steps_this_run_},
                               {"data_s", times_.data_s},
                               {"forward_s", times_.forward_s},
                               {"backward_s", times_.backward_s},
                               {"allreduce_s", times_.allreduce_s},
                               {"optimizer_s", times_.optimizer_s}}}};
  if (cfg_.profile) {
    timing["profile"] = profile_report(op_profile_, times_.forward_s, times_.backward_s, times_.optimizer_s,
                                       times_.data_s, steps_this_run_, cfg_.quiet);
  }
  result["timing"] = timing;
  if (lead_) write_file_atomic(paths_.result, result.dump(2) + "\n");
  return result;
}

json Training::run() {
  const DropoutShard dropout_shard(layout_.rank);
  prepare_dir_and_model();
  restore_or_start();
  join_ranks();
  print_header();
  choose_cuda_graphs();
  while (progress_.step < cfg_.steps && !(budget_s_ > 0 && progress_.train_s >= budget_s_)) {
    if (!run_step() || !after_step()) break;
  }
  return finish();
}

}  // namespace

PreparedTraining prepare_training(const TrainConfig& cfg, torch::Device device, int threads,
                                  const RankLayout& layout, const json* recorded) {
  PreparedTraining run;
  run.cfg = cfg;
  if (layout.distributed()) {
    if (cfg.nproc != 1 && cfg.nproc != layout.world_size) {
      throw Error(fmt::format("--nproc {} differs from the world size {} of the {}; leave --nproc out there",
                              cfg.nproc, layout.world_size, layout.source));
    }
    std::string why;
    if (!process_group_available(cfg.device, &why)) {
      throw Error(fmt::format("world size {} ({}): {}", layout.world_size, layout.source, why));
    }
    run.cfg.nproc = layout.world_size;  // recorded: the ranks that ran, however they were started
    if (layout.rank != 0) run.cfg.quiet = true;
  }
  const TaskSpec task = task_spec(run.cfg);  // a generated task: no data file (refused with one)
  if (!task.active() && run.cfg.data.empty()) {
    throw Error(kNoTrainingData);
  }
  validate_model_config(run.cfg.model);  // option ranges were checked where the config was read (CLI, scenario)
  check_training_memory(run.cfg, layout.local_world_size);
  run.device = device;
  run.threads = threads;
  if (!task.active()) run.data = shared_enwik8(run.cfg.data, min_data_bytes(run.cfg.model.context));
  run.config = recorded ? *recorded : train_config_json(run.cfg);
  return run;
}

PreparedTraining prepare_training(const TrainConfig& cfg, const RankLayout& layout) {
  torch::Device device = resolve_device(cfg.device);  // refuses before anything is written
  if (device.is_cuda() && layout.distributed()) {
    device = torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(layout.local_rank % torch::cuda::device_count()));
  }
  int64_t want_threads = cfg.threads;  // 0: the cores this process may use, split between the ranks on this machine
  if (want_threads == 0 && layout.distributed()) {
    want_threads = std::max<int64_t>(1, cpu_allowance().usable / layout.local_world_size);
  }
  return prepare_training(cfg, device, set_cpu_threads(static_cast<int>(want_threads)), layout);
}

json train(const PreparedTraining& run, const RankLayout& layout) {
  refuse_ranks_here(run.cfg, layout);
  Training training(run, layout);
  return training.run();
}

json train(const TrainConfig& cfg, const RankLayout& layout) {
  refuse_ranks_here(cfg, layout);
  return train(prepare_training(cfg, layout), layout);
}

namespace {

// Writes the file `train --config-json` reads: the recorded config and the settings a run takes but does not record.
std::string write_rank_config(const TrainConfig& cfg, const json& config) {
  std::string path = (fs::temp_directory_path() / "sparsebench-ranks-XXXXXX.json").string();
  const int fd = mkstemps(path.data(), 5);
  if (fd < 0) throw Error(fmt::format("cannot create the ranks' config file '{}': {}", path, std::strerror(errno)));
  ::close(fd);
  write_file_atomic(path, json{{"config", config}, {"settings", train_settings_json(cfg)}}.dump(2) + "\n");
  return path;
}

}  // namespace

int run_ranks_with_config(const TrainConfig& cfg, const json& config) {
  const std::string config_file = write_rank_config(cfg, config);
  const int rc = run_local_ranks({"sparsebench", "train", "--config-json", config_file}, static_cast<int>(cfg.nproc));
  std::error_code ec;
  fs::remove(config_file, ec);
  return rc;
}

TrainConfig read_rank_config(const std::string& file) {
  bool exists = false;
  const std::string text = read_file(file, &exists);
  const std::string where = "--config-json " + file;
  if (!exists) throw Error(fmt::format("{}: no such file", where));
  const json doc = parse_json_guarded(text, where);
  if (!doc.is_object()) throw Error(fmt::format("{}: expected {{\"config\": ..., \"settings\": ...}}", where));
  return train_config_from_json(doc.value("config", json()), doc.value("settings", json()), where);
}

json train_local_ranks(const PreparedTraining& run) {
  const TrainConfig& cfg = run.cfg;
  if (cfg.nproc <= 1) return train(run);
  const int rc = run_ranks_with_config(cfg, run.config);
  const std::string result_path = RunPaths(cfg.out_dir).result;
  if (rc != 0) {
    throw Error(fmt::format("training with {} ranks failed (exit status {}; see the ranks' messages above)",
                            cfg.nproc, rc));
  }
  std::ifstream in(result_path);
  json result = json::parse(in, nullptr, false);
  if (!in || result.is_discarded()) {
    // A run stopped by --stop-after leaves no result: its checkpoint is the trace, as in one process.
    if (cfg.stop_after > 0) return json{{"status", "stopped"}, {"config", run.config}};
    throw Error(fmt::format("training with {} ranks wrote no readable result '{}'", cfg.nproc, result_path));
  }
  return result;
}

}  // namespace sb
