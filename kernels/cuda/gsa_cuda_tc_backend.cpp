// The "cuda:tc" backend: the tensor-core kernels (gsa_cuda_tc.h) on the calls they take, the lane groups for the rest;
// it registers itself and is the default CUDA backend (SB_CUDA_KERNELS=groups or warp picks another). Relation
// embeddings on the tiles only with SB_CUDA_TC_RELATIONS=1.
#include "kernels/cuda/gsa_cuda_tc.h"

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/error.h"
#include "kernels/cuda/gsa_cuda.h"
#include "kernels/cuda/gsa_cuda_backend.h"
#include "kernels/gsa_tile_plan.h"

namespace sb {

namespace {

thread_local GsaTcStats g_last_stats, g_last_backward_stats;
thread_local std::string g_last_call;

// What a forward ran where, in words for records (relations: whether relation embeddings may run on the tiles).
std::string describe(const GsaTcStats& s, const GsaParams& p, bool relations) {
  if (!s.tensor_cores) {
    const std::string why = gsa_cuda_tc_unsupported(p, relations);
    return "lane groups only: " + (why.empty() ? std::string("rows not 16-byte aligned, or an empty call") : why);
  }
  char buf[240];
  char wide[64] = "";
  if (s.wide_tiles > 0) std::snprintf(wide, sizeof wide, " (%lld of 64 rows)", static_cast<long long>(s.wide_tiles));
  std::snprintf(buf, sizeof buf, "tensor cores for %lld of %lld edges (%.1f%%, %lld dense tiles%s%s), lane groups for "
                "the rest", static_cast<long long>(s.dense_edges), static_cast<long long>(s.edges),
                s.edges > 0 ? 100.0 * static_cast<double>(s.dense_edges) / static_cast<double>(s.edges) : 0.0,
                static_cast<long long>(s.dense_tiles), wide,
                p.rel_emb != nullptr ? ", relation embeddings on the tiles too" : "");
  return buf;
}

class CudaTcBackend final : public GsaCudaBackendBase {
 public:
  CudaTcBackend(bool strict, std::optional<bool> relations, std::optional<int64_t> tile_rows)
      : strict_(strict), relations_(relations), tile_rows_(tile_rows) {}
  std::string name() const override { return "cuda:tc"; }
  std::string unsupported(const GsaParams& p) const override {
    const std::string why = GsaCudaBackendBase::unsupported(p);
    if (!why.empty() || !strict_) return why;
    return gsa_cuda_tc_unsupported(p, relations());
  }
  void forward(const GsaParams& p, void* stream) const override {
    gsa_require_supported(*this, p);
    const bool rel = relations();
    g_last_stats = gsa_forward_cuda_tc(p, stream, rel, tile_rows_.value_or(0));
    g_last_call = describe(g_last_stats, p, rel);
  }
  void backward(const GsaParams& p, void* stream) const override {
    gsa_require_supported(*this, p);
    g_last_backward_stats = gsa_backward_cuda_tc(p, stream, relations());
  }
  std::string last_call() const override { return g_last_call; }

 private:
  bool relations() const { return relations_.has_value() ? *relations_ : gsa_cuda_tc_relations_enabled(); }
  bool strict_;
  std::optional<bool> relations_;
  std::optional<int64_t> tile_rows_;
};

std::vector<std::unique_ptr<GsaBackend>> make_tc_backends() {
  std::vector<std::unique_ptr<GsaBackend>> out;
  out.push_back(std::make_unique<CudaTcBackend>(false, std::nullopt, std::nullopt));
  return out;
}

const GsaBackendRegistrar registrar(GsaBackendRank::cuda, make_tc_backends);

}  // namespace

// Named by kernels/CMakeLists.txt (LINKER:--undefined), so every program linking the CUDA kernels keeps this file.
extern "C" void sb_gsa_cuda_tc_backends() {}

std::unique_ptr<GsaBackend> make_gsa_cuda_tc_backend(bool strict, std::optional<bool> relations,
                                                     std::optional<int64_t> tile_rows) {
  if (tile_rows.has_value() && *tile_rows != kGsaTileRows && *tile_rows != kGsaWideTileRows) {
    throw Error("make_gsa_cuda_tc_backend: tile_rows = " + std::to_string(*tile_rows) + " (expected 16 or 64)");
  }
  return std::make_unique<CudaTcBackend>(strict, relations, tile_rows);
}

bool gsa_cuda_tc_relations_switch(const char* value) {
  const std::string v = value != nullptr ? value : "";
  if (v.empty() || v == "0") return false;
  if (v == "1") return true;
  throw Error("SB_CUDA_TC_RELATIONS=" + v + ": expected 1 (relation embeddings on the tensor-core tiles) or 0 (calls "
              "with relation embeddings on the lane groups, the default)");
}

bool gsa_cuda_tc_relations_enabled() {
  static const bool enabled = gsa_cuda_tc_relations_switch(std::getenv("SB_CUDA_TC_RELATIONS"));
  return enabled;
}

GsaTcStats gsa_cuda_tc_last_stats(bool backward) { return backward ? g_last_backward_stats : g_last_stats; }

}  // namespace sb
