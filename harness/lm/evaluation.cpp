// Evaluation of a language model during and after training (see evaluation.h).
#include "harness/lm/evaluation.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>

#include <fmt/format.h>

namespace sb {

namespace {

using json = nlohmann::json;

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// A task's valid evaluation as a learning-curve point (during training, or the final one standing in for it).
json task_curve_point(json valid, int64_t step, double train_s) {
  valid.erase("by_distance");
  valid.update(json{{"kind", "eval"}, {"step", step}, {"train_s", train_s}});
  return valid;
}

}  // namespace

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

json evaluate_during_training(LanguageModel& model, const EvalSource& src, int64_t step, double train_s,
                              double& seconds) {
  const TrainConfig& cfg = src.cfg;
  json rec;
  if (src.task.active()) {
    const double t0 = now_s();
    rec = task_curve_point(task_evaluate(model, src.task, static_cast<uint64_t>(cfg.seed), TaskSplit::valid,
                                         cfg.task_eval, cfg.eval_batch, src.pg),
                           step, train_s);
    seconds += now_s() - t0;
    if (!cfg.quiet) fmt::print("eval  {:>6}  valid accuracy {}\n", step, rec["accuracy"].dump());
    return rec;
  }
  const EvalResult r =
      evaluate(model, *src.data, src.data->valid(), cfg.model.context, cfg.eval_bytes, cfg.eval_batch, src.pg);
  seconds += r.seconds;
  rec = {{"kind", "eval"}, {"split", "valid"}, {"step", step}, {"bpc", r.bpc}, {"bytes", r.bytes}, {"train_s", train_s}};
  if (!cfg.quiet) {
    fmt::print("eval  {:>6}  valid bpc {:.4f} ({} bytes, {:.1f} s)\n", step, r.bpc, r.bytes, r.seconds);
    std::fflush(stdout);
  }
  return rec;
}

void evaluate_at_end(LanguageModel& model, const EvalSource& src, int64_t step,
                     const std::function<void(const json&)>& log, json& result, double& seconds, double train_s,
                     json* curve_end) {
  const TrainConfig& cfg = src.cfg;
  if (src.task.active()) {  // accuracy on answers, by distance; never a BPC
    const double t0 = now_s();
    const auto seed = static_cast<uint64_t>(cfg.seed);
    const json v = task_evaluate(model, src.task, seed, TaskSplit::valid, cfg.task_eval, cfg.eval_batch, src.pg);
    const json t = task_evaluate(model, src.task, seed, TaskSplit::test, cfg.task_eval, cfg.eval_batch, src.pg);
    seconds += now_s() - t0;
    result["valid_accuracy"] = v["accuracy"];
    result["test_accuracy"] = t["accuracy"];
    result["accuracy_by_distance"] = t["by_distance"];
    if (curve_end != nullptr) {  // the record evaluate_during_training makes, from the same evaluation
      *curve_end = task_curve_point(v, step, train_s);
      log(*curve_end);
    }
    log({{"kind", "final"}, {"step", step}, {"valid", v}, {"test", t}});
    if (!cfg.quiet) fmt::print("final  valid accuracy {}  test accuracy {}\n", v["accuracy"].dump(), t["accuracy"].dump());
    return;
  }
  const Enwik8& data = *src.data;
  const EvalResult v = evaluate(model, data, data.valid(), cfg.model.context, 0, cfg.eval_batch, src.pg);
  const EvalResult t = evaluate(model, data, data.test(), cfg.model.context, 0, cfg.eval_batch, src.pg);
  seconds += v.seconds + t.seconds;
  result["valid_bpc"] = v.bpc;
  result["test_bpc"] = t.bpc;
  log({{"kind", "final"}, {"step", step}, {"valid_bpc", v.bpc}, {"valid_bytes", v.bytes}, {"test_bpc", t.bpc},
       {"test_bytes", t.bytes}});
  if (!cfg.quiet) fmt::print("final  valid bpc {:.4f}  test bpc {:.4f}\n", v.bpc, t.bpc);
  if (cfg.lens_bytes <= 0) return;
  const json lens = context_lens(model, data, cfg.model.context, cfg.lens_bytes, cfg.eval_batch, src.pg, seconds);
  result["context_lens"] = lens;
  log({{"kind", "lens"}, {"step", step}, {"context_lens", lens}});
  if (!cfg.quiet && !lens.empty()) {
    std::string line = "lens   valid bpc seeing the last";
    for (const json& l : lens) line += fmt::format("  {} bytes: {:.4f}", l["context"].get<int64_t>(), l["bpc"].get<double>());
    fmt::print("{}\n", line);
  }
}

}  // namespace sb
