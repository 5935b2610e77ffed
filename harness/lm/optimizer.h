// The trainer's update: gradient clipping and AdamW without host synchronisation, fused where LibTorch has it.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include <torch/torch.h>

namespace sb {

// Scales the gradients so their global L2 norm is at most max_norm, as torch::nn::utils::clip_grad_norm_ does,
// but the norm and the coefficient stay on the device (that function reads the norm with .item(), which waits for
// the whole backward on CUDA). Returns the norm before clipping, a 0-dim float64 tensor on the gradients' device.
torch::Tensor clip_grad_norm_no_sync(const std::vector<torch::Tensor>& params, double max_norm);

// AdamW's step over the optimizer's own parameter groups and state, so checkpoints are the same either way:
// - "fused": LibTorch's _fused_adamw_ (LibTorch >= 2.x: one kernel over a group's tensors on CUDA, vectorised on
//   the CPU), step counts kept as float32 tensors on the parameters' device (advanced before the kernel, as
//   torch.optim does) and mirrored in the state's integers;
// - "per_parameter": torch::optim::AdamW::step(), a handful of operators per parameter (the only one in 1.13).
// The choice: `impl`, else the SB_OPTIMIZER environment variable, else "auto" (fused where available).
// AdamW over `model`'s parameters in two groups: weight decay on matrices only (not on biases, norms, embeddings or
// relation tables).
std::unique_ptr<torch::optim::AdamW> make_adamw(torch::nn::Module& model, double lr, double beta1, double beta2,
                                                double weight_decay);

class AdamWStepper {
 public:
  AdamWStepper(torch::optim::AdamW& optimizer, std::string impl = "");
  void step();
  // The fused step with the learning rate read from a float32 tensor on the parameters' device, so a captured
  // step (CUDA graph) follows the schedule; every group takes that rate. Fused only.
  void step(const torch::Tensor& lr);
  // A replayed captured step advanced the device's step counts: advance the state's integers to match.
  void advance_host_steps();
  const std::string& name() const { return name_; }
  static bool fused_available();

 private:
  torch::optim::AdamW& optimizer_;
  std::string name_;
  std::unordered_map<const void*, torch::Tensor> step_counts_;  // parameter -> its step as a device tensor
  void fused_step(const torch::Tensor* lr);
};

}  // namespace sb
