// Mixed-precision tests: bfloat16/float16 compute in the language model against float32, and loss scaling.
#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "harness/lm/loss_scale.h"
#include "harness/lm/model.h"
#include "common/error.h"
#include "kernels/torch/graph_attention_op.h"
#include "tests/harness/tiny_model.h"

namespace {

sb::ModelConfig small_model(const std::string& pattern, const std::string& attention, const std::string& positions) {
  sb::ModelConfig c = sb::test::tiny_model_config(pattern, 48, 32, 64);
  c.attention = attention;
  c.positions = positions;
  if (pattern == "bpt") c.pattern_params = {{"k", 2}};
  return c;
}

// Whether this LibTorch runs `dtype` matmuls on the CPU (1.13 has no float16 ones).
bool cpu_matmul_runs(torch::Dtype dtype) {
  try {
    const torch::Tensor t = torch::ones({2, 8}, dtype);
    (void)torch::linear(t, t).sum().item<double>();
    return true;
  } catch (const c10::Error&) {
    return false;
  }
}

// A bfloat16-compute model keeps float32 parameters and gradients and gives the float32 model's logits up to
// bfloat16 rounding, for the graph op and both dense paths; its attention backend says how it ran.
TEST(MixedPrecision, Bfloat16ComputeTracksFloat32) {
  struct Case {
    std::string pattern, attention, positions;
  };
  for (const Case& c : {Case{"bpt", "graph", "relative"}, Case{"dense", "dense", "absolute"},
                        Case{"dense", "dense", "relative"}, Case{"window", "graph", "absolute"}}) {
    SCOPED_TRACE(c.pattern + "/" + c.attention + "/" + c.positions);
    const sb::ModelConfig cfg = small_model(c.pattern, c.attention, c.positions);
    sb::LanguageModel ref(cfg), low(cfg);
    ref->reset_parameters(7);
    low->reset_parameters(7);
    low->set_compute_dtype(torch::kBFloat16);
    EXPECT_EQ(low->compute_dtype(), torch::kBFloat16);
    EXPECT_EQ(ref->compute_dtype(), torch::kFloat32);
    if (c.attention == "graph") {
      EXPECT_EQ(low->attention_backend(), sb::graph_attention_backend(torch::kCPU) + " (bfloat16 staged to float32)");
    }
    torch::manual_seed(1);
    const torch::Tensor bytes = torch::randint(0, 256, {2, 48}, torch::kInt64);
    const torch::Tensor a = ref->forward(bytes), b = low->forward(bytes);
    ASSERT_EQ(b.scalar_type(), torch::kFloat32);  // logits come back in the parameters' dtype
    const double err = (a - b).abs().max().item<double>() / a.abs().max().item<double>();
    EXPECT_LT(err, 0.05);
    EXPECT_GT(err, 0.0) << "bfloat16 compute gave float32's logits bit for bit: nothing ran in bfloat16";
    torch::nn::functional::cross_entropy(b.reshape({-1, 256}), bytes.roll(-1, 1).reshape({-1})).backward();
    for (const auto& p : low->named_parameters()) {
      ASSERT_EQ(p.value().scalar_type(), torch::kFloat32) << p.key();
      ASSERT_TRUE(p.value().grad().defined()) << p.key();
      ASSERT_EQ(p.value().grad().scalar_type(), torch::kFloat32) << p.key();
      EXPECT_TRUE(torch::isfinite(p.value().grad()).all().item<bool>()) << p.key();
    }
  }
}

// float16 either runs like bfloat16 or, on a LibTorch without CPU float16 matmuls, is refused by name.
TEST(MixedPrecision, Float16RunsOrIsRefusedByName) {
  sb::LanguageModel model(small_model("bpt", "graph", "relative"));
  if (!cpu_matmul_runs(torch::kFloat16)) {
    try {
      model->set_compute_dtype(torch::kFloat16);
      FAIL() << "float16 accepted on a LibTorch whose CPU float16 matmul throws";
    } catch (const sb::Error& e) {
      EXPECT_NE(std::string(e.what()).find("dtype float16: this LibTorch"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("use bfloat16, or a GPU"), std::string::npos) << e.what();
    }
    EXPECT_EQ(model->compute_dtype(), torch::kFloat32);  // a refusal leaves the model as it was
    return;
  }
  model->set_compute_dtype(torch::kFloat16);
  const torch::Tensor logits = model->forward(torch::randint(0, 256, {1, 48}, torch::kInt64));
  EXPECT_TRUE(torch::isfinite(logits).all().item<bool>());
}

TEST(MixedPrecision, PrecisionOfNamesParametersAndCompute) {
  EXPECT_EQ(sb::precision_of("float32").compute, torch::kFloat32);
  EXPECT_EQ(sb::precision_of("float64").params, torch::kFloat64);
  EXPECT_EQ(sb::precision_of("bfloat16").params, torch::kFloat32);
  EXPECT_EQ(sb::precision_of("bfloat16").compute, torch::kBFloat16);
  EXPECT_EQ(sb::precision_of("float16").compute, torch::kFloat16);
  try {
    sb::precision_of("fp8");
    FAIL() << "fp8 accepted";
  } catch (const sb::Error& e) {
    EXPECT_STREQ(e.what(), "dtype: expected float32, float64, bfloat16 or float16, got 'fp8'");
  }
}

std::vector<torch::Tensor> params_with_grads(const std::vector<float>& grads) {
  std::vector<torch::Tensor> out;
  for (float g : grads) {
    torch::Tensor p = torch::zeros({2}, torch::requires_grad());
    p.mutable_grad() = torch::full({2}, g);
    out.push_back(p);
  }
  return out;
}

TEST(LossScale, OverflowSkipsAndHalvesCleanStepsUnscaleAndGrow) {
  sb::LossScale s(true);
  EXPECT_EQ(s.scale, 65536.0);
  auto bad = params_with_grads({1.0f, std::numeric_limits<float>::infinity()});
  EXPECT_FALSE(s.unscale_and_check(bad));
  EXPECT_EQ(s.scale, 32768.0);
  EXPECT_EQ(s.skipped_steps, 1);
  auto nan = params_with_grads({std::numeric_limits<float>::quiet_NaN()});
  EXPECT_FALSE(s.unscale_and_check(nan));
  EXPECT_EQ(s.scale, 16384.0);
  auto good = params_with_grads({16384.0f, -8192.0f});
  EXPECT_TRUE(s.unscale_and_check(good));
  EXPECT_EQ(good[0].grad()[0].item<float>(), 1.0f);  // unscaled in place
  EXPECT_EQ(good[1].grad()[1].item<float>(), -0.5f);
  for (int64_t i = 1; i < sb::LossScale::kGrowthInterval; ++i) {
    auto g = params_with_grads({1.0f});
    ASSERT_TRUE(s.unscale_and_check(g));
  }
  EXPECT_EQ(s.scale, 32768.0);  // kGrowthInterval clean steps in a row double it
  EXPECT_EQ(s.clean_steps, 0);

  sb::LossScale restored(true);
  restored.restore(s.state());
  EXPECT_EQ(restored.scale, s.scale);
  EXPECT_EQ(restored.skipped_steps, 2);
}

TEST(LossScale, DisabledLeavesGradientsAlone) {
  sb::LossScale s(false);
  EXPECT_EQ(s.scale, 1.0);
  auto g = params_with_grads({std::numeric_limits<float>::infinity(), 3.0f});
  EXPECT_TRUE(s.unscale_and_check(g));
  EXPECT_EQ(g[1].grad()[0].item<float>(), 3.0f);
  EXPECT_EQ(s.skipped_steps, 0);
}

}  // namespace
