// The graph-attention parity table (one row per self-describing case id), run on every registered kernel
// backend (kernels/gsa_backend.h) in every dtype, and helpers every backend's test shares.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kernels/gsa_backend.h"
#include "kernels/gsa_tile_plan.h"
#include "patterns/graph.h"
#include "patterns/pattern.h"
#include "tests/kernels/gsa_reference.h"

namespace sb::test {

struct GsaCase {
  std::string pattern;
  Params params;
  int64_t n = 1;
  bool causal = false;
  int64_t D = 16, H = 1, B = 1;
  bool rel = false;
  // e.g. GSA(bpt:k=4,n=97,causal=1,D=59,H=3,B=2,rel=1)
  std::string id() const;
};

// The table for one registered pattern (causal rows only when it has a causal form):
//   n in {1, 2, 3, 97}: every D in {16, 59, 64} x H in {1, 3} x B in {1, 2} x rel in {0, 1};
//   n = 1025 (CI time): two rows, (D=64, H=1, B=1, rel=1) and (D=16, H=3, B=2, rel=0).
// Pattern parameters come from small_params() so that n = 97 is already sparse.
std::vector<GsaCase> gsa_case_table(const AttentionPattern& pattern);
// Parameters used for a pattern in the table: known small values for the parameters it declares.
Params small_params(const AttentionPattern& pattern);

// Built graphs, shared between the cases of one (pattern, n, causal).
const Graph& case_graph(const GsaCase& c);

// Random inputs for a case (fixed seed derived from the id); q is scaled so softmaxes are not flat.
RefProblem make_problem(const GsaCase& c, const Graph& g);
std::vector<double> make_d_o(const GsaCase& c, const Graph& g);
// What a backend's unsupported() is asked about for prob on g in dtype: shapes and dtype, no pointers.
GsaParams problem_shape(const RefProblem& prob, const Graph& g, GsaDtype dtype);
// "; 3 x reason; ..." for the rows a backend did not take (reason -> rows), "" for none.
std::string unsupported_summary(const std::map<std::string, int>& unsupported);

// max |a - b| and max |b|
double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b);
double max_abs(const std::vector<double>& a);

// bfloat16 bits of f rounded to nearest even (NaN not handled), and back.
uint16_t f32_to_bf16(float f);
float bf16_to_f32(uint16_t b);

template <typename T>
std::vector<T> convert(const std::vector<double>& x) {
  return std::vector<T>(x.begin(), x.end());
}
template <typename T>
std::vector<double> widen(const std::vector<T>& x) {
  return std::vector<double>(x.begin(), x.end());
}

// Tolerances of the table: outputs |o - o_ref| <= out_tol * max(1, max|o_ref|); gradients
// max|g - g_ref| <= grad_tol * max(max|g_ref|, 0.01) per tensor (the floor only matters for gradients
// that vanish exactly, e.g. dq at n = 1).
struct Tolerance {
  double out_tol;
  double grad_tol;
};

// Compares a backend's results with the reference; returns "" or a description of the first failure.
std::string compare_with_reference(const RefResult& ref, const std::vector<double>& o,
                                   const std::vector<double>& dq, const std::vector<double>& dk,
                                   const std::vector<double>& dv, const std::vector<double>& d_rel, Tolerance tol);

// Memory on one backend's device for the runner below: host memory for CPU backends (HostMemory), device
// memory in the CUDA test. Buffers live until clear().
class GsaTestMemory {
 public:
  virtual ~GsaTestMemory() = default;
  // A buffer of `bytes` holding a copy of `host`; with host nullptr, all 0xff bytes (NaN in every float
  // type, so an output a kernel forgets to write fails the comparison).
  virtual void* put(const void* host, size_t bytes) = 0;
  // Copies `bytes` of a buffer back (after the work queued on it has finished).
  virtual void get(void* host, const void* buffer, size_t bytes) = 0;
  virtual void clear() = 0;
};

class HostMemory final : public GsaTestMemory {
 public:
  void* put(const void* host, size_t bytes) override;
  void get(void* host, const void* buffer, size_t bytes) override;
  void clear() override { buffers_.clear(); }

 private:
  std::vector<std::unique_ptr<char[]>> buffers_;
};

// One dtype's rows of the table: its tolerance, and whether only outputs are compared (fp16/bf16: the
// inputs themselves are rounded to 11 or 8 bits, so gradients carry no comparable information).
struct GsaDtypeRows {
  GsaDtype dtype;
  Tolerance tol;
  bool outputs_only;
};
// float32, float64, float16, bfloat16
const std::vector<GsaDtypeRows>& gsa_dtype_rows();

// A backend's results as doubles: o [B, N, H, D], lse [B, N, H], and (with d_o) dq, dk, dv, d_rel.
struct GsaRunOutputs {
  std::vector<double> o, lse, dq, dk, dv, d_rel;
};

// Runs backend b forward (and backward when d_o is non-empty) on the problem in `dtype`, its inputs
// rounded to that dtype, through `mem` on the backend's device. b must support the call. The CPU kernels read the
// plans the prepared graph made (as the op's calls do), or without prepared_plans make them per call; so do the CUDA
// tensor-core forward's dense tiles. wide: whether the prepared CUDA graph also carries 64-row tiles for the forward
// (GsaGraphView::wide_tiles), planned with these options (rows 64), or not (rows 16); unset: as SB_CUDA_TC_ROWS says.
GsaRunOutputs run_on_backend(const GsaBackend& b, const Graph& g, const RefProblem& prob,
                             const std::vector<double>& d_o, GsaDtype dtype, GsaTestMemory& mem,
                             bool prepared_plans = true, std::optional<GsaTileOptions> wide = std::nullopt);

// x rounded to dtype's precision (as run_on_backend hands it to a backend), and a problem with every input so rounded:
// the reference on it leaves only a kernel's own rounding to compare, gradients of half types included.
std::vector<double> rounded_to(const std::vector<double>& x, GsaDtype dtype);
RefProblem rounded_problem(const RefProblem& prob, GsaDtype dtype);

// Compares a run with the reference at the rows' tolerance (lse too, -inf rows apart); "" or the first failure.
std::string compare_run(const RefResult& ref, const GsaRunOutputs& run, const GsaDtypeRows& rows);

// The table of `pattern` on every registered backend of `device` in every dtype, as ggml's test-backend-ops
// does: a row a backend does not support (GsaBackend::unsupported) is counted and printed as "not supported"
// with its reason, neither failed nor silently skipped. Prints one tally line per backend and dtype; returns
// the failures ("<backend> <dtype> <case id>: <what differs>") and, as a failure too, any backend that ran
// no row at all.
std::vector<std::string> run_backend_table(const std::string& pattern, GsaDevice device, GsaTestMemory& mem);
// The same table on the given backends (all of one device, e.g. one a test makes that is not registered).
std::vector<std::string> run_backend_table(const std::string& pattern, const std::vector<const GsaBackend*>& backends,
                                           GsaTestMemory& mem);

}  // namespace sb::test
