// The backend registry and the CPU backends: one per CPU target, each pinning its target around a call.
#include "kernels/gsa_backend.h"

#include <fmt/format.h>
#include <memory>

#include "kernels/gsa_cpu.h"
#ifdef SB_WITH_CUDA
#include "kernels/cuda/gsa_cuda_backend.h"
#endif

namespace sb {

namespace {

class CpuBackend final : public GsaBackend {
 public:
  explicit CpuBackend(std::string target) : target_(std::move(target)) {}
  std::string name() const override { return "cpu:" + target_; }
  const std::string& target() const { return target_; }
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

struct Registry {
  std::vector<std::unique_ptr<GsaBackend>> owned;
  std::vector<const GsaBackend*> list;
};

const Registry& registry() {
  static const Registry r = [] {
    Registry reg;
    for (const std::string& target : gsa_cpu_targets()) reg.owned.push_back(std::make_unique<CpuBackend>(target));
#ifdef SB_WITH_CUDA
    reg.owned.push_back(make_gsa_cuda_backend());
#endif
    for (const auto& b : reg.owned) reg.list.push_back(b.get());
    return reg;
  }();
  return r;
}

}  // namespace

const char* gsa_device_name(GsaDevice device) { return device == GsaDevice::cuda ? "cuda" : "cpu"; }

const char* gsa_dtype_name(GsaDtype dtype) {
  switch (dtype) {
    case GsaDtype::f64: return "float64";
    case GsaDtype::f16: return "float16";
    case GsaDtype::bf16: return "bfloat16";
    case GsaDtype::f32: break;
  }
  return "float32";
}

const std::vector<const GsaBackend*>& gsa_backends() { return registry().list; }

const GsaBackend* find_gsa_backend(const std::string& name) {
  for (const GsaBackend* b : gsa_backends()) {
    if (b->name() == name) return b;
  }
  return nullptr;
}

GsaBackendScope::GsaBackendScope(const GsaBackend& b) {
  const auto* cpu = dynamic_cast<const CpuBackend*>(&b);
  if (cpu == nullptr) return;  // one backend per other device: nothing to choose
  const std::string active = gsa_cpu_target();
  if (active == cpu->target()) return;
  gsa_cpu_pin_target(cpu->target());
  saved_cpu_target_ = active;
}

GsaBackendScope::~GsaBackendScope() {
  if (!saved_cpu_target_.empty()) gsa_cpu_pin_target(saved_cpu_target_);
}

const GsaBackend* gsa_backend_for(GsaDevice device) {
  if (device == GsaDevice::cpu) return find_gsa_backend("cpu:" + gsa_cpu_target());
  for (const GsaBackend* b : gsa_backends()) {
    if (b->device() == device) return b;
  }
  return nullptr;
}

}  // namespace sb
