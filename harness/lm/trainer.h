// Trainer: AdamW training of a LanguageModel on enwik8 bytes, with evaluation, checkpoints and resume.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/parallel/launch.h"
#include "harness/lm/config.h"
#include "harness/lm/model.h"

namespace sb {

// Runs (or resumes) training; writes log/checkpoints/result under cfg.out_dir; returns the final result record.
// With a distributed `layout` (torchrun, srun or `train --nproc`), this process is one rank of a data-parallel run:
// every rank trains on its rows of each global batch of nproc * batch windows, gradients are averaged over the
// ranks (c10d: Gloo on CPU, NCCL on CUDA), and only rank 0 writes metrics, checkpoints and result.json. A rank
// whose peers stop throws RankFailure (harness/parallel/process_group.h).
nlohmann::json train(const TrainConfig& cfg, const RankLayout& layout = RankLayout{});

// Trains `cfg` with cfg.nproc local ranks: train() itself for one; otherwise `sparsebench train` processes of this
// binary (run_local_ranks), whose result.json is returned. Throws sb::Error when a rank fails. For callers that run
// training inside another command (the scenario runner).
nlohmann::json train_local_ranks(const TrainConfig& cfg);

// Whether cfg.out_dir holds a checkpoint that train() with --resume continues without refusing (how a sweep
// continues a point it was interrupted in): readable, and written for the same model and training settings.
// Returns the step the checkpoint holds, or -1 with the reason in `why` (empty when there is no checkpoint at all).
int64_t resumable_step(const TrainConfig& cfg, std::string* why);

// The `sparsebench train` arguments (after the command name) that reproduce `cfg`.
std::vector<std::string> train_command_args(const TrainConfig& cfg);

}  // namespace sb
