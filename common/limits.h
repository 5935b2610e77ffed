// Ranges of options that the CLI and scenario files share (each limit stated once).
#pragma once

#include <cstdint>

namespace sb {

// CPU threads: 0 = all cores; more than this only spins creating threads.
constexpr int64_t kMaxThreads = 1024;
// Tokens per sequence (scenario lengths, training context).
constexpr int64_t kMaxLength = int64_t{1} << 24;

// Bytes of physical memory on this machine (0 when unknown).
int64_t physical_memory_bytes();

}  // namespace sb
