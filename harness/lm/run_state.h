// A training run's directory and running state: --out preparation, metrics records, checkpoints and resume.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "common/run_lock.h"
#include "harness/lm/checkpoint.h"
#include "harness/lm/config.h"
#include "harness/lm/loss_scale.h"

namespace sb {

// Where the run lives, how often it is saved or reports and what it evaluates at the end change nothing it trains:
// a resume may change them.
extern const std::vector<std::string> kUntrainedKeys;

// The files of a run directory.
struct RunPaths {
  explicit RunPaths(const std::string& dir);
  std::string dir, metrics, checkpoint, result;
};

// What a checkpoint keeps besides weights and optimizer: the loop's running figures, so a resumed run continues
// exactly (the progress line's sums included).
struct RunProgress {
  int64_t step = 0;
  double train_s = 0.0;
  std::mt19937_64 rng;
  nlohmann::json evals = nlohmann::json::array();
  nlohmann::json config_history = nlohmann::json::array();  // settings changed at resumes (--allow-changes)
  nlohmann::json resumes = nlohmann::json::array();         // the steps this run was resumed at
  double interval_loss = 0.0;
  double interval_train_s = 0.0;
  int64_t interval_steps = 0;
  double last_loss = std::numeric_limits<double>::quiet_NaN();
};

// Metrics are records: every line is checked and fsync'd, so a full disk stops the run with a message.
void append_metrics_line(const std::string& path, const nlohmann::json& record);

// Rank 0's part of starting a run in --out: creates it, takes its lock (held in `lock` until the run ends) and,
// without --resume, clears an earlier run (refused without --overwrite). Throws sb::Error naming --out.
void prepare_run_dir(const TrainConfig& cfg, const RunPaths& paths, std::optional<RunDirLock>& lock);

// The checkpoint `paths.checkpoint` continues with `config` (the recorded config of the run about to start): read
// once, for train() to restore. Null when there is none or it cannot be continued, with the reason in `why` (empty
// when there is no checkpoint at all); `step` gets the step it holds.
std::shared_ptr<const CheckpointBody> resumable_checkpoint(const std::string& out_dir, const nlohmann::json& config,
                                                           std::string* why, int64_t* step = nullptr);

// The checkpoint --resume continues, read (every rank reads rank 0's: --out is shared between machines); throws
// sb::Error naming it when it is missing.
std::shared_ptr<const CheckpointBody> read_resume_checkpoint(const RunPaths& paths);

// Restores a run from `body` (read from paths.checkpoint): weights, optimizer, progress and loss scale; refuses a
// different model, and changed settings unless cfg.allow_changes (then records them). On rank 0 (`lead`) the
// metrics after the checkpoint's step are dropped.
void restore_run(const CheckpointBody& body, const RunPaths& paths, const TrainConfig& cfg,
                 const nlohmann::json& config, bool lead, torch::nn::Module& model, torch::optim::AdamW& optimizer,
                 RunProgress& progress, LossScale& loss_scale);

// Writes the checkpoint: weights, optimizer, `config` and the running figures.
void save_run(const RunPaths& paths, const nlohmann::json& config, const RunProgress& progress,
              const LossScale& loss_scale, torch::nn::Module& model, torch::optim::AdamW& optimizer);

}  // namespace sb
