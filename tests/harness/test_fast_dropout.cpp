// fast_dropout tests: drop rate, scaling, pairwise independence, backward reuses the forward mask,
// reproducibility from torch::manual_seed, identity when off, and the bad-p message.
// Run: ctest -R FastDropout
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>

#include "harness/lm/fast_dropout.h"
#include "common/error.h"

namespace sb::test {
namespace {

TEST(FastDropout, DropRateAndScale) {
  torch::manual_seed(3);
  const int64_t n = 1 << 20;
  for (double p : {0.1, 0.5}) {
    auto y = fast_dropout(torch::ones({n}), p, true);
    auto dropped = (y == 0).to(torch::kFloat64);
    const double rate = dropped.mean().item<double>();
    const double sigma = std::sqrt(p * (1 - p) / n);
    EXPECT_NEAR(rate, p, 6 * sigma) << "p=" << p;
    // Kept elements are scaled by exactly 1/(1-p).
    auto kept = y.masked_select(y != 0);
    EXPECT_TRUE(torch::allclose(kept, torch::full_like(kept, 1.0 / (1.0 - p)))) << "p=" << p;
    // Neighbours are independent: both dropped at rate p^2.
    const double pairs = (dropped.slice(0, 0, n - 1) * dropped.slice(0, 1, n)).mean().item<double>();
    EXPECT_NEAR(pairs, p * p, 6 * std::sqrt(p * p * (1 - p * p) / n)) << "p=" << p;
  }
}

TEST(FastDropout, BackwardUsesTheForwardMask) {
  torch::manual_seed(4);
  for (auto dtype : {torch::kFloat32, torch::kFloat64}) {
    auto x = (torch::rand({3, 257, 33}, dtype) + 0.5).requires_grad_();
    auto w = torch::randn({3, 257, 33}, dtype);
    auto y = fast_dropout(x, 0.25, true);
    (y * w).sum().backward();
    const auto keep = (y != 0).to(dtype);
    EXPECT_GT(keep.mean().item<double>(), 0.6);
    EXPECT_TRUE(torch::allclose(y, x.detach() * keep / 0.75));
    EXPECT_TRUE(torch::allclose(x.grad(), w * keep / 0.75));
  }
}

TEST(FastDropout, ReproducibleFromTheSeedAndFreshPerCall) {
  auto x = torch::ones({4096});
  torch::manual_seed(7);
  auto a = fast_dropout(x, 0.3, true);
  auto b = fast_dropout(x, 0.3, true);
  torch::manual_seed(7);
  auto a2 = fast_dropout(x, 0.3, true);
  EXPECT_TRUE(torch::equal(a, a2));
  EXPECT_FALSE(torch::equal(a, b));
}

TEST(FastDropout, NonContiguousInput) {
  torch::manual_seed(8);
  auto x = torch::rand({64, 48}).t() + 1.0;
  auto y = fast_dropout(x, 0.5, true);
  ASSERT_EQ(y.sizes(), x.sizes());
  auto keep = y != 0;
  EXPECT_TRUE(torch::allclose(y.masked_select(keep), (x * 2.0).masked_select(keep)));
}

TEST(FastDropout, IdentityWhenOff) {
  auto x = torch::randn({10, 10});
  EXPECT_TRUE(fast_dropout(x, 0.5, false).is_same(x));
  EXPECT_TRUE(fast_dropout(x, 0.0, true).is_same(x));
}

TEST(FastDropout, RejectsImpossibleP) {
  auto x = torch::randn({4});
  for (double p : {1.0, -0.1, std::nan("")}) {
    try {
      fast_dropout(x, p, true);
      ADD_FAILURE() << "p=" << p << " accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("dropout: expected p in [0, 1)"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace sb::test
