// sb::MemoryTracker: counts LibTorch CPU tensor memory (current and peak bytes) by wrapping the CPU allocator.
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
};

}  // namespace sb
