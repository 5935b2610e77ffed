// The "cuda:tc" backend: the tensor-core kernels (gsa_cuda_tc.h) on the calls they take, the lane groups for the rest;
// it registers itself (SB_CUDA_KERNELS=tc picks it).
#include "kernels/cuda/gsa_cuda_tc.h"

#include <string>
#include <vector>

#include "kernels/cuda/gsa_cuda.h"
#include "kernels/cuda/gsa_cuda_backend.h"

namespace sb {

namespace {

thread_local GsaTcStats g_last_stats, g_last_backward_stats;

class CudaTcBackend final : public GsaCudaBackendBase {
 public:
  explicit CudaTcBackend(bool strict) : strict_(strict) {}
  std::string name() const override { return "cuda:tc"; }
  std::string unsupported(const GsaParams& p) const override {
    const std::string why = GsaCudaBackendBase::unsupported(p);
    if (!why.empty() || !strict_) return why;
    return gsa_cuda_tc_unsupported(p);
  }
  void forward(const GsaParams& p, void* stream) const override {
    gsa_require_supported(*this, p);
    g_last_stats = gsa_forward_cuda_tc(p, stream);
  }
  void backward(const GsaParams& p, void* stream) const override {
    gsa_require_supported(*this, p);
    g_last_backward_stats = gsa_backward_cuda_tc(p, stream);
  }

 private:
  bool strict_;
};

std::vector<std::unique_ptr<GsaBackend>> make_tc_backends() {
  std::vector<std::unique_ptr<GsaBackend>> out;
  out.push_back(std::make_unique<CudaTcBackend>(false));
  return out;
}

const GsaBackendRegistrar registrar(GsaBackendRank::cuda, make_tc_backends);

}  // namespace

// Named by kernels/CMakeLists.txt (LINKER:--undefined), so every program linking the CUDA kernels keeps this file.
extern "C" void sb_gsa_cuda_tc_backends() {}

std::unique_ptr<GsaBackend> make_gsa_cuda_tc_backend(bool strict) { return std::make_unique<CudaTcBackend>(strict); }

GsaTcStats gsa_cuda_tc_last_stats(bool backward) { return backward ? g_last_backward_stats : g_last_stats; }

}  // namespace sb
