// The backend registry: the backends their files registered (CPU first), the backend a device's calls use, and
// the scope that pins one.
#include "kernels/gsa_backend.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <memory>

#include "kernels/gsa_cpu.h"

namespace sb {

namespace {

struct Registry {
  std::vector<std::unique_ptr<GsaBackend>> owned;
  std::vector<const GsaBackend*> list;
};

const Registry& registry() {
  static const Registry r = [] {
    Registry reg;
    std::vector<GsaBackendEntry> entries = gsa_backend_factories();
    std::stable_sort(entries.begin(), entries.end(),
                     [](const GsaBackendEntry& a, const GsaBackendEntry& b) { return a.rank < b.rank; });
    for (const GsaBackendEntry& e : entries) {
      for (std::unique_ptr<GsaBackend>& b : e.make()) reg.owned.push_back(std::move(b));
    }
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

// The CUDA backend SB_CUDA_KERNELS names: tc (or unset) -> "cuda:tc", groups -> "cuda", warp -> "cuda:warp". cuda:tc
// is the default since it runs every call "cuda" runs, tiles too sparse for tensor cores on the lane groups.
std::string cuda_backend_from_env() {
  const char* env = std::getenv("SB_CUDA_KERNELS");
  const std::string v = env != nullptr ? env : "";
  if (v.empty() || v == "tc") return "cuda:tc";
  if (v == "groups") return "cuda";
  if (v == "warp") return "cuda:warp";
  throw Error(fmt::format("SB_CUDA_KERNELS={}: expected tc (tensor-core tiles where they apply, the default), groups "
                          "(lane groups throughout) or warp (one warp per edge)", v));
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
  if (b.device() == GsaDevice::cuda) {
    saved_cuda_backend_ = pinned_cuda_backend();
    pinned_cuda_backend() = b.name();
    cuda_pinned_ = true;
    return;
  }
  const std::string target = b.name().substr(b.name().find(':') + 1);  // "cpu:<target>"
  const std::string active = gsa_cpu_target();
  if (active == target) return;
  gsa_cpu_pin_target(target);
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
