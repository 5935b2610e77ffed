// LanguageModel tests: causality of every causal pattern (fp64, exact), overfitting a tiny batch,
// the dense baseline against the dense pattern graph, and refusal of non-causal patterns.
#include <cmath>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "harness/cli/cli.h"
#include "harness/lm/model.h"
#include "common/error.h"
#include "patterns/pattern.h"
#include "tests/harness/tiny_model.h"

namespace {

sb::ModelConfig tiny_config(const std::string& pattern, int64_t context) {
  return sb::test::tiny_model_config(pattern, context, 16, 32);
}

// Small parameters so that short test sequences still exercise each pattern's sparsity.
sb::Params small_params(const std::string& pattern) {
  const auto& spec = sb::find_pattern(pattern).params();
  sb::Params p;
  for (const auto& s : spec) {
    if (s.name == "seed") continue;
    // Smallest value >= 2 that is in range (1 for parameters like dilation or global count).
    int64_t v = std::max<int64_t>(s.min_value, std::min<int64_t>(s.max_value, s.name == "c" ? 1 : 3));
    p[s.name] = v;
  }
  return p;
}

// Logits at positions <= t must not depend on bytes after t, for every causal pattern and both position kinds.
TEST(LanguageModel, NoFutureLeakageForEveryCausalPattern) {
  torch::manual_seed(7);
  int checked = 0;
  for (const auto& pattern : sb::all_patterns()) {
    if (!pattern->supports_causal()) continue;
    for (const std::string positions : {"relative", "absolute"}) {
      SCOPED_TRACE(pattern->name() + " " + positions);
      auto cfg = tiny_config(pattern->name(), 37);
      cfg.pattern_params = small_params(pattern->name());
      cfg.positions = positions;
      sb::LanguageModel model(cfg);
      model->to(torch::kFloat64);
      model->eval();
      torch::NoGradGuard no_grad;
      auto bytes = torch::randint(0, 256, {2, 37}, torch::kInt64);
      const auto base = model->forward(bytes);
      ASSERT_EQ(base.sizes(), (std::vector<int64_t>{2, 37, 256}));
      for (int64_t t : {0, 1, 5, 16, 30, 35}) {
        auto changed = bytes.clone();
        changed.slice(1, t + 1, 37).copy_(torch::randint(0, 256, {2, 36 - t}, torch::kInt64));
        const auto out = model->forward(changed);
        EXPECT_TRUE(torch::equal(out.slice(1, 0, t + 1), base.slice(1, 0, t + 1))) << "t=" << t;
        // The change must be visible somewhere after t, or the check above proves nothing.
        EXPECT_FALSE(torch::equal(out, base)) << "t=" << t;
      }
      ++checked;
    }
  }
  EXPECT_GE(checked, 4);  // dense and window at least, both position kinds
}

TEST(LanguageModel, RefusesPatternsWithoutCausalForm) {
  for (const auto& pattern : sb::all_patterns()) {
    if (pattern->supports_causal()) continue;
    try {
      sb::LanguageModel model(tiny_config(pattern->name(), 16));
      ADD_FAILURE() << pattern->name() << " accepted for causal training";
    } catch (const sb::Error& e) {
      EXPECT_NE(std::string(e.what()).find("pattern '" + pattern->name() + "' has no causal form"),
                std::string::npos)
          << e.what();
    }
  }
}

TEST(LanguageModel, RejectsBadConfiguration) {
  auto expect_error = [](sb::ModelConfig c, const std::string& text) {
    try {
      sb::LanguageModel model(c);
      ADD_FAILURE() << "accepted: " << text;
    } catch (const sb::Error& e) {
      EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
    }
  };
  auto c = tiny_config("window", 16);
  c.heads = 3;
  expect_error(c, "dim: 16 is not divisible by heads (3)");
  c = tiny_config("no_such_pattern", 16);
  expect_error(c, "no_such_pattern");
  c = tiny_config("window", 16);
  c.positions = "rotary";
  expect_error(c, "positions: expected 'relative' or 'absolute', got 'rotary'");
  c = tiny_config("window", 16);
  sb::LanguageModel model(c);
  EXPECT_THROW(model->forward(torch::zeros({1, 17}, torch::kInt64)), sb::Error);
}

// The dense baseline and the graph op over the dense pattern compute the same function.
TEST(LanguageModel, DenseBaselineMatchesDensePatternGraph) {
  for (const std::string positions : {"relative", "absolute"}) {
    SCOPED_TRACE(positions);
    auto cfg = tiny_config("dense", 24);
    cfg.positions = positions;
    sb::LanguageModel graph_model(cfg);
    cfg.attention = "dense";
    sb::LanguageModel dense_model(cfg);
    graph_model->to(torch::kFloat64);
    dense_model->to(torch::kFloat64);
    ASSERT_EQ(graph_model->relations(), dense_model->relations());
    {
      torch::NoGradGuard no_grad;
      auto src = graph_model->named_parameters();
      for (auto& p : dense_model->named_parameters()) p.value().copy_(src[p.key()]);
    }
    graph_model->eval();
    dense_model->eval();
    auto bytes = torch::randint(0, 256, {2, 24}, torch::kInt64);
    auto a = graph_model->forward(bytes);
    auto b = dense_model->forward(bytes);
    EXPECT_TRUE(torch::allclose(a, b, 1e-10, 1e-10)) << (a - b).abs().max().item<double>();
    // Shorter sequences reuse the model (graph cached per length).
    auto c = graph_model->forward(bytes.slice(1, 0, 9));
    EXPECT_TRUE(torch::allclose(c, a.slice(1, 0, 9), 1e-10, 1e-10));
  }
}

// Extra nodes start as the pattern says and the tokens' logits come from the token nodes only.
TEST(LanguageModel, ShorterSequencesMatchPrefixForEveryCausalPattern) {
  torch::manual_seed(3);
  for (const auto& pattern : sb::all_patterns()) {
    if (!pattern->supports_causal()) continue;
    SCOPED_TRACE(pattern->name());
    auto cfg = tiny_config(pattern->name(), 20);
    cfg.pattern_params = small_params(pattern->name());
    sb::LanguageModel model(cfg);
    model->to(torch::kFloat64);
    model->eval();
    torch::NoGradGuard no_grad;
    auto bytes = torch::randint(0, 256, {1, 20}, torch::kInt64);
    auto full = model->forward(bytes);
    auto part = model->forward(bytes.slice(1, 0, 11));
    // Causal: the first 11 positions cannot tell whether the sequence continues.
    EXPECT_TRUE(torch::allclose(part, full.slice(1, 0, 11), 1e-9, 1e-9));
  }
}

double overfit(const std::string& pattern, const std::string& attention) {
  torch::manual_seed(11);
  auto cfg = tiny_config(pattern, 32);
  cfg.attention = attention;
  cfg.dim = 32;
  cfg.ffn = 64;
  if (pattern == "window") cfg.pattern_params["w"] = 8;
  if (pattern == "bpt") cfg.pattern_params["k"] = 2;
  sb::LanguageModel model(cfg);
  model->train();
  torch::optim::Adam opt(model->parameters(), torch::optim::AdamOptions(3e-3));
  auto batch = torch::randint(0, 256, {2, 33}, torch::kInt64);
  auto inputs = batch.slice(1, 0, 32), targets = batch.slice(1, 1, 33);
  double loss_v = 1e9;
  for (int step = 0; step < 800 && loss_v >= 0.1; ++step) {
    auto logits = model->forward(inputs);
    auto loss = torch::nn::functional::cross_entropy(logits.reshape({-1, 256}), targets.reshape({-1}));
    opt.zero_grad();
    loss.backward();
    opt.step();
    loss_v = loss.item<double>();
  }
  return loss_v;
}

TEST(LanguageModel, OverfitsTinyBatchDense) { EXPECT_LT(overfit("dense", "dense"), 0.1); }
TEST(LanguageModel, OverfitsTinyBatchWindow) { EXPECT_LT(overfit("window", "graph"), 0.1); }
TEST(LanguageModel, OverfitsTinyBatchBpt) {
  // Fails (does not skip) while bpt is missing from the registry: it is the model's default pattern.
  ASSERT_NO_THROW(sb::find_pattern("bpt"));
  EXPECT_LT(overfit("bpt", "graph"), 0.1);
}

}  // namespace

// Paired seeding: one seed gives two patterns' models the same value for every parameter they share (their relation
// tables differ in size), whatever else was drawn before; another seed gives other values; linear layers stay in
// LibTorch's U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
TEST(LanguageModel, ResetParametersPairsSharedWeightsAcrossPatterns) {
  auto cfg_bpt = tiny_config("bpt", 32);
  cfg_bpt.pattern_params = {{"k", 2}};
  auto cfg_win = tiny_config("window", 32);
  cfg_win.pattern_params = {{"w", 5}};
  sb::LanguageModel a(cfg_bpt), b(cfg_win), c(cfg_bpt);
  torch::randn({1000});  // global draws between the models change nothing
  a->reset_parameters(11);
  b->reset_parameters(11);
  c->reset_parameters(12);
  auto pb = b->named_parameters(), pc = c->named_parameters();
  int shared = 0, differ_in_shape = 0;
  for (const auto& item : a->named_parameters()) {
    const torch::Tensor& x = item.value();
    const torch::Tensor* y = pb.find(item.key());
    ASSERT_NE(y, nullptr) << item.key();
    if (x.sizes() != y->sizes()) {
      ++differ_in_shape;
      EXPECT_NE(item.key().find("rel_emb"), std::string::npos) << item.key();
      continue;
    }
    ++shared;
    EXPECT_TRUE(torch::equal(x, *y)) << item.key();
    if (item.key().find("norm") == std::string::npos) {
      EXPECT_FALSE(torch::equal(x, pc[item.key()])) << item.key() << " is the same under another seed";
    }
    if (item.key().find("layer0_ff1.weight") != std::string::npos) {
      EXPECT_LE(x.abs().max().item<double>(), 1.0 / std::sqrt(16.0));
      EXPECT_GT(x.abs().max().item<double>(), 0.8 / std::sqrt(16.0));
    }
  }
  EXPECT_EQ(differ_in_shape, 2);  // one relation table per layer
  EXPECT_GT(shared, 20);
}
