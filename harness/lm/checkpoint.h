// Training checkpoints: model, optimizer, step and RNG state in one file written atomically and checksummed.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "common/durable_file.h"
#include "harness/lm/checkpoint_format.h"

namespace sb {

struct TrainState {
  int64_t step = 0;           // optimizer steps done
  double train_s = 0.0;       // training wall time so far (counts against --minutes)
  std::string data_rng;       // std::mt19937_64 state as text
  nlohmann::json info;        // configuration and running records (evaluations so far)
};

// File layout: see checkpoint_format.h (no LibTorch archive: a hostile file can only be refused, never parsed
// by an unchecked reader).
void save_checkpoint(const std::string& path, torch::nn::Module& model, torch::optim::AdamW& optimizer,
                     const TrainState& state);
// Restores model, optimizer and the global CPU generator; throws sb::Error naming the file when it is
// missing, truncated, corrupt or not a checkpoint.
TrainState load_checkpoint(const std::string& path, torch::nn::Module& model, torch::optim::AdamW& optimizer);
// The same from a checkpoint already read (read_checkpoint): `path` names it in messages.
TrainState restore_checkpoint(const CheckpointBody& body, const std::string& path, torch::nn::Module& model,
                              torch::optim::AdamW& optimizer);

}  // namespace sb
