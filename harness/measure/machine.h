// Facts about the machine for records and skip decisions (plain C++, no LibTorch).
#pragma once

#include <cstdint>
#include <string>

namespace sb {

// MemAvailable from /proc/meminfo (free plus reclaimable cache); free physical pages when unreadable.
int64_t available_memory_bytes();

// The CPU's model name from /proc/cpuinfo ("unknown" when absent) with what tells machines of one name apart, e.g.
// "AMD EPYC (family 25 model 17, AVX-512)": x86 family and model numbers and the widest vector extension the CPU
// reports (AVX-512, AVX2, AVX, SSE4.2; SVE or NEON on ARM). Virtual machines often report only a generic name.
std::string cpu_summary();

// The same from /proc/cpuinfo's text (for tests).
std::string cpu_summary_from(const std::string& cpuinfo);

}  // namespace sb
