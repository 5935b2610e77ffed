// Facts about the machine for records and skip decisions (plain C++, no LibTorch).
#pragma once

#include <cstdint>
#include <string>

namespace sb {

// MemAvailable from /proc/meminfo (free plus reclaimable cache); free physical pages when unreadable.
int64_t available_memory_bytes();

// The CPU's model name from /proc/cpuinfo ("unknown" when absent).
std::string cpu_model();

}  // namespace sb
