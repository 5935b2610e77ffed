// MemoryTracker tests: the counting CPU allocator's current and peak bytes follow tensor lifetimes; large blocks
// are kept once free and serve the next request of about their size.
// Run: ctest -R MemoryTracker
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

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

bool cache_off() {
  const char* v = std::getenv("SB_HOST_BLOCK_CACHE");
  return v != nullptr && std::strcmp(v, "0") == 0;
}

TEST(MemoryTracker, KeepsLargeBlocksForReuse) {
  if (cache_off()) GTEST_SKIP() << "SB_HOST_BLOCK_CACHE=0 turns the cache of large blocks off";
  MemoryTracker::install();
  EXPECT_STREQ(MemoryTracker::large_blocks(), "cached");
  MemoryTracker::release_cached();
  EXPECT_EQ(MemoryTracker::cached_bytes(), 0);
  const int64_t base = MemoryTracker::current_bytes();
  void* first = nullptr;
  {
    torch::Tensor a = torch::full({(3 << 20) / 4 + 5}, 1.5f);  // 3 MiB + 20 bytes: a 4 MiB block
    first = a.data_ptr();
    EXPECT_EQ(reinterpret_cast<uintptr_t>(first) % (2 << 20), 0u) << "large blocks are 2 MiB aligned";
    EXPECT_EQ(MemoryTracker::current_bytes() - base, (3 << 20) + 20) << "counted as asked, not as reserved";
    EXPECT_EQ(MemoryTracker::cached_bytes(), 0);
  }
  EXPECT_EQ(MemoryTracker::current_bytes(), base);
  EXPECT_EQ(MemoryTracker::cached_bytes(), 4 << 20);
  {
    torch::Tensor b = torch::zeros({(4 << 20) / 4});  // 4 MiB: the kept block
    EXPECT_EQ(b.data_ptr(), first);
    EXPECT_EQ(MemoryTracker::cached_bytes(), 0);
    EXPECT_EQ(b.sum().item<float>(), 0.0f);
    torch::Tensor c = torch::empty({(4 << 20) / 4});  // nothing kept now: a fresh block
    EXPECT_NE(c.data_ptr(), first);
  }
  EXPECT_EQ(MemoryTracker::cached_bytes(), 8 << 20);
  {
    // More than 5/4 of a kept block's size takes a fresh block; the kept ones stay.
    torch::Tensor d = torch::empty({(6 << 20) / 4});
    EXPECT_NE(d.data_ptr(), first);
    EXPECT_EQ(MemoryTracker::cached_bytes(), 8 << 20);
  }
  MemoryTracker::release_cached();
  EXPECT_EQ(MemoryTracker::cached_bytes(), 0);
  EXPECT_EQ(MemoryTracker::current_bytes(), base);
}

// Threads taking and returning large and small blocks at once: every block they get is theirs alone (their
// values survive the others' traffic), and the counters come back to where they were.
TEST(MemoryTracker, SharedAcrossThreads) {
  MemoryTracker::install();
  const int64_t base = MemoryTracker::current_bytes();
  constexpr int kThreads = 4, kRounds = 40;
  std::vector<int> bad(kThreads, 0);
  std::vector<std::thread> pool;
  for (int t = 0; t < kThreads; ++t) {
    pool.emplace_back([t, &bad] {
      for (int r = 0; r < kRounds; ++r) {
        const int64_t elems = ((r % 5) + 1) * (int64_t{1} << 19) + (r % 3) * 1000 + t;  // 2-10 MiB, some small
        torch::Tensor a = torch::full({elems}, static_cast<float>(t * 1000 + r));
        torch::Tensor small = torch::full({1000 + r}, static_cast<float>(t));
        std::this_thread::yield();
        if (a.min().item<float>() != a.max().item<float>() || a[0].item<float>() != t * 1000 + r) ++bad[t];
        if (small.sum().item<float>() != static_cast<float>(t) * (1000 + r)) ++bad[t];
      }
    });
  }
  for (std::thread& th : pool) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(bad[t], 0) << "thread " << t;
  EXPECT_EQ(MemoryTracker::current_bytes(), base);
  MemoryTracker::release_cached();
  EXPECT_EQ(MemoryTracker::cached_bytes(), 0);
}

}  // namespace
}  // namespace sb::test
