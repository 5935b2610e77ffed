// sb::MemoryTracker: a c10::Allocator for kCPU that forwards to the previous one and keeps byte counters.
#include "kernels/torch/memory_tracker.h"

#include <atomic>
#include <mutex>

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>

namespace sb {

namespace {

std::atomic<int64_t> g_current{0};
std::atomic<int64_t> g_peak{0};

// What each tracked block needs to be freed: the wrapped allocator's DataPtr and the size counted.
struct TrackedBlock {
  c10::DataPtr inner;
  int64_t bytes;
};

void release(void* ctx) {
  auto* block = static_cast<TrackedBlock*>(ctx);
  g_current.fetch_sub(block->bytes, std::memory_order_relaxed);
  delete block;  // frees through the wrapped allocator's deleter
}

class CountingAllocator final : public c10::Allocator {
 public:
  explicit CountingAllocator(c10::Allocator* inner) : inner_(inner) {}

  c10::DataPtr allocate(size_t n) const override {
    c10::DataPtr inner = inner_->allocate(n);
    void* data = inner.get();
    const c10::Device device = inner.device();
    auto* block = new TrackedBlock{std::move(inner), static_cast<int64_t>(n)};
    const int64_t now = g_current.fetch_add(block->bytes, std::memory_order_relaxed) + block->bytes;
    int64_t peak = g_peak.load(std::memory_order_relaxed);
    while (now > peak && !g_peak.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
    }
    return {data, block, &release, device};
  }

  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }  // blocks carry their own context

 private:
  c10::Allocator* inner_;
};

std::mutex g_install_mutex;
CountingAllocator* g_allocator = nullptr;

}  // namespace

void MemoryTracker::install() {
  std::lock_guard<std::mutex> lock(g_install_mutex);
  if (g_allocator != nullptr) return;
  g_allocator = new CountingAllocator(c10::GetAllocator(c10::DeviceType::CPU));  // lives for the process
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
