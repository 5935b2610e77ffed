// Trainer: AdamW training of a LanguageModel on enwik8 bytes, with evaluation, checkpoints and resume.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "harness/lm/config.h"
#include "harness/lm/model.h"

namespace sb {

// Runs (or resumes) training; writes log/checkpoints/result under cfg.out_dir; returns the final result record.
nlohmann::json train(const TrainConfig& cfg);

}  // namespace sb
