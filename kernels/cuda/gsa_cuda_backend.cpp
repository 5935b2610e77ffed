// The CUDA backends: support answers (head dimension), workspace sizes and the launchers of gsa_cuda.h, with lane
// groups where they apply ("cuda") or one warp per edge throughout ("cuda:warp").
#include "kernels/cuda/gsa_cuda_backend.h"

#include <string>

#include "kernels/cuda/gsa_cuda.h"
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

}  // namespace

std::unique_ptr<GsaBackend> make_gsa_cuda_backend(GsaCudaKernels kernels) {
  return std::make_unique<CudaBackend>(kernels);
}

}  // namespace sb
