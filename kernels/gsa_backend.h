// GsaBackend: one implementation of the graph-attention kernels (a CPU SIMD target, CUDA) behind one
// interface, and the registry of every backend this build and machine offer. Plain C++, no LibTorch.
// Adding a backend: a GsaBackend subclass and a GsaBackendRegistrar in its own file (see gsa_cpu_backend.cpp).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernels/gsa_params.h"
#include "common/error.h"

namespace sb {

enum class GsaDevice : uint8_t { cpu, cuda };
const char* gsa_device_name(GsaDevice device);  // "cpu", "cuda"
const char* gsa_dtype_name(GsaDtype dtype);     // "float32", "float64", "float16", "bfloat16"

// Backward workspaces one call needs, in bytes, on the backend's device (see GsaParams::delta, ::workspace).
struct GsaWorkspace {
  int64_t delta_bytes = 0;
  int64_t workspace_bytes = 0;
};

class GsaBackend {
 public:
  virtual ~GsaBackend() = default;
  // e.g. "cpu:AVX2", "cpu:generic", "cuda", "cuda:warp"
  virtual std::string name() const = 0;
  virtual GsaDevice device() const = 0;
  // "" when this backend runs the call p describes (dtype, shapes, head dimension; pointers are not read),
  // else why not, e.g. "dtype float16 (the CPU kernels take float32 and float64)".
  virtual std::string unsupported(const GsaParams& p) const = 0;
  // Bytes of p.workspace the forward needs on the backend's device (CUDA: split rows' partial states).
  virtual int64_t forward_workspace_bytes(const GsaParams& p) const {
    (void)p;
    return 0;
  }
  virtual GsaWorkspace backward_workspace(const GsaParams& p) const = 0;
  // Every pointer in p lives on device(); stream is the device's queue (a cudaStream_t on CUDA, nullptr for
  // the default one; ignored on the CPU). Both throw sb::Error with the reason when unsupported(p) is not "".
  // forward: o [B, N, H, D] and lse [B, N, H]; backward: dq, dk, dv, d_rel_emb with p.delta and p.workspace
  // of backward_workspace(p).
  virtual void forward(const GsaParams& p, void* stream) const = 0;
  virtual void backward(const GsaParams& p, void* stream) const = 0;
  // What the calling thread's last forward on this backend ran where, for records (cuda:tc: the share of edges on
  // tensor cores, or why none ran there); "" when the backend has one way of running a call.
  virtual std::string last_call() const { return ""; }
};

// Backends register themselves from their own files: a GsaBackendRegistrar at namespace scope there names a factory
// of the file's backends, called once when gsa_backends() is first asked. A static library drops an object nothing
// refers to, so each such file also defines an extern "C" function that kernels/CMakeLists.txt keeps with
// LINKER:--undefined. Inline, so a backend library needs nothing from the registry's object to register.
using GsaBackendFactory = std::vector<std::unique_ptr<GsaBackend>> (*)();
enum class GsaBackendRank : uint8_t { cpu, cuda };  // the order of gsa_backends(): CPU first
struct GsaBackendEntry {
  GsaBackendRank rank;
  GsaBackendFactory make;
};
inline std::vector<GsaBackendEntry>& gsa_backend_factories() {
  static std::vector<GsaBackendEntry> factories;
  return factories;
}
struct GsaBackendRegistrar {
  GsaBackendRegistrar(GsaBackendRank rank, GsaBackendFactory make) { gsa_backend_factories().push_back({rank, make}); }
};

// Every backend of this build and machine: one per CPU target (best first), then CUDA when built.
const std::vector<const GsaBackend*>& gsa_backends();
// The backend named `name`, or nullptr.
const GsaBackend* find_gsa_backend(const std::string& name);
// The backend calls on `device` use: the active CPU target (gsa_cpu_target()), or the CUDA backend that
// SB_CUDA_KERNELS names (tc or unset: "cuda:tc", tensor-core tiles where they apply and lane groups for the rest;
// groups: "cuda", lane groups throughout; warp: "cuda:warp"; another value throws sb::Error); nullptr when this
// build has none for the device.
const GsaBackend* gsa_backend_for(GsaDevice device);
// Makes `b` the backend gsa_backend_for(b.device()) returns while it lives (a CPU backend pins its target
// and the previous one comes back after); how a caller, e.g. a test, sends the op to one backend.
class GsaBackendScope {
 public:
  explicit GsaBackendScope(const GsaBackend& b);
  ~GsaBackendScope();
  GsaBackendScope(const GsaBackendScope&) = delete;
  GsaBackendScope& operator=(const GsaBackendScope&) = delete;

 private:
  std::string saved_cpu_target_;  // empty when nothing was pinned
  std::string saved_cuda_backend_;
  bool cuda_pinned_ = false;
};

// Throws sb::Error "graph_attention: <backend> does not support <reason>" when b cannot run p.
inline void gsa_require_supported(const GsaBackend& b, const GsaParams& p) {
  const std::string why = b.unsupported(p);
  if (!why.empty()) throw Error("graph_attention: " + b.name() + " does not support " + why);
}

}  // namespace sb
