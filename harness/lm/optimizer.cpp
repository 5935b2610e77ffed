// The trainer's update without host synchronisation: clipping on the device, AdamW fused where LibTorch has it.
#include "harness/lm/optimizer.h"

#include <cstdlib>

#include <fmt/format.h>

#include "common/error.h"

namespace sb {

torch::Tensor clip_grad_norm_no_sync(const std::vector<torch::Tensor>& params, double max_norm) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> grads;
  for (const auto& p : params) {
    if (p.grad().defined()) grads.push_back(p.grad());
  }
  if (grads.empty()) return torch::zeros({}, torch::kFloat64);
  // Per-tensor norms in the gradients' dtype, their norm, then float64 for the coefficient: the arithmetic of
  // clip_grad_norm_, whose norm passes through a double on the host.
  const std::vector<torch::Tensor> norms = at::_foreach_norm(grads, 2);
  const torch::Tensor total = torch::stack(norms).norm().to(torch::kFloat64);
  const torch::Tensor coef = (max_norm / (total + 1e-6)).clamp_max(1.0);
#if TORCH_VERSION_MAJOR >= 2
  at::_foreach_mul_(grads, coef);
#else
  for (auto& g : grads) g.mul_(coef);
#endif
  return total;
}

bool AdamWStepper::fused_available() {
#if TORCH_VERSION_MAJOR >= 2
  return true;
#else
  return false;
#endif
}

AdamWStepper::AdamWStepper(torch::optim::AdamW& optimizer, std::string impl) : optimizer_(optimizer) {
  if (impl.empty()) {
    const char* env = std::getenv("SB_OPTIMIZER");
    impl = env && *env ? env : "auto";
  }
  if (impl == "auto") impl = fused_available() ? "fused" : "per_parameter";
  if (impl != "fused" && impl != "per_parameter") {
    throw Error(fmt::format("SB_OPTIMIZER: expected auto, fused or per_parameter, got '{}'", impl));
  }
  if (impl == "fused" && !fused_available()) {
    throw Error(fmt::format("SB_OPTIMIZER=fused: LibTorch {} has no fused AdamW (it came in 2.x); use per_parameter",
                            TORCH_VERSION));
  }
  name_ = impl;
}

void AdamWStepper::step() {
  if (name_ == "per_parameter") {
    optimizer_.step();
    return;
  }
  fused_step(nullptr);
}

void AdamWStepper::step(const torch::Tensor& lr) {
  if (name_ != "fused") throw Error("a learning rate on the device needs the fused AdamW (SB_OPTIMIZER=fused)");
  fused_step(&lr);
}

void AdamWStepper::advance_host_steps() {
#if TORCH_VERSION_MAJOR >= 2  // 1.13 keys its state by text and has no fused step to replay
  for (auto& group : optimizer_.param_groups()) {
    for (auto& p : group.params()) {
      auto it = optimizer_.state().find(p.unsafeGetTensorImpl());
      if (it == optimizer_.state().end() || !it->second) continue;
      auto& st = static_cast<torch::optim::AdamWParamState&>(*it->second);
      st.step(st.step() + 1);
    }
  }
#endif
}

void AdamWStepper::fused_step(const torch::Tensor* lr) {
  (void)lr;
#if TORCH_VERSION_MAJOR >= 2
  torch::NoGradGuard no_grad;
  for (auto& group : optimizer_.param_groups()) {
    const auto& o = static_cast<const torch::optim::AdamWOptions&>(group.options());
    std::vector<torch::Tensor> ps, grads, exp_avgs, exp_avg_sqs, max_sqs, steps;
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      // The state torch::optim::AdamW would create, in the same map, so checkpoints and the other step agree.
      auto& slot = optimizer_.state()[p.unsafeGetTensorImpl()];
      if (!slot) {
        auto fresh = std::make_unique<torch::optim::AdamWParamState>();
        fresh->step(0);
        fresh->exp_avg(torch::zeros_like(p, torch::MemoryFormat::Preserve));
        fresh->exp_avg_sq(torch::zeros_like(p, torch::MemoryFormat::Preserve));
        if (o.amsgrad()) fresh->max_exp_avg_sq(torch::zeros_like(p, torch::MemoryFormat::Preserve));
        slot = std::move(fresh);
      }
      auto& st = static_cast<torch::optim::AdamWParamState&>(*slot);
      torch::Tensor& count = step_counts_[p.unsafeGetTensorImpl()];
      if (!count.defined()) count = torch::full({}, static_cast<double>(st.step()), p.options().dtype(torch::kFloat32));
      st.step(st.step() + 1);  // and `count` below, on the device
      ps.push_back(p);
      grads.push_back(p.grad());
      exp_avgs.push_back(st.exp_avg());
      exp_avg_sqs.push_back(st.exp_avg_sq());
      if (o.amsgrad()) max_sqs.push_back(st.max_exp_avg_sq());
      steps.push_back(count);
    }
    if (ps.empty()) continue;
    at::_foreach_add_(steps, 1);  // the kernel reads the step it takes; it does not count (as torch.optim's caller does)
    if (lr) {
      at::_fused_adamw_(ps, grads, exp_avgs, exp_avg_sqs, max_sqs, steps, *lr, std::get<0>(o.betas()),
                        std::get<1>(o.betas()), o.weight_decay(), o.eps(), o.amsgrad(), /*maximize=*/false);
    } else {
      at::_fused_adamw_(ps, grads, exp_avgs, exp_avg_sqs, max_sqs, steps, o.lr(), std::get<0>(o.betas()),
                        std::get<1>(o.betas()), o.weight_decay(), o.eps(), o.amsgrad(), /*maximize=*/false);
    }
  }
#endif
}

std::unique_ptr<torch::optim::AdamW> make_adamw(torch::nn::Module& model, double lr, double beta1, double beta2,
                                                double weight_decay) {
  std::vector<torch::Tensor> decay, no_decay;
  for (const auto& item : model.named_parameters()) {
    const std::string& name = item.key();
    const bool is_matrix = item.value().dim() == 2 && name.find("embed") == std::string::npos &&
                           name.find("rel_emb") == std::string::npos && name.find("pos_emb") == std::string::npos;
    (is_matrix ? decay : no_decay).push_back(item.value());
  }
  auto options = [&](double wd) {
    return std::make_unique<torch::optim::AdamWOptions>(
        torch::optim::AdamWOptions(lr).betas({beta1, beta2}).weight_decay(wd).eps(1e-8));
  };
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(decay, options(weight_decay));
  groups.emplace_back(no_decay, options(0.0));
  return std::make_unique<torch::optim::AdamW>(groups, torch::optim::AdamWOptions(lr));
}

}  // namespace sb
