// Trainer: AdamW training of a LanguageModel on enwik8 bytes, with evaluation, checkpoints and resume.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/lm/model.h"

namespace sb {

struct TrainConfig {
  ModelConfig model;
  std::string data;                  // enwik8 (or a prefix of it); required
  std::string out_dir = "results/train";
  int64_t steps = 20000;             // upper bound on optimizer steps (the schedule's length)
  double minutes = 0.0;              // training-time budget; 0 = none (evaluation time not counted)
  int64_t batch = 4;
  double lr = 3e-3;
  double min_lr_ratio = 0.1;         // cosine decays to lr * min_lr_ratio
  int64_t warmup = 100;
  double weight_decay = 0.01;
  double beta1 = 0.9, beta2 = 0.99;
  double clip = 1.0;                 // gradient-norm clip; 0 = off
  uint64_t seed = 1;
  int64_t eval_every = 200;          // steps between evaluations; 0 = only at the end
  int64_t eval_bytes = 65536;        // valid bytes scored at intermediate evaluations; 0 = all
  int64_t eval_batch = 8;            // windows per evaluation forward pass
  int64_t checkpoint_every = 500;    // steps between checkpoints; 0 = only at the end
  int64_t log_every = 50;            // steps between progress lines
  int threads = 0;                   // 0 = all cores
  bool resume = false;
  bool profile = false;              // split each step's time by operator category (OpProfile)
  bool final_eval = true;            // full valid + test evaluation at the end
  bool quiet = false;                // no progress lines on stdout
  int64_t stop_after = 0;            // stop (as if killed) after this many steps of this process; 0 = off
  bool overwrite = false;            // replace an earlier run in out_dir (without it, train refuses)
  bool allow_changes = false;        // resume with settings other than the checkpoint's (both are recorded)
};

// Fills a TrainConfig from option names (as on the CLI, without "--") to string values; "set" holds k=v;
// throws sb::Error naming the option on a bad value.
TrainConfig train_config_from_options(const std::vector<std::pair<std::string, std::string>>& options);

// Every option name train_config_from_options accepts, and those that take no value.
const std::vector<std::string>& train_option_names();
const std::vector<std::string>& train_flag_names();

// The configuration as a JSON object (recorded in result.json and checkpoints).
nlohmann::json train_config_json(const TrainConfig& cfg);

// Runs (or resumes) training; writes log/checkpoints/result under cfg.out_dir; returns the final result record.
nlohmann::json train(const TrainConfig& cfg);

}  // namespace sb
