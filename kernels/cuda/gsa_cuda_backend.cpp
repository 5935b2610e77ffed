// The CUDA backends: support answers (head dimension), workspace sizes and the launchers of gsa_cuda.h, with lane
// groups where they apply ("cuda") or one warp per edge throughout ("cuda:warp"); they register themselves with
// the backend registry, so a build with CUDA lists them.
#include <memory>
#include <string>
#include <vector>

#include "kernels/cuda/gsa_cuda.h"
#include "kernels/gsa_backend.h"
#include "common/error.h"

namespace sb {

namespace {

class CudaBackend final : public GsaBackend {
 public:
  explicit CudaBackend(GsaCudaKernels kernels) : kernels_(kernels) {}
  std::string name() const override { return kernels_ == GsaCudaKernels::warp ? "cuda:warp" : "cuda"; }
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
  void forward(const GsaParams& p, void* stream) const override {
    gsa_require_supported(*this, p);
    gsa_forward_cuda(p, stream, kernels_);
  }
  void backward(const GsaParams& p, void* stream) const override {
    gsa_require_supported(*this, p);
    gsa_backward_cuda(p, stream, kernels_);
  }

 private:
  GsaCudaKernels kernels_;
};

std::vector<std::unique_ptr<GsaBackend>> make_cuda_backends() {
  std::vector<std::unique_ptr<GsaBackend>> out;
  out.push_back(std::make_unique<CudaBackend>(GsaCudaKernels::lane_groups));
  out.push_back(std::make_unique<CudaBackend>(GsaCudaKernels::warp));
  return out;
}

const GsaBackendRegistrar registrar(GsaBackendRank::cuda, make_cuda_backends);

}  // namespace

// Named by kernels/CMakeLists.txt (LINKER:--undefined), so every program linking the CUDA kernels keeps this file.
extern "C" void sb_gsa_cuda_backends() {}

}  // namespace sb
