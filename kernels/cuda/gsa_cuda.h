// CUDA graph self-attention launchers (plain C++ interface, no LibTorch): same GsaParams as the CPU kernels.
#pragma once

#include <cstdint>

#include "kernels/gsa_params.h"

namespace sb {

// Largest head dimension the CUDA kernels handle (a warp keeps D / 32 values per lane in registers).
constexpr int64_t kGsaCudaMaxD = 256;

// Workspace sizes, from p's shapes (B, N, H, D, R, dtype, graph.n_edges, rel_emb) and the graph's schedules
// (p.graph.rows, p.graph.srcs): the forward's p.workspace (bytes) holds the states of the split rows' pieces; the
// backward's p.delta is [B, N, H] in the accumulation type (elements) and its p.workspace (bytes) the pieces' dq,
// dk, dv and, with rel_emb, the dS of every edge [B, E, H] and the d_rel_emb partial sums.
int64_t gsa_cuda_forward_workspace_bytes(const GsaParams& p);
int64_t gsa_cuda_delta_elems(const GsaParams& p);
int64_t gsa_cuda_workspace_bytes(const GsaParams& p);

// Which kernels run the per-edge passes: lane groups (L lanes per edge, 16-byte loads, 32 / L edges per warp at
// once) wherever D and the rows' alignment allow, else one warp per edge; or always one warp per edge.
enum class GsaCudaKernels { lane_groups, warp };

// All pointers in p are device pointers; stream is a cudaStream_t (nullptr: the default stream).
// dtype f32, f64, f16 or bf16 (accumulation in fp32; fp64 in fp64). lse is fp32 (fp64 for fp64).
// Throws sb::Error on a launch failure or an unsupported D.
void gsa_forward_cuda(const GsaParams& p, void* stream, GsaCudaKernels kernels = GsaCudaKernels::lane_groups);
// d_rel = false leaves out the last pass, d(rel_emb) from every edge's dS in the workspace, so that a caller can write
// the dS of edges outside p's schedules there (gsa_cuda_edge_ds) and then run it (gsa_backward_cuda_rel).
void gsa_backward_cuda(const GsaParams& p, void* stream, GsaCudaKernels kernels = GsaCudaKernels::lane_groups,
                       bool d_rel = true);
void gsa_backward_cuda_rel(const GsaParams& p, void* stream);
// Every edge's dS [B, E, H] in the accumulation type, inside p.workspace (nullptr without rel_emb).
void* gsa_cuda_edge_ds(const GsaParams& p);

// Number of visible CUDA devices (0 when there is no driver or device).
int gsa_cuda_device_count();

}  // namespace sb
