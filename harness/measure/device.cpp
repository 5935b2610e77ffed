// Device resolution: refuse a CUDA request up front, with the reason, instead of silently running on the CPU.
#include "harness/measure/device.h"

#include <fmt/format.h>
#include <torch/version.h>

#include "common/error.h"

namespace sb {

bool build_has_cuda() {
#ifdef SB_WITH_CUDA
  return true;
#else
  return false;
#endif
}

torch::Device resolve_device(const std::string& name) {
  if (name == "cpu") return torch::Device(torch::kCPU);
  if (name != "cuda") throw Error(fmt::format("device: expected 'cpu' or 'cuda', got '{}'", name));
  if (!build_has_cuda()) throw Error("device cuda requested but this build has no CUDA");
  if (!torch::cuda::is_available()) throw Error("device cuda requested but no CUDA device is available");
  return torch::Device(torch::kCUDA, 0);
}

std::string device_name(const torch::Device& device) { return device.is_cuda() ? "cuda" : "cpu"; }

std::string libtorch_version() {
  return fmt::format("{}.{}.{}", TORCH_VERSION_MAJOR, TORCH_VERSION_MINOR, TORCH_VERSION_PATCH);
}

}  // namespace sb
