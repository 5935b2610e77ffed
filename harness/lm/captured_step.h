// One training step captured as a CUDA graph and replayed: the host launches a step with one call.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include <torch/torch.h>

namespace sb {

// Captures `body` (forward, backward, clipping, optimizer: work on tensors that outlive the capture) on a side stream
// once, then replays it on the current stream. Where capture is impossible (a LibTorch without CUDA, an operator
// that synchronises or reads the host inside the step) capture() returns false with the reason, and nothing is
// left capturing.
class CapturedStep {
 public:
  CapturedStep();
  ~CapturedStep();
  CapturedStep(const CapturedStep&) = delete;
  CapturedStep& operator=(const CapturedStep&) = delete;

  bool capture(const torch::Device& device, const std::function<void()>& body, std::string* why);
  void replay();
  bool ready() const { return ready_; }
  static bool available();  // whether this build can capture at all

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  bool ready_ = false;
};

}  // namespace sb
