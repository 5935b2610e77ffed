// The CPU kernels' one compiled target (see gsa_cpu_targets.h): AVX-512 fp32 paths when compiled in, else generic.
#include "kernels/gsa_cpu_targets.h"

#include <algorithm>

#include <fmt/format.h>

#include "patterns/error.h"

namespace sb {

std::vector<std::string> gsa_cpu_targets() {
#if defined(__AVX512F__)
  return {"AVX512"};  // gsa_cpu.cpp's AVX-512 variant (D in 16..128 fp32; other cases take the generic loops)
#else
  return {"generic"};
#endif
}

std::string gsa_cpu_target() { return gsa_cpu_targets().front(); }

void gsa_cpu_pin_target(const std::string& target) {
  const std::vector<std::string> targets = gsa_cpu_targets();
  if (std::find(targets.begin(), targets.end(), target) == targets.end()) {
    throw Error(fmt::format("CPU target '{}' is not available here; available: {}", target, fmt::join(targets, ", ")));
  }
}

}  // namespace sb
