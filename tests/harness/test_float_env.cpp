// Subnormal floats: SB_DENORMALS picks flush-to-zero (default) or IEEE subnormals, on every intra-op and BLAS thread.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include "common/error.h"
#include "harness/measure/blas.h"
#include "harness/measure/float_env.h"

namespace {

// 2^-140, a subnormal float, built from its bits so the compiler cannot fold it.
float subnormal() {
  const unsigned bits = 1u << 9;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// Entries of a 1024 x 256 x 1024 product (two BLAS threads split it), each one term 1e-20 * 1e-20, that are not zero:
// those a thread that keeps subnormals computed. Read as bits: this thread's DAZ reads 1e-40 as zero.
int64_t blas_subnormal_entries() {
  at::set_num_threads(2);
  sb::set_blas_threads(2);
  at::Tensor a = at::zeros({1024, 256}, at::kFloat);
  at::Tensor b = at::zeros({256, 1024}, at::kFloat);
  a.select(1, 255).fill_(1e-20);
  b.select(0, 255).fill_(1e-20);
  return at::mm(a, b).view(at::kInt).ne(0).sum().item<int64_t>();
}

// Sets SB_DENORMALS (nullptr: unset) and configures; restores the default afterwards.
struct Denormals {
  explicit Denormals(const char* value) {
    if (value != nullptr) setenv("SB_DENORMALS", value, 1);
    else unsetenv("SB_DENORMALS");
  }
  ~Denormals() {
    unsetenv("SB_DENORMALS");
    sb::configure_denormals();
  }
};

}  // namespace

#if defined(__x86_64__) || defined(__i386__)

TEST(Denormals, FlushedByDefaultOnEveryIntraOpThread) {
  at::set_num_threads(2);  // workers started before the call get it too
  at::parallel_for(0, 2, 1, [](int64_t, int64_t) {});
  Denormals env(nullptr);
  sb::configure_denormals();
  EXPECT_EQ(sb::denormals_mode(), "flushed");
  volatile float tiny = 1e-30f, small = 1e-10f, sub = subnormal();
  EXPECT_EQ(tiny * small, 0.0f);  // 1e-40 would be subnormal: flushed to zero (FTZ)
  EXPECT_EQ(sub + 0.0f, 0.0f);    // a subnormal input reads as zero (DAZ)
}

TEST(Denormals, KeepLeavesIeeeSubnormals) {
  at::set_num_threads(2);
  Denormals env("keep");
  sb::configure_denormals();
  EXPECT_EQ(sb::denormals_mode(), "kept");
  volatile float tiny = 1e-30f, small = 1e-10f, sub = subnormal();
  EXPECT_GT(tiny * small, 0.0f);
  EXPECT_EQ(sub + 0.0f, subnormal());
}

TEST(Denormals, BlasThreadsFollowTheMode) {
  {
    Denormals env(nullptr);
    sb::configure_denormals();
    EXPECT_EQ(blas_subnormal_entries(), 0);
  }
  Denormals env("keep");
  sb::configure_denormals();
  EXPECT_EQ(blas_subnormal_entries(), 1024 * 1024);
}

#endif

TEST(Denormals, UnknownValueIsAnErrorNamingIt) {
  Denormals env("fast");
  try {
    sb::configure_denormals();
    FAIL() << "SB_DENORMALS=fast was accepted";
  } catch (const sb::Error& e) {
    EXPECT_STREQ(e.what(), "SB_DENORMALS=fast: expected flush (the default) or keep");
  }
}
