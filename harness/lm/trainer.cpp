// Trainer: AdamW with warm-up + cosine decay, clipping, periodic evaluation, atomic checkpoints and resume.
#include "harness/lm/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include <fmt/format.h>
#include <torch/version.h>

#include "common/durable_file.h"
#include "common/error.h"
#include "common/limits.h"
#include "common/text.h"
#include "harness/lm/checkpoint.h"
#include "harness/lm/data.h"
#include "harness/measure/build_info.h"
#include "harness/measure/device.h"
#include "harness/measure/op_profile.h"
#include "harness/measure/threads.h"
#include "harness/scenario/run_config.h"

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

struct EvalResult {
  double bpc = 0.0;
  int64_t bytes = 0;
  double seconds = 0.0;
};

// Bits per byte over a split, each target scored once with at least half a context of history.
EvalResult evaluate(LanguageModel& model, const Enwik8& data, Split split, int64_t context, int64_t limit,
                    int64_t eval_batch) {
  const double t0 = now_s();
  torch::NoGradGuard no_grad;
  const bool was_training = model->is_training();
  model->eval();
  const auto windows = eval_windows(split, context, limit);
  const uint8_t* bytes = data.bytes().data();
  const auto device = model->parameters().front().device();
  double nats = 0.0;
  int64_t scored = 0;
  for (size_t first = 0; first < windows.size(); first += static_cast<size_t>(eval_batch)) {
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
  if (was_training) model->train();
  EvalResult r;
  r.bytes = scored;
  r.bpc = scored ? nats / scored / std::log(2.0) : std::numeric_limits<double>::quiet_NaN();
  r.seconds = now_s() - t0;
  return r;
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
    if (r.value("step", int64_t{0}) <= step && r.value("kind", "") != "final") kept += line + '\n';
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
void check_training_memory(const TrainConfig& c) {
  const ModelConfig& m = c.model;
  const double d = static_cast<double>(m.dim), f = static_cast<double>(m.ffn), l = static_cast<double>(m.layers);
  const double params = 512.0 * d + l * (4.0 * d * d + 2.0 * d * f) + (m.positions == "absolute" ? m.context * d : 0.0);
  const double tokens = static_cast<double>(std::max(c.batch, c.eval_batch)) * static_cast<double>(m.context);
  const double bytes = 4.0 * (4.0 * params + tokens * (l * (4.0 * d + f) + 256.0));
  const int64_t have = physical_memory_bytes();
  if (have > 0 && bytes > static_cast<double>(have)) {
    throw Error(fmt::format(
        "--layers {} --dim {} --ffn {} --batch {} (--eval-batch {}) --context {} need at least {:.1f} GiB, more than this "
        "machine's {:.1f} GiB of memory; make them smaller",
        m.layers, m.dim, m.ffn, c.batch, c.eval_batch, m.context, bytes / double(1 << 30),
        static_cast<double>(have) / double(1 << 30)));
  }
}

}  // namespace

json train(const TrainConfig& cfg) {
  const double t_start = now_s();
  if (cfg.data.empty()) {
    throw Error(
        "no training data: pass --data PATH to an enwik8 file (download it with scripts/fetch_enwik8.sh, or use "
        "the 4 MB prefix shared/data/enwik8-head.bin)");
  }
  validate_model_config(cfg.model);  // option ranges were checked where the config was read (CLI, scenario)
  check_training_memory(cfg);
  const torch::Device device = resolve_device(cfg.device);  // refuses before anything is written
  const int threads = set_cpu_threads(static_cast<int>(cfg.threads));
  const Enwik8 data(cfg.data, min_data_bytes(cfg.model.context));

  std::error_code ec;
  fs::create_directories(cfg.out_dir, ec);
  if (ec) throw Error(fmt::format("--out: cannot create directory '{}': {}", cfg.out_dir, ec.message()));
  const std::string metrics_path = (fs::path(cfg.out_dir) / "metrics.jsonl").string();
  const std::string ckpt_path = (fs::path(cfg.out_dir) / "checkpoint.pt").string();
  const std::string result_path = (fs::path(cfg.out_dir) / "result.json").string();

  torch::manual_seed(cfg.seed);
  LanguageModel model(cfg.model);
  model->to(device);
  model->train();
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

  std::mt19937_64 rng(cfg.seed);
  int64_t step = 0;
  double train_s = 0.0;
  json evals = json::array();
  json config_history = json::array();  // settings changed at resumes (--allow-changes)
  json resumed_state = json::object();  // the checkpoint's running figures (progress line, last loss)
  const json config = train_config_json(cfg);
  if (cfg.resume) {
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
    // Where the run lives, how often it is saved or reports and its final evaluation change nothing it trains.
    const auto changes = config_changes(saved_config, config, {"out_dir", "checkpoint_every", "log_every", "profile", "final_eval"});
    refuse_changes(changes, cfg.allow_changes, "--resume", ckpt_path);
    config_history = st.info.value("config_changes", json::array());
    if (!changes.empty()) {
      config_history.push_back({{"at_step", st.step}, {"previous", saved_config}, {"changed", changes_json(changes)}});
    }
    step = st.step;
    train_s = st.train_s;
    std::istringstream rng_text(st.data_rng);
    rng_text >> rng;
    if (rng_text.fail()) {
      throw Error(fmt::format("checkpoint '{}' is damaged (/meta/data_rng is not a random engine state); delete it or "
                              "drop --resume to start over",
                              ckpt_path));
    }
    evals = st.info.value("evals", json::array());
    resumed_state = st.info.value("progress", json::object());
    truncate_metrics(metrics_path, step);
  } else {
    start_fresh(cfg.out_dir, {metrics_path, ckpt_path, result_path}, cfg.overwrite);
    write_file_atomic(metrics_path, "");
  }

  const auto& sg = model->sequence_graph(cfg.model.context);
  const int64_t n_edges = sg.graph.col.defined() ? sg.graph.col.numel() : sg.n_tokens * (sg.n_tokens + 1) / 2;
  json graph_info = {{"n_tokens", sg.n_tokens}, {"n_nodes", sg.n_nodes}, {"n_edges", n_edges},
                     {"fingerprint", sg.fingerprint}};
  json provenance = data.provenance();
  if (!cfg.quiet) {
    fmt::print("train: {} parameters, pattern {} {} ({} nodes, {} edges at context {}), {} threads\n",
               model->parameter_count(), config["model"]["pattern"].get<std::string>(),
               json(model->resolved_params()).dump(), sg.n_nodes, n_edges, cfg.model.context, threads);
    fmt::print("train: data {} ({} bytes, sha256 {}), split train {} / valid {} / test {}\n", data.path(),
               data.size(), data.sha256(), data.train().size(), data.valid().size(), data.test().size());
    if (step > 0) fmt::print("train: resumed from {} at step {}\n", ckpt_path, step);
    std::fflush(stdout);
  }

  double interval_loss = resumed_state.value("interval_loss", 0.0);
  double interval_train_s = resumed_state.value("interval_train_s", 0.0);
  int64_t interval_steps = resumed_state.value("interval_steps", int64_t{0});
  const json saved_loss = resumed_state.value("last_loss", json(nullptr));
  double last_loss = saved_loss.is_number() ? saved_loss.get<double>() : std::numeric_limits<double>::quiet_NaN();

  auto save = [&]() {
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
               {"progress", {{"interval_loss", interval_loss},
                             {"interval_train_s", interval_train_s},
                             {"interval_steps", interval_steps},
                             {"last_loss", std::isfinite(last_loss) ? json(last_loss) : json(nullptr)}}}};
    save_checkpoint(ckpt_path, *model, optimizer, st);
    return now_s() - t0;
  };

  const double budget_s = cfg.minutes * 60.0;
  const int64_t window = cfg.model.context + 1;
  const int64_t tokens_per_step = cfg.batch * cfg.model.context;
  std::string status = "ok";
  double eval_s = 0.0, checkpoint_s = 0.0;
  double fwd_s = 0.0, bwd_s = 0.0, opt_s = 0.0, data_s = 0.0;
  int64_t steps_this_run = 0;

  while (step < cfg.steps && !(budget_s > 0 && train_s >= budget_s)) {
    const double t0 = now_s();
    const double lr = learning_rate(cfg, step + 1, train_s);
    for (auto& group : optimizer.param_groups()) group.options().set_lr(lr);
    auto batch = sample_windows(data, data.train(), cfg.batch, window, rng).to(device);
    auto inputs = batch.slice(1, 0, cfg.model.context);
    auto targets = batch.slice(1, 1, window);
    const double t1 = now_s();
    if (cfg.profile) op_profile.start(0);
    auto logits = model->forward(inputs);
    auto loss = torch::nn::functional::cross_entropy(logits.reshape({-1, 256}), targets.reshape({-1}));
    const double loss_v = loss.item<double>();
    op_profile.stop();
    const double t2 = now_s();
    if (!std::isfinite(loss_v)) {
      status = "diverged";
      last_loss = loss_v;
      if (!cfg.quiet) fmt::print("train: step {}: loss is {}, stopping (status diverged)\n", step + 1, loss_v);
      append_line(metrics_path, {{"kind", "diverged"}, {"step", step + 1}, {"loss", loss_v}});
      break;
    }
    optimizer.zero_grad();
    if (cfg.profile) op_profile.start(1);
    loss.backward();
    op_profile.stop();
    const double t3 = now_s();
    if (cfg.clip > 0) torch::nn::utils::clip_grad_norm_(model->parameters(), cfg.clip);
    optimizer.step();
    const double t4 = now_s();
    data_s += t1 - t0, fwd_s += t2 - t1, bwd_s += t3 - t2, opt_s += t4 - t3;
    train_s += t4 - t0;
    ++step;
    ++steps_this_run;
    last_loss = loss_v;
    interval_loss += loss_v;
    interval_train_s += t4 - t0;
    ++interval_steps;

    const bool last = step >= cfg.steps || (budget_s > 0 && train_s >= budget_s);
    if (step % cfg.log_every == 0 || last) {
      const double mean_loss = interval_loss / interval_steps;
      const double tps = interval_steps * tokens_per_step / std::max(1e-9, interval_train_s);
      const double per_step = interval_train_s / interval_steps;
      double eta = (cfg.steps - step) * per_step;
      if (budget_s > 0) eta = std::min(eta, budget_s - train_s);
      append_line(metrics_path, {{"kind", "train"},
                                 {"step", step},
                                 {"loss", mean_loss},
                                 {"bpc", mean_loss / std::log(2.0)},
                                 {"lr", lr},
                                 {"tokens_per_s", tps},
                                 {"train_s", train_s}});
      if (!cfg.quiet) {
        fmt::print("step {:>6}  loss {:.4f}  bpc {:.4f}  lr {:.2e}  {:.0f} tok/s  elapsed {}  eta {}\n", step,
                   mean_loss, mean_loss / std::log(2.0), lr, tps, format_duration(train_s), format_duration(eta));
        std::fflush(stdout);
      }
      interval_loss = interval_train_s = 0.0;
      interval_steps = 0;
    }
    if (cfg.eval_every > 0 && step % cfg.eval_every == 0 && !last) {
      const EvalResult r = evaluate(model, data, data.valid(), cfg.model.context, cfg.eval_bytes, cfg.eval_batch);
      eval_s += r.seconds;
      json rec = {{"kind", "eval"}, {"split", "valid"}, {"step", step}, {"bpc", r.bpc},
                  {"bytes", r.bytes}, {"train_s", train_s}};
      evals.push_back(rec);
      append_line(metrics_path, rec);
      if (!cfg.quiet) {
        fmt::print("eval  {:>6}  valid bpc {:.4f} ({} bytes, {:.1f} s)\n", step, r.bpc, r.bytes, r.seconds);
        std::fflush(stdout);
      }
    }
    if (cfg.checkpoint_every > 0 && step % cfg.checkpoint_every == 0) checkpoint_s += save();
    if (cfg.stop_after > 0 && steps_this_run >= cfg.stop_after && !last) {
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
                 {"device", device_name(model->parameters().front().device())},
                 {"git_commit", git_commit()},
                 {"torch_version", fmt::format("{}.{}.{}", TORCH_VERSION_MAJOR, TORCH_VERSION_MINOR,
                                               TORCH_VERSION_PATCH)},
                 {"evals", evals}};
  if (!config_history.empty()) result["config_changes"] = config_history;
  if (status == "stopped") return result;  // as if killed: the checkpoint is the only trace
  if (status == "ok") checkpoint_s += save();

  json valid_bpc = nullptr, test_bpc = nullptr;
  if (status == "ok" && cfg.final_eval) {
    const EvalResult v = evaluate(model, data, data.valid(), cfg.model.context, 0, cfg.eval_batch);
    const EvalResult t = evaluate(model, data, data.test(), cfg.model.context, 0, cfg.eval_batch);
    eval_s += v.seconds + t.seconds;
    valid_bpc = v.bpc;
    test_bpc = t.bpc;
    append_line(metrics_path, {{"kind", "final"}, {"step", step}, {"valid_bpc", v.bpc}, {"valid_bytes", v.bytes},
                               {"test_bpc", t.bpc}, {"test_bytes", t.bytes}});
    if (!cfg.quiet) fmt::print("final  valid bpc {:.4f}  test bpc {:.4f}\n", v.bpc, t.bpc);
  }
  result["valid_bpc"] = valid_bpc;
  result["test_bpc"] = test_bpc;
  result["tokens_per_s"] = train_s > 0 ? step * tokens_per_step / train_s : 0.0;
  json timing = {{"train_s", train_s},
                 {"eval_s", eval_s},
                 {"checkpoint_s", checkpoint_s},
                 {"total_s", now_s() - t_start},
                 {"this_run", {{"steps", steps_this_run},
                               {"data_s", data_s},
                               {"forward_s", fwd_s},
                               {"backward_s", bwd_s},
                               {"optimizer_s", opt_s}}}};
  if (cfg.profile) timing["profile"] = profile_report(op_profile, fwd_s, bwd_s, opt_s, data_s, steps_this_run, cfg.quiet);
  result["timing"] = timing;
  write_file_atomic(result_path, result.dump(2) + "\n");
  return result;
}

}  // namespace sb
