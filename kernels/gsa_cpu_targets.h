// CPU SIMD targets of the CPU kernels: which this machine can run, which is active, and pinning one.
// Stand-in interface: the CPU kernels currently compile one target (AVX-512 when the compiler targets it,
// else the generic loops), so exactly one target is listed; a runtime-dispatched core replaces this file.
#pragma once

#include <string>
#include <vector>

namespace sb {

// Targets this CPU can run, best first (e.g. "AVX512" or "generic").
std::vector<std::string> gsa_cpu_targets();
// The target gsa_forward_cpu / gsa_backward_cpu run now.
std::string gsa_cpu_target();
// Makes `target` (one of gsa_cpu_targets()) the active one; throws sb::Error naming the valid ones otherwise.
void gsa_cpu_pin_target(const std::string& target);

}  // namespace sb
