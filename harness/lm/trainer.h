// Trainer: AdamW training of a LanguageModel on enwik8 bytes or a generated task, with evaluation, checkpoints and
// resume.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "harness/lm/checkpoint_format.h"
#include "harness/lm/config.h"
#include "harness/lm/data.h"
#include "harness/parallel/launch.h"

namespace sb {

// What a training run needs besides its config, derived once by its caller and passed down: train() works none of
// it out again.
struct PreparedTraining {
  TrainConfig cfg;               // as it runs (under a launcher: nproc = the world size; quiet off rank 0)
  nlohmann::json config;         // train_config_json(cfg): the recorded config, serialised once
  torch::Device device = torch::kCPU;  // resolved (a rank's own GPU under a launcher)
  int threads = 1;               // CPU threads, already set for this process
  std::shared_ptr<const Enwik8> data;  // read and hashed once per process; null for a generated task
  // With cfg.resume: the checkpoint, when the caller has read it already (the runner's resume decision); train()
  // reads it otherwise.
  std::shared_ptr<const CheckpointBody> checkpoint;
};

// Checks `cfg` against `layout` (a launcher's world size), reads the data file (once per process: shared_enwik8) and
// serialises the config, for a caller that has resolved the device and set `threads` already (the scenario runner).
// Throws sb::Error before anything is written.
// `recorded`, when given, is cfg's config as another process recorded it (a sweep's handoff), taken as is.
PreparedTraining prepare_training(const TrainConfig& cfg, torch::Device device, int threads,
                                  const RankLayout& layout = RankLayout{}, const nlohmann::json* recorded = nullptr);
// The CLI's path: resolves the device (a rank's own GPU under a launcher) and sets the threads (0: the cores this
// process may use, split between the ranks on this machine), then as above.
PreparedTraining prepare_training(const TrainConfig& cfg, const RankLayout& layout = RankLayout{});

// Runs (or resumes) training; writes log/checkpoints/result under cfg.out_dir; returns the final result record.
// With a distributed `layout` (torchrun, srun or `train --nproc`), this process is one rank of a data-parallel run:
// every rank trains on its rows of each global batch of nproc * batch windows, gradients are averaged over the
// ranks (c10d: Gloo on CPU, NCCL on CUDA), and only rank 0 writes metrics, checkpoints and result.json. A rank
// whose peers stop throws RankFailure (harness/parallel/process_group.h).
nlohmann::json train(const PreparedTraining& run, const RankLayout& layout = RankLayout{});
// prepare_training, then train.
nlohmann::json train(const TrainConfig& cfg, const RankLayout& layout = RankLayout{});

// Trains `run` with run.cfg.nproc local ranks: train() itself for one; otherwise `sparsebench train` processes of
// this binary (run_local_ranks) handed the recorded config (`train --config-json`), whose result.json is returned.
// Throws sb::Error when a rank fails. For callers that run training inside another command (the scenario runner).
nlohmann::json train_local_ranks(const PreparedTraining& run);

// Starts cfg.nproc local ranks of `sparsebench train`, handing them `config` (cfg's recorded config) and the settings
// a run takes but does not record (resume, overwrite, quiet, ...) through a temporary `--config-json` file; returns
// the launcher's exit status.
int run_ranks_with_config(const TrainConfig& cfg, const nlohmann::json& config);
// Reads that file (`file` names it in messages); throws sb::Error naming the file and field.
TrainConfig read_rank_config(const std::string& file);

}  // namespace sb
