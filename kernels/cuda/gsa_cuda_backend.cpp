// The CUDA backends: support answers (head dimension), workspace sizes and the launchers of gsa_cuda.h, with lane
// groups where they apply ("cuda") or one warp per edge throughout ("cuda:warp"); they register themselves with
// the backend registry, so a build with CUDA lists them.
#include <memory>
#include <string>
#include <vector>

#include "kernels/cuda/gsa_cuda.h"
#include "kernels/cuda/gsa_cuda_backend.h"
#include "common/error.h"

namespace sb {

namespace {

class CudaBackend final : public GsaCudaBackendBase {
 public:
  explicit CudaBackend(GsaCudaKernels kernels) : kernels_(kernels) {}
  std::string name() const override { return kernels_ == GsaCudaKernels::warp ? "cuda:warp" : "cuda"; }
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
