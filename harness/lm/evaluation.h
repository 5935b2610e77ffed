// Evaluation of a language model during and after training: BPC over enwik8 splits, BPC by available context, and
// a generated task's accuracy on its answers.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/lm/config.h"
#include "harness/lm/data.h"
#include "harness/lm/model.h"
#include "harness/lm/tasks.h"
#include "harness/parallel/process_group.h"

namespace sb {

struct EvalResult {
  double bpc = 0.0;
  int64_t bytes = 0;
  double seconds = 0.0;
};

// Bits per byte of the targets `windows` score, `eval_batch` windows (of one length) per pass. With a process
// group, rank r scores batches r, r + W, ... and the sums are exchanged (every rank returns the whole total).
EvalResult score_windows(LanguageModel& model, const Enwik8& data, const std::vector<EvalWindow>& windows,
                         int64_t eval_batch, ProcessGroup* pg);

// Bits per byte over a split, each target scored once with at least half a context of history.
EvalResult evaluate(LanguageModel& model, const Enwik8& data, Split split, int64_t context, int64_t limit,
                    int64_t eval_batch, ProcessGroup* pg);

// BPC by available context: the same `bytes` valid targets scored with only their last c bytes visible, for c in
// {16, 64, 256, context}, through the pattern's graph built at length c. Adds its time to `seconds`.
nlohmann::json context_lens(LanguageModel& model, const Enwik8& data, int64_t context, int64_t bytes,
                            int64_t eval_batch, ProcessGroup* pg, double& seconds);

// What one training run evaluates on: its generated task, or its enwik8 data.
struct EvalSource {
  const TrainConfig& cfg;
  const TaskSpec& task;
  const Enwik8* data;  // null for a task
  ProcessGroup* pg;
};

// The valid evaluation at a training step: its metrics record (kind "eval"); prints a line unless quiet. Adds its
// time to `seconds`.
nlohmann::json evaluate_during_training(LanguageModel& model, const EvalSource& src, int64_t step, double train_s,
                                        double& seconds);

// The end-of-run evaluation (valid and test; enwik8 also BPC by available context): fills the result's fields,
// writes its metrics records through `log`. Adds its time to `seconds`. For a task run with `curve_end`, its valid
// evaluation is also the learning curve's last point (what evaluate_during_training would have recorded at this
// step, at train_s), so the last step's valid split is evaluated once.
void evaluate_at_end(LanguageModel& model, const EvalSource& src, int64_t step,
                     const std::function<void(const nlohmann::json&)>& log, nlohmann::json& result, double& seconds,
                     double train_s = 0.0, nlohmann::json* curve_end = nullptr);

}  // namespace sb
