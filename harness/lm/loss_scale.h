// LossScale: dynamic loss scaling for float16 training (GradScaler's rule), with its checkpointed state.
#pragma once

#include <cstdint>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

namespace sb {

// Dynamic loss scaling for float16 compute, GradScaler's rule: backward runs on loss * scale so small gradients
// survive float16; a step whose unscaled gradients hold an inf or NaN is skipped and halves the scale, and every
// 2000 clean steps double it. Disabled (a no-op) for every other dtype.
struct LossScale {
  static constexpr int64_t kGrowthInterval = 2000;
  bool enabled;
  double scale = 65536.0;
  int64_t clean_steps = 0;
  int64_t skipped_steps = 0;

  explicit LossScale(bool on) : enabled(on), scale(on ? 65536.0 : 1.0) {}

  // Unscales the gradients in place; false when they overflowed (the step must be skipped).
  bool unscale_and_check(const std::vector<torch::Tensor>& params) {
    if (!enabled) return true;
    torch::NoGradGuard no_grad;
    bool finite = true;
    for (const auto& p : params) {
      if (!p.grad().defined()) continue;
      p.grad().div_(scale);
      finite = finite && torch::isfinite(p.grad()).all().item<bool>();
    }
    if (!finite) {
      scale /= 2.0;
      clean_steps = 0;
      ++skipped_steps;
    } else if (++clean_steps == kGrowthInterval) {
      scale *= 2.0;
      clean_steps = 0;
    }
    return finite;
  }
  nlohmann::json state() const { return {{"scale", scale}, {"clean_steps", clean_steps}, {"skipped_steps", skipped_steps}}; }
  void restore(const nlohmann::json& j) {
    scale = j.value("scale", scale);
    clean_steps = j.value("clean_steps", clean_steps);
    skipped_steps = j.value("skipped_steps", skipped_steps);
  }
};

}  // namespace sb
