// sb::MemoryTracker: a c10::Allocator for kCPU that keeps byte counters and serves large blocks from a cache.
#include "harness/measure/memory_tracker.h"

#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
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

// Large blocks are mapped by us, 2 MiB aligned with transparent huge pages asked for, and kept after their tensor
// dies for the next request of about their size: the plain allocator maps every block of more than 32 MiB afresh,
// and a fresh page costs a fault and a clear per 4 KiB (a quarter of a bpt k=4 forward+backward at n=8192).
constexpr size_t kLargeBlock = size_t{2} << 20;
constexpr size_t kHugePage = size_t{2} << 20;

struct Block {
  int64_t bytes;    // asked for (what the counters count)
  size_t reserved;  // mapped by us; 0: the wrapped allocator's block
};

// Live tracked blocks by data pointer. The context of every DataPtr handed out is its data pointer (as LibTorch's
// raw_allocate/raw_deallocate require), so the block is looked up here on free.
std::mutex g_blocks_mutex;
std::unordered_map<void*, Block> g_blocks;
std::multimap<size_t, void*> g_cached;  // idle large blocks by reserved size
int64_t g_cached_bytes = 0;
int64_t g_cache_limit = 0;  // 0: large blocks are not cached (SB_HOST_BLOCK_CACHE=0)
c10::DeleterFnPtr g_inner_deleter = nullptr;

void* map_block(size_t reserved) {
  const size_t len = reserved + kHugePage;
  void* raw = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  const uintptr_t start = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = (start + kHugePage - 1) / kHugePage * kHugePage;
  if (aligned > start) munmap(raw, aligned - start);
  if (const size_t tail = start + len - (aligned + reserved); tail > 0) {
    munmap(reinterpret_cast<void*>(aligned + reserved), tail);
  }
  void* p = reinterpret_cast<void*>(aligned);
#ifdef MADV_HUGEPAGE
  madvise(p, reserved, MADV_HUGEPAGE);  // advice only: without THP the block still works
#endif
  return p;
}

// Frees every idle large block (caller holds g_blocks_mutex).
void drop_cached_locked() {
  for (const auto& [reserved, p] : g_cached) munmap(p, reserved);
  g_cached.clear();
  g_cached_bytes = 0;
}

// A large block of at least `reserved` bytes: an idle one of at most 5/4 that size, else a fresh mapping (after
// dropping the idle ones if the first mapping fails). Returns its size in *got.
void* take_large(size_t reserved, size_t* got) {
  {
    std::lock_guard<std::mutex> lock(g_blocks_mutex);
    auto it = g_cached.lower_bound(reserved);
    if (it != g_cached.end() && it->first <= reserved + reserved / 4) {
      *got = it->first;
      void* p = it->second;
      g_cached_bytes -= static_cast<int64_t>(it->first);
      g_cached.erase(it);
      return p;
    }
  }
  *got = reserved;
  if (void* p = map_block(reserved)) return p;
  {
    std::lock_guard<std::mutex> lock(g_blocks_mutex);
    drop_cached_locked();
  }
  return map_block(reserved);
}

void release(void* data) {
  Block block{0, 0};
  bool unmap = false;
  {
    std::lock_guard<std::mutex> lock(g_blocks_mutex);
    auto it = g_blocks.find(data);
    if (it != g_blocks.end()) {
      block = it->second;
      g_blocks.erase(it);
    }
    if (block.reserved > 0) {
      unmap = g_cached_bytes + static_cast<int64_t>(block.reserved) > g_cache_limit;
      if (!unmap) {
        g_cached.emplace(block.reserved, data);
        g_cached_bytes += static_cast<int64_t>(block.reserved);
      }
    }
  }
  g_current.fetch_sub(block.bytes, std::memory_order_relaxed);
  if (block.reserved == 0) g_inner_deleter(data);
  else if (unmap) munmap(data, block.reserved);
}

// SB_HOST_BLOCK_CACHE=0 turns the cache of large blocks off; otherwise it holds up to a quarter of physical memory.
int64_t cache_limit_from_env() {
  const char* v = std::getenv("SB_HOST_BLOCK_CACHE");
  if (v != nullptr && std::strcmp(v, "0") == 0) return 0;
  const int64_t pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? pages / 4 * page : int64_t{1} << 30;
}

class CountingAllocator final : public c10::Allocator {
 public:
  explicit CountingAllocator(c10::Allocator* inner) : inner_(inner) {}

  c10::DataPtr allocate(size_t n) SB_ALLOCATE_CONST override {
    if (n >= kLargeBlock && g_cache_limit > 0) return allocate_large(n);
    c10::DataPtr inner = inner_->allocate(n);
    void* data = inner.get();
    const c10::Device device = inner.device();
    if (data == nullptr) return inner;  // zero-byte allocations carry nothing to count
    // The wrapped CPU allocator frees by data pointer with one deleter; take ownership of the block.
    TORCH_CHECK(inner.get_context() == data && inner.get_deleter() == g_inner_deleter,
                "MemoryTracker: the wrapped CPU allocator does not free by data pointer");
    inner.release_context();
    track(data, Block{static_cast<int64_t>(n), 0});
    return {data, data, &release, device};
  }

  c10::DeleterFnPtr raw_deleter() const override { return &release; }

#ifdef SB_ALLOCATOR_COPY_DATA
  void copy_data(void* dest, const void* src, std::size_t count) const override { inner_->copy_data(dest, src, count); }
#endif

 private:
  static c10::DataPtr allocate_large(size_t n) {
    size_t reserved = 0;
    void* data = take_large((n + kHugePage - 1) / kHugePage * kHugePage, &reserved);
    TORCH_CHECK(data != nullptr, "MemoryTracker: out of memory: cannot map ", reserved, " bytes for a CPU tensor of ",
                n, " bytes");
    track(data, Block{static_cast<int64_t>(n), reserved});
    return {data, data, &release, c10::Device(c10::DeviceType::CPU)};
  }
  static void track(void* data, Block block) {
    {
      std::lock_guard<std::mutex> lock(g_blocks_mutex);
      g_blocks[data] = block;
    }
    const int64_t now = g_current.fetch_add(block.bytes, std::memory_order_relaxed) + block.bytes;
    int64_t peak = g_peak.load(std::memory_order_relaxed);
    while (now > peak && !g_peak.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
    }
  }

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
  g_cache_limit = cache_limit_from_env();
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

int64_t MemoryTracker::cached_bytes() {
  std::lock_guard<std::mutex> lock(g_blocks_mutex);
  return g_cached_bytes;
}

void MemoryTracker::release_cached() {
  std::lock_guard<std::mutex> lock(g_blocks_mutex);
  drop_cached_locked();
}

const char* MemoryTracker::large_blocks() {
  std::lock_guard<std::mutex> lock(g_install_mutex);
  if (g_allocator == nullptr) return "untracked";
  return g_cache_limit > 0 ? "cached" : "plain";
}

}  // namespace sb
