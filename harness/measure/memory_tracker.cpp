// sb::MemoryTracker: a c10::Allocator for kCPU that forwards to the previous one and keeps byte counters.
#include "harness/measure/memory_tracker.h"

#include <atomic>
#include <mutex>
#include <unordered_map>

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <torch/version.h>

// LibTorch 2.3 made Allocator::allocate non-const and requires copy_data (built against 1.13 and 2.11).
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
#define SB_ALLOCATE_CONST
#define SB_ALLOCATOR_COPY_DATA 1
#else
#define SB_ALLOCATE_CONST const
#endif

namespace sb {

namespace {

std::atomic<int64_t> g_current{0};
std::atomic<int64_t> g_peak{0};

// Sizes of live tracked blocks by data pointer. The context of every DataPtr handed out is its data pointer
// (as LibTorch's raw_allocate/raw_deallocate require), so the size is looked up here on free.
std::mutex g_blocks_mutex;
std::unordered_map<void*, int64_t> g_blocks;
c10::DeleterFnPtr g_inner_deleter = nullptr;

void release(void* data) {
  int64_t bytes = 0;
  {
    std::lock_guard<std::mutex> lock(g_blocks_mutex);
    auto it = g_blocks.find(data);
    if (it != g_blocks.end()) {
      bytes = it->second;
      g_blocks.erase(it);
    }
  }
  g_current.fetch_sub(bytes, std::memory_order_relaxed);
  g_inner_deleter(data);
}

class CountingAllocator final : public c10::Allocator {
 public:
  explicit CountingAllocator(c10::Allocator* inner) : inner_(inner) {}

  c10::DataPtr allocate(size_t n) SB_ALLOCATE_CONST override {
    c10::DataPtr inner = inner_->allocate(n);
    void* data = inner.get();
    const c10::Device device = inner.device();
    if (data == nullptr) return inner;  // zero-byte allocations carry nothing to count
    // The wrapped CPU allocator frees by data pointer with one deleter; take ownership of the block.
    TORCH_CHECK(inner.get_context() == data && inner.get_deleter() == g_inner_deleter,
                "MemoryTracker: the wrapped CPU allocator does not free by data pointer");
    inner.release_context();
    const int64_t bytes = static_cast<int64_t>(n);
    {
      std::lock_guard<std::mutex> lock(g_blocks_mutex);
      g_blocks[data] = bytes;
    }
    const int64_t now = g_current.fetch_add(bytes, std::memory_order_relaxed) + bytes;
    int64_t peak = g_peak.load(std::memory_order_relaxed);
    while (now > peak && !g_peak.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
    }
    return {data, data, &release, device};
  }

  c10::DeleterFnPtr raw_deleter() const override { return &release; }

#ifdef SB_ALLOCATOR_COPY_DATA
  void copy_data(void* dest, const void* src, std::size_t count) const override { inner_->copy_data(dest, src, count); }
#endif

 private:
  c10::Allocator* inner_;
};

std::mutex g_install_mutex;
CountingAllocator* g_allocator = nullptr;

}  // namespace

void MemoryTracker::install() {
  std::lock_guard<std::mutex> lock(g_install_mutex);
  if (g_allocator != nullptr) return;
  c10::Allocator* inner = c10::GetAllocator(c10::DeviceType::CPU);
  g_inner_deleter = inner->raw_deleter();
  TORCH_CHECK(g_inner_deleter != nullptr, "MemoryTracker: the CPU allocator has no raw deleter to wrap");
  g_allocator = new CountingAllocator(inner);  // lives for the process
  c10::SetAllocator(c10::DeviceType::CPU, g_allocator, /*priority=*/100);
  g_peak.store(g_current.load());
}

bool MemoryTracker::installed() {
  std::lock_guard<std::mutex> lock(g_install_mutex);
  return g_allocator != nullptr;
}

int64_t MemoryTracker::current_bytes() { return g_current.load(); }

int64_t MemoryTracker::peak_bytes() { return g_peak.load(); }

void MemoryTracker::reset_peak() { g_peak.store(g_current.load()); }

}  // namespace sb
