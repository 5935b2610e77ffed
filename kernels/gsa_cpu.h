// CPU graph self-attention kernels (OpenMP over rows, vectorised over D with the best SIMD target this CPU runs,
// chosen at run time): forward with an online softmax and a deterministic backward through the transposed graph.
// Plain C++, no LibTorch.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/gsa_params.h"
#include "kernels/gsa_split_plan.h"

namespace sb {

// Rows are cut into this many fixed chunks for the d(rel_emb) partial sums, so the reduction order
// (and so the result, bit for bit) does not depend on the thread count.
constexpr int64_t kGsaRelChunks = 16;

// SIMD targets (Highway's names: "AVX3", "AVX2", "SSE4", "NEON", "SVE", "EMU128", ...) this binary holds and
// this CPU can run, best first.
std::vector<std::string> gsa_cpu_targets();
// The target the kernels run: the one pinned by gsa_cpu_pin_target, else the environment variable SB_CPU_TARGET
// (read at first use; a name not in gsa_cpu_targets() throws sb::Error), else the best one.
std::string gsa_cpu_target();
// Pins the target (case-insensitive name); throws sb::Error naming it and the supported ones when this CPU or
// build cannot run it. Not to be called while kernels run on other threads.
void gsa_cpu_pin_target(const std::string& name);

// x[i] = exp(x[i]), i < n, with the kernels' vector exp on the active target (for tests): NaN stays NaN, +inf and
// arguments past the largest finite result give +inf, arguments below the smallest normal result give 0.
void gsa_cpu_exp(float* x, int64_t n);
void gsa_cpu_exp(double* x, int64_t n);

// How the forward runs one batch's destination rows on the active target (rows run as pieces are not counted there):
// groups of as many rows as the target's lanes as wide tiles (a row per lane), and the others in groups of up to 4
// rows, as register tiles over the union of their sources with one relation table (or without relations), as tiles
// whose relation terms come by column, or row by row (or, rows shorter than a vector, packed into the lanes); and the column tiles of pieces (gsa_column_split_plan) that
// run as tiles or piece by piece. The backward by destination groups its rows the same way. Depends on the graph, H,
// D and dtype.
struct GsaCpuForwardGroups {
  int64_t tiles = 0;
  int64_t tiles_by_column = 0;
  int64_t rows = 0;
  int64_t column_tiles = 0;
  int64_t column_tiles_per_row = 0;
  int64_t wide_tiles = 0;
  int64_t wide_rows = 0;  // rows in wide tiles
  int64_t packed = 0;     // groups of short rows packed into the lanes together (not counted in `rows`)
};
GsaCpuForwardGroups gsa_cpu_forward_groups(const GsaParams& p);

// The kernels' plans of a graph (view g; its cpu_plans unused): what a prepared graph keeps in cpu_plans.
GsaCpuPlans gsa_cpu_plans(const GsaGraphView& g);

// Workspace sizes in elements of the accumulation type (float for fp32, double for fp64).
int64_t gsa_cpu_delta_elems(const GsaParams& p);      // [B, N, H]
// The backward's private workspace: the d(rel_emb) partial sums [chunks, R, D] (with rel_emb), then the edge cache
// [B, E, H, 2] (P and dS of every edge and head, so the pass by source reads them instead of recomputing two dot
// products and an exp per edge and head) when it fits in the edge-cache limit.
int64_t gsa_cpu_workspace_elems(const GsaParams& p);

// The largest edge cache the backward asks for, in bytes (default 1 GiB; 0 turns the cache off: the pass by source
// then recomputes P and dS). Process-wide; not to be changed while kernels run on other threads.
void gsa_cpu_set_edge_cache_limit(int64_t bytes);
int64_t gsa_cpu_edge_cache_limit();

// Forward: o [B, N, H, D] and lse [B, N, H] from q, k, v [B, N, H, D] and rel_emb [R, D].
// p.dtype must be f32 (lse: float) or f64 (lse: double). Throws sb::Error for other dtypes.
void gsa_forward_cpu(const GsaParams& p);

// Backward: dq, dk, dv [B, N, H, D] and d_rel_emb [R, D] (when rel_emb is set) from d_o, o and lse
// of the forward; needs p.delta and p.workspace of gsa_cpu_workspace_elems(p) elements (the sizes above, in the
// accumulation type).
void gsa_backward_cpu(const GsaParams& p);

}  // namespace sb
