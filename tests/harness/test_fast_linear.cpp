// fast_linear and fast_gelu tests: outputs and gradients against the double-precision reference (with and without
// bias, 2-D and 3-D inputs, strided inputs, the long inner dimension of the weight gradient), only the requested
// gradients, repeatable results, LibTorch's own result for what oneDNN does not take, the backend's name and
// SB_MATMUL.
// Run: ctest -R FastLinear
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdlib>
#include <string>

#include "common/error.h"
#include "harness/lm/fast_linear.h"

namespace sb::test {
namespace {

// Largest |a - b| relative to the largest |b| (1 where b is all zeros).
double rel_err(const torch::Tensor& a, const torch::Tensor& b) {
  const double scale = std::max(b.abs().max().item<double>(), 1e-30);
  return (a.to(torch::kFloat64) - b).abs().max().item<double>() / scale;
}

struct Case {
  std::vector<int64_t> x_shape;
  int64_t n_out;
  bool bias;
};

TEST(FastLinear, MatchesDoubleReferenceForwardAndBackward) {
  torch::manual_seed(11);
  // The model's products (rows of 4 x 1023 nodes, K 128 or 512), odd sizes, one row and a 2-D input.
  const Case cases[] = {{{4, 1023, 128}, 384, true}, {{4, 1023, 512}, 128, true}, {{4, 1023, 128}, 256, false},
                        {{3, 37, 33}, 17, true},    {{1, 1, 64}, 5, false},     {{129, 7}, 130, true}};
  for (const Case& c : cases) {
    const int64_t K = c.x_shape.back();
    auto x = torch::randn(c.x_shape).requires_grad_();
    auto w = (torch::randn({c.n_out, K}) / std::sqrt(static_cast<double>(K))).requires_grad_();
    auto b = c.bias ? torch::randn({c.n_out}).requires_grad_() : torch::Tensor();
    auto y = fast_linear(x, w, b);
    auto shape = c.x_shape;
    shape.back() = c.n_out;
    ASSERT_EQ(y.sizes().vec(), shape);
    ASSERT_EQ(y.scalar_type(), torch::kFloat32);
    const auto g = torch::randn(shape);
    y.backward(g);

    auto xd = x.detach().to(torch::kFloat64).requires_grad_();
    auto wd = w.detach().to(torch::kFloat64).requires_grad_();
    auto bd = c.bias ? b.detach().to(torch::kFloat64).requires_grad_() : torch::Tensor();
    auto yd = torch::linear(xd, wd, bd);
    yd.backward(g.to(torch::kFloat64));
    const std::string what = "x " + c10::str(c.x_shape) + " -> " + std::to_string(c.n_out);
    EXPECT_LT(rel_err(y.detach(), yd.detach()), 1e-5) << what;
    EXPECT_LT(rel_err(x.grad(), xd.grad()), 1e-5) << what;
    EXPECT_LT(rel_err(w.grad(), wd.grad()), 1e-5) << what;  // inner dimension: every row of x (up to 4092)
    if (c.bias) EXPECT_LT(rel_err(b.grad(), bd.grad()), 1e-5) << what;
  }
}

TEST(FastLinear, StridedInputAndRequestedGradientsOnly) {
  torch::manual_seed(12);
  const auto base = torch::randn({48, 2, 40});
  const auto x = base.select(1, 1);  // [48, 40], row stride 80: not contiguous
  ASSERT_FALSE(x.is_contiguous());
  auto w = torch::randn({24, 40}).requires_grad_();
  auto b = torch::randn({24});  // no gradient wanted for it, nor for x
  auto y = fast_linear(x, w, b);
  EXPECT_LT(rel_err(y.detach(), torch::linear(x.to(torch::kFloat64), w.detach().to(torch::kFloat64),
                                              b.to(torch::kFloat64))),
            1e-5);
  y.sum().backward();
  ASSERT_TRUE(w.grad().defined());
  EXPECT_LT(rel_err(w.grad(), x.to(torch::kFloat64).sum(0).expand({24, 40})), 1e-5);
  EXPECT_FALSE(b.grad().defined());
}

TEST(FastLinear, RepeatableBitwise) {
  torch::manual_seed(13);
  const auto x = torch::randn({2, 300, 128});
  const auto w = torch::randn({512, 128});
  const auto b = torch::randn({512});
  EXPECT_TRUE(torch::equal(fast_linear(x, w, b), fast_linear(x, w, b)));
}

TEST(FastLinear, OtherDtypesRunLibTorchLinear) {
  torch::manual_seed(14);
  for (auto dtype : {torch::kFloat64, torch::kBFloat16}) {
    const auto x = torch::randn({5, 9, 16}).to(dtype);
    const auto w = torch::randn({7, 16}).to(dtype);
    const auto b = torch::randn({7}).to(dtype);
    const auto y = fast_linear(x, w, b);
    EXPECT_EQ(y.scalar_type(), dtype);
    EXPECT_TRUE(torch::equal(y, torch::linear(x, w, b))) << dtype;
  }
}

TEST(FastLinear, BackendNamed) {
  const std::string name = matmul_backend();
  const char* env = std::getenv("SB_MATMUL");
  if (env != nullptr && std::string(env) == "torch") {
    EXPECT_EQ(name.rfind("libtorch", 0), 0u) << name;
    // LibTorch's own product, bit for bit.
    const auto x = torch::randn({33, 64}), w = torch::randn({20, 64}), b = torch::randn({20});
    EXPECT_TRUE(torch::equal(fast_linear(x, w, b), torch::linear(x, w, b)));
    return;
  }
  // "onednn <major>.<minor>.<patch> (<isa>)" where the build has oneDNN, else "libtorch".
  if (name != "libtorch") {
    EXPECT_EQ(name.rfind("onednn ", 0), 0u) << name;
    EXPECT_NE(name.find(" ("), std::string::npos) << name;
    EXPECT_EQ(name.back(), ')') << name;
  }
}

TEST(FastGelu, MatchesDoubleReferenceForwardAndBackward) {
  torch::manual_seed(15);
  // The model's [4, 1023, 512] activations, wide-ranged values (the tails of erf), an odd size.
  for (const auto& shape : {std::vector<int64_t>{4, 1023, 512}, std::vector<int64_t>{3, 77}}) {
    auto x = (torch::randn(shape) * 3).requires_grad_();
    auto y = fast_gelu(x);
    const auto g = torch::randn(shape);
    y.backward(g);
    auto xd = x.detach().to(torch::kFloat64).requires_grad_();
    auto yd = torch::gelu(xd);
    yd.backward(g.to(torch::kFloat64));
    EXPECT_LT(rel_err(y.detach(), yd.detach()), 1e-6) << c10::str(shape);
    EXPECT_LT(rel_err(x.grad(), xd.grad()), 1e-5) << c10::str(shape);
  }
  // Other dtypes: LibTorch's own GELU.
  const auto xb = torch::randn({9, 5}, torch::kFloat64);
  EXPECT_TRUE(torch::equal(fast_gelu(xb), torch::gelu(xb)));
}

// SB_MATMUL, read at first use (ctest runs this with the variable set; without it the test skips): "onednn" and
// "torch" pick, anything else is an error naming the value.
TEST(FastLinear, EnvironmentVariablePicksOrFails) {
  const char* env = std::getenv("SB_MATMUL");
  if (env == nullptr) GTEST_SKIP() << "SB_MATMUL is not set";
  const std::string v = env;
  const auto x = torch::randn({4, 8}), w = torch::randn({3, 8});
  if (v == "onednn" || v == "torch") {
    EXPECT_LT(rel_err(fast_linear(x, w), torch::linear(x.to(torch::kFloat64), w.to(torch::kFloat64))), 1e-5);
    return;
  }
  try {
    fast_linear(x, w);
    FAIL() << "expected sb::Error for SB_MATMUL=" << v;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("SB_MATMUL=" + v), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace sb::test
