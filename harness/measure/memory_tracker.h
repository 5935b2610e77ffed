// sb::MemoryTracker: counts LibTorch CPU tensor memory (current and peak bytes) by wrapping the CPU allocator, and
// keeps freed large blocks for reuse.
#pragma once

#include <cstdint>

namespace sb {

// Process-wide. install() replaces LibTorch's CPU allocator with a counting wrapper around it (idempotent;
// tensors allocated before install() are not counted). Typical use around a measured region:
//   MemoryTracker::install(); MemoryTracker::reset_peak(); run(); int64_t used = MemoryTracker::peak_bytes() - base;
// where base = MemoryTracker::current_bytes() read just after reset_peak().
class MemoryTracker {
 public:
  static void install();
  static bool installed();
  // Bytes held by live tracked allocations.
  static int64_t current_bytes();
  // Highest current_bytes() since the last reset_peak() (or install()).
  static int64_t peak_bytes();
  // Sets the peak to the current value.
  static void reset_peak();

  // Blocks of 2 MiB and more are mapped with transparent huge pages asked for and, once free, kept (up to a quarter
  // of physical memory) for the next request of about their size, so repeated calls do not fault in fresh pages.
  // They count as tensor memory only while live. SB_HOST_BLOCK_CACHE=0 turns the keeping off.
  // Bytes of idle kept blocks (memory the process holds beyond current_bytes()).
  static int64_t cached_bytes();
  // Returns the idle kept blocks to the system.
  static void release_cached();
  // How large blocks are served, for records: "cached", "plain" (SB_HOST_BLOCK_CACHE=0) or "untracked".
  static const char* large_blocks();
};

}  // namespace sb
