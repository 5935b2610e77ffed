// MemoryTracker tests: the counting CPU allocator's current and peak bytes follow tensor lifetimes.
// Run: ctest -R MemoryTracker
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "harness/measure/memory_tracker.h"

namespace sb::test {
namespace {

TEST(MemoryTracker, CountsTensorBytes) {
  MemoryTracker::install();
  EXPECT_TRUE(MemoryTracker::installed());
  MemoryTracker::reset_peak();
  const int64_t base = MemoryTracker::current_bytes();
  {
    torch::Tensor a = torch::empty({1 << 20}, torch::kFloat32);  // 4 MiB
    EXPECT_EQ(MemoryTracker::current_bytes() - base, 4 << 20);
    torch::Tensor b = torch::empty({1 << 18}, torch::kFloat32);  // 1 MiB
    EXPECT_EQ(MemoryTracker::peak_bytes() - base, 5 << 20);
  }
  EXPECT_EQ(MemoryTracker::current_bytes(), base);
  EXPECT_EQ(MemoryTracker::peak_bytes() - base, 5 << 20);
  MemoryTracker::reset_peak();
  EXPECT_EQ(MemoryTracker::peak_bytes(), base);
}

}  // namespace
}  // namespace sb::test
