// What every CUDA backend answers alike (cuda, cuda:warp, cuda:tc): the device, the head dimensions the CUDA kernels
// take, and their workspaces (gsa_cuda.h).
#pragma once

#include <string>

#include "kernels/cuda/gsa_cuda.h"
#include "kernels/gsa_backend.h"

namespace sb {

class GsaCudaBackendBase : public GsaBackend {
 public:
  GsaDevice device() const override { return GsaDevice::cuda; }
  std::string unsupported(const GsaParams& p) const override {
    if (p.D < 1 || p.D > kGsaCudaMaxD) {
      return "head dimension D = " + std::to_string(p.D) + " (the CUDA kernels take 1 to " +
             std::to_string(kGsaCudaMaxD) + ")";
    }
    return "";
  }
  int64_t forward_workspace_bytes(const GsaParams& p) const override { return gsa_cuda_forward_workspace_bytes(p); }
  GsaWorkspace backward_workspace(const GsaParams& p) const override {
    const int64_t acc_bytes = p.dtype == GsaDtype::f64 ? 8 : 4;
    return {gsa_cuda_delta_elems(p) * acc_bytes, gsa_cuda_workspace_bytes(p)};
  }
};

}  // namespace sb
