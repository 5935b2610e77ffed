// The trainer's update: device-side clipping against clip_grad_norm_, and fused AdamW against the per-parameter one.
#include <cstdlib>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/error.h"
#include "harness/lm/model.h"
#include "harness/lm/optimizer.h"
#include "tests/harness/tiny_model.h"

namespace {

sb::ModelConfig tiny_model() {
  sb::ModelConfig c = sb::test::tiny_model_config("bpt", 32, 32, 64);
  c.pattern_params = {{"k", 2}};
  return c;
}

std::vector<torch::Tensor> clone_grads(const std::vector<torch::Tensor>& ps) {
  std::vector<torch::Tensor> out;
  for (const auto& p : ps) out.push_back(p.grad().clone());
  return out;
}

// Gradients of one loss, for both clippers to start from.
std::vector<torch::Tensor> with_grads(double scale) {
  torch::manual_seed(3);
  std::vector<torch::Tensor> ps = {torch::randn({7, 5}).requires_grad_(), torch::randn({5}).requires_grad_(),
                                   torch::randn({3, 3}).requires_grad_()};
  torch::Tensor loss = torch::zeros({});
  for (const auto& p : ps) loss = loss + (p * p * scale).sum();
  loss.backward();
  return ps;
}

// Clipped or not, the device-side clip leaves the gradients clip_grad_norm_ leaves and returns the same norm.
TEST(ClipNoSync, MatchesClipGradNorm) {
  for (const double max_norm : {0.5, 1e6}) {
    SCOPED_TRACE(max_norm);
    auto a = with_grads(3.0), b = with_grads(3.0);
    const double expected = torch::nn::utils::clip_grad_norm_(a, max_norm);
    const torch::Tensor got = sb::clip_grad_norm_no_sync(b, max_norm);
    EXPECT_EQ(got.scalar_type(), torch::kFloat64);
    EXPECT_NEAR(got.item<double>(), expected, 1e-6 * expected);
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_TRUE(torch::allclose(a[i].grad(), b[i].grad(), 1e-6, 1e-7)) << "parameter " << i;
    }
    if (max_norm < 1) {
      double n2 = 0;
      for (const auto& p : b) n2 += p.grad().pow(2).sum().item<double>();
      EXPECT_NEAR(std::sqrt(n2), max_norm, 1e-4);
    } else {
      EXPECT_TRUE(torch::equal(a[0].grad(), b[0].grad()));  // below the bound nothing is scaled
    }
  }
}

TEST(ClipNoSync, NoGradientsGiveZero) {
  std::vector<torch::Tensor> ps = {torch::ones({2}).requires_grad_()};
  EXPECT_EQ(sb::clip_grad_norm_no_sync(ps, 1.0).item<double>(), 0.0);
}

TEST(AdamWStepper, RefusesUnknownImplementations) {
  sb::LanguageModel m(tiny_model());
  torch::optim::AdamW opt(m->parameters(), torch::optim::AdamWOptions(1e-3));
  try {
    sb::AdamWStepper s(opt, "foreach");
    FAIL() << "accepted 'foreach'";
  } catch (const sb::Error& e) {
    EXPECT_NE(std::string(e.what()).find("SB_OPTIMIZER: expected auto, fused or per_parameter, got 'foreach'"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(sb::AdamWStepper(opt, "auto").name(), sb::AdamWStepper::fused_available() ? "fused" : "per_parameter");
  if (!sb::AdamWStepper::fused_available()) {
    try {
      sb::AdamWStepper s(opt, "fused");
      FAIL() << "fused accepted without a fused AdamW";
    } catch (const sb::Error& e) {
      EXPECT_NE(std::string(e.what()).find("has no fused AdamW"), std::string::npos) << e.what();
    }
  }
}

// 30 steps of the model with weight decay on two groups, clipping and a changing learning rate: the fused AdamW
// ends at the per-parameter one's weights within float32 tolerance, and leaves the same optimizer state (steps).
TEST(AdamWStepper, FusedMatchesPerParameter) {
  if (!sb::AdamWStepper::fused_available()) GTEST_SKIP() << "LibTorch " << TORCH_VERSION << " has no fused AdamW";
  auto run = [](const std::string& impl, std::vector<torch::Tensor>* weights, int64_t* state_step) {
    sb::LanguageModel m(tiny_model());
    m->reset_parameters(11);
    std::vector<torch::Tensor> decay, no_decay;
    for (const auto& item : m->named_parameters()) (item.value().dim() == 2 ? decay : no_decay).push_back(item.value());
    auto opts = [](double wd) {
      return std::make_unique<torch::optim::AdamWOptions>(
          torch::optim::AdamWOptions(1e-2).betas({0.9, 0.99}).weight_decay(wd).eps(1e-8));
    };
    std::vector<torch::optim::OptimizerParamGroup> groups;
    groups.emplace_back(decay, opts(0.1));
    groups.emplace_back(no_decay, opts(0.0));
    torch::optim::AdamW opt(groups, torch::optim::AdamWOptions(1e-2));
    sb::AdamWStepper stepper(opt, impl);
    torch::manual_seed(5);
    const torch::Tensor x = torch::randint(0, 256, {2, 33}, torch::kLong);
    for (int s = 0; s < 30; ++s) {
      for (auto& g : opt.param_groups()) g.options().set_lr(1e-2 * (1.0 - s / 40.0));
      opt.zero_grad();
      auto logits = m->forward(x.slice(1, 0, 32));
      auto loss = torch::nn::functional::cross_entropy(logits.reshape({-1, 256}), x.slice(1, 1, 33).reshape({-1}));
      loss.backward();
      sb::clip_grad_norm_no_sync(m->parameters(), 0.5);
      stepper.step();
    }
    for (const auto& p : m->parameters()) weights->push_back(p.detach().clone());
    const auto& st = static_cast<torch::optim::AdamWParamState&>(*opt.state().begin()->second);
    *state_step = st.step();
  };
  std::vector<torch::Tensor> a, b;
  int64_t step_a = 0, step_b = 0;
  run("per_parameter", &a, &step_a);
  run("fused", &b, &step_b);
  EXPECT_EQ(step_a, 30);
  EXPECT_EQ(step_b, 30);
  ASSERT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, (a[i] - b[i]).abs().max().item<double>());
    EXPECT_TRUE(torch::allclose(a[i], b[i], 1e-4, 1e-5)) << "parameter " << i;
  }
  EXPECT_GT(worst, -1.0);  // reached: every tensor compared
}

}  // namespace
