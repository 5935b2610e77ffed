// The backend registry and the CPU backends: one per CPU target, each pinning its target around a call.
#include "kernels/gsa_backend.h"

#include <fmt/format.h>

#include <cstdlib>
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
    reg.owned.push_back(make_gsa_cuda_backend(GsaCudaKernels::lane_groups));
    reg.owned.push_back(make_gsa_cuda_backend(GsaCudaKernels::warp));
#endif
    for (const auto& b : reg.owned) reg.list.push_back(b.get());
    return reg;
  }();
  return r;
}

// The CUDA backend a GsaBackendScope pinned ("" when none).
std::string& pinned_cuda_backend() {
  static std::string name;
  return name;
}

// The CUDA backend SB_CUDA_KERNELS names: groups (or unset) -> "cuda", warp -> "cuda:warp".
std::string cuda_backend_from_env() {
  const char* env = std::getenv("SB_CUDA_KERNELS");
  const std::string v = env != nullptr ? env : "";
  if (v.empty() || v == "groups") return "cuda";
  if (v == "warp") return "cuda:warp";
  throw Error(fmt::format("SB_CUDA_KERNELS={}: expected groups (lane groups where they apply) or warp", v));
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
  if (cpu == nullptr) {
    if (b.device() != GsaDevice::cuda) return;
    saved_cuda_backend_ = pinned_cuda_backend();
    pinned_cuda_backend() = b.name();
    cuda_pinned_ = true;
    return;
  }
  const std::string active = gsa_cpu_target();
  if (active == cpu->target()) return;
  gsa_cpu_pin_target(cpu->target());
  saved_cpu_target_ = active;
}

GsaBackendScope::~GsaBackendScope() {
  if (!saved_cpu_target_.empty()) gsa_cpu_pin_target(saved_cpu_target_);
  if (cuda_pinned_) pinned_cuda_backend() = saved_cuda_backend_;
}

const GsaBackend* gsa_backend_for(GsaDevice device) {
  if (device == GsaDevice::cpu) return find_gsa_backend("cpu:" + gsa_cpu_target());
  if (device == GsaDevice::cuda) {
    const std::string& pinned = pinned_cuda_backend();
    return find_gsa_backend(pinned.empty() ? cuda_backend_from_env() : pinned);
  }
  return nullptr;
}

}  // namespace sb
