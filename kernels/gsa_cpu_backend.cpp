// The CPU backends, one per SIMD target this build and CPU run ("cpu:<target>"), each pinning its target around a
// call; they register themselves with the backend registry.
#include <fmt/format.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kernels/gsa_backend.h"
#include "kernels/gsa_cpu.h"

namespace sb {

namespace {

class CpuBackend final : public GsaBackend {
 public:
  explicit CpuBackend(std::string target) : target_(std::move(target)) {}
  std::string name() const override { return "cpu:" + target_; }
  GsaDevice device() const override { return GsaDevice::cpu; }
  std::string unsupported(const GsaParams& p) const override {
    if (p.dtype != GsaDtype::f32 && p.dtype != GsaDtype::f64) {
      return fmt::format("dtype {} (the CPU kernels take float32 and float64)", gsa_dtype_name(p.dtype));
    }
    return "";
  }
  GsaWorkspace backward_workspace(const GsaParams& p) const override {
    const int64_t acc_bytes = p.dtype == GsaDtype::f64 ? 8 : 4;
    return {gsa_cpu_delta_elems(p) * acc_bytes, gsa_cpu_workspace_elems(p) * acc_bytes};
  }
  void forward(const GsaParams& p, void*) const override {
    gsa_require_supported(*this, p);
    const GsaBackendScope scope(*this);
    gsa_forward_cpu(p);
  }
  void backward(const GsaParams& p, void*) const override {
    gsa_require_supported(*this, p);
    const GsaWorkspace need = backward_workspace(p);
    if (p.delta == nullptr || p.workspace_bytes < need.workspace_bytes ||
        (need.workspace_bytes > 0 && p.workspace == nullptr)) {
      throw Error(fmt::format("graph_attention backward on {}: needs delta and a workspace of {} bytes, got {}",
                              name(), need.workspace_bytes, p.workspace_bytes));
    }
    const GsaBackendScope scope(*this);
    gsa_backward_cpu(p);
  }

 private:
  std::string target_;
};

std::vector<std::unique_ptr<GsaBackend>> make_cpu_backends() {
  std::vector<std::unique_ptr<GsaBackend>> out;
  for (const std::string& target : gsa_cpu_targets()) out.push_back(std::make_unique<CpuBackend>(target));
  return out;
}

const GsaBackendRegistrar registrar(GsaBackendRank::cpu, make_cpu_backends);

}  // namespace

// Named by kernels/CMakeLists.txt (LINKER:--undefined), so every program linking sb_kernels keeps this file.
extern "C" void sb_gsa_cpu_backends() {}

}  // namespace sb
