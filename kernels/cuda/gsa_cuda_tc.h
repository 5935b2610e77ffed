// Tensor-core forward and backward of graph self-attention (bf16/fp16, D in {16, 32, 64, 128}; relation embeddings
// only with SB_CUDA_TC_RELATIONS=1 until verified on a GPU): dense 16-row tiles (kernels/gsa_tile_plan.h) on wmma, the
// other rows through the per-edge kernels of gsa_cuda.h. SB_CUDA_TC_ROWS=64 (opt-in until a GPU has verified and timed
// it): the forward on 64-row tiles, four 16-row groups sharing each gathered K/V chunk; the backward keeps 16 rows.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "kernels/gsa_params.h"

namespace sb {

class GsaBackend;  // kernels/gsa_backend.h

// Whether calls with relation embeddings put their dense tiles on tensor cores: SB_CUDA_TC_RELATIONS=1, read once;
// unset, empty or 0 (the default until a GPU has verified them): such calls run on the lane groups whole.
bool gsa_cuda_tc_relations_enabled();
// The switch's value (nullptr: unset) as gsa_cuda_tc_relations_enabled reads it; throws sb::Error naming the variable
// for a value other than 0 and 1.
bool gsa_cuda_tc_relations_switch(const char* value);

// "" when gsa_forward_cuda_tc puts dense tiles of p on tensor cores, else why not, e.g. "dtype float32 (the
// tensor-core forward takes float16 and bfloat16)". Reads shapes and dtype only. relations: whether relation
// embeddings may run on the tiles.
std::string gsa_cuda_tc_unsupported(const GsaParams& p, bool relations = gsa_cuda_tc_relations_enabled());

// What one call ran where (the share of edges on tensor cores, counted by destination tiles).
struct GsaTcStats {
  int64_t dense_tiles = 0;
  int64_t edges = 0, dense_edges = 0;
  bool tensor_cores = false;  // false: the whole call ran on the per-edge kernels (unsupported, or q/k/v unaligned)
  // The plan's rows per tile (16 or 64; the backward's are 16) and how many of its dense tiles had 64 rows (the 64-row
  // kernel's blocks per batch and head; the others ran as 16-row tiles).
  int64_t tile_rows = 16, wide_tiles = 0;
};

// Forward of p (device pointers, stream a cudaStream_t): dense tiles (p.graph.wide_tiles when the graph carries them
// and the call has no relation embeddings, else p.graph.tiles; when the graph carries none, planned per call from its
// CSR copied to the host with tile_rows rows, 0: as SB_CUDA_TC_ROWS says, 16 with relation embeddings) on tensor
// cores, the other rows through gsa_forward_cuda on the schedule restricted to them. The tile rows come from the plan.
// Writes o and lse like gsa_forward_cuda, so either backward runs after it. Calls with
// gsa_cuda_tc_unsupported(p, relations) != "" (or unaligned rows) run gsa_forward_cuda whole.
GsaTcStats gsa_forward_cuda_tc(const GsaParams& p, void* stream, bool relations = gsa_cuda_tc_relations_enabled(),
                               int64_t tile_rows = 0);
// Backward of p after either forward: delta and the dq, dk, dv of rows and sources outside dense tiles on the lane
// groups (gsa_backward_cuda on the restricted schedules), then dq of dense destination tiles (p.graph.tiles) and dk, dv
// of dense source tiles (p.graph.src_tiles) on tensor cores, dS rounded to the input type as the forward rounds P;
// with relation embeddings d_rel_emb last, by the lane groups' reduction over every edge's dS (the dq tiles write
// theirs). Same workspaces as gsa_backward_cuda.
GsaTcStats gsa_backward_cuda_tc(const GsaParams& p, void* stream, bool relations = gsa_cuda_tc_relations_enabled());

// "cuda:tc" (kernels/cuda/gsa_cuda_tc_backend.cpp): these kernels on the calls they take, the lane groups for the rest.
// strict: unsupported() also refuses the calls the tensor cores do not take (the parity table's entry); otherwise it
// takes every call "cuda" takes (the registered backend, the default on CUDA). relations: whether relation embeddings
// run on the tiles; unset: as gsa_cuda_tc_relations_enabled() says at each call. tile_rows: rows per tile of the
// forward's per-call plans (graphs that carry no tiles); unset: as SB_CUDA_TC_ROWS says.
std::unique_ptr<GsaBackend> make_gsa_cuda_tc_backend(bool strict, std::optional<bool> relations = std::nullopt,
                                                     std::optional<int64_t> tile_rows = std::nullopt);
// What the calling thread's last cuda:tc forward (or backward) ran on tensor cores.
GsaTcStats gsa_cuda_tc_last_stats(bool backward = false);

}  // namespace sb
