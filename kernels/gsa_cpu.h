// CPU graph self-attention kernels (OpenMP over rows, vectorised over D): forward with an online softmax
// and a deterministic backward through the transposed graph. Plain C++, no LibTorch.
#pragma once

#include <cstdint>

#include "kernels/gsa_params.h"

namespace sb {

// Rows are cut into this many fixed chunks for the d(rel_emb) partial sums, so the reduction order
// (and so the result, bit for bit) does not depend on the thread count.
constexpr int64_t kGsaRelChunks = 16;

// Workspace sizes in elements of the accumulation type (float for fp32, double for fp64).
int64_t gsa_cpu_delta_elems(const GsaParams& p);        // [B, N, H]
int64_t gsa_cpu_rel_partial_elems(const GsaParams& p);  // [chunks, R, D], 0 without rel_emb

// Forward: o [B, N, H, D] and lse [B, N, H] from q, k, v [B, N, H, D] and rel_emb [R, D].
// p.dtype must be f32 (lse: float) or f64 (lse: double). Throws sb::Error for other dtypes.
void gsa_forward_cpu(const GsaParams& p);

// Backward: dq, dk, dv [B, N, H, D] and d_rel_emb [R, D] (when rel_emb is set) from d_o, o and lse
// of the forward; needs p.delta and, with rel_emb, p.workspace holding the [chunks, R, D] partial sums
// (the sizes above, in the accumulation type).
void gsa_backward_cpu(const GsaParams& p);

}  // namespace sb
