// GsaParams: the plain-data argument block every graph self-attention kernel (CPU and CUDA) takes.
#pragma once

#include <cstdint>

namespace sb {

struct GsaCpuPlans;  // kernels/gsa_split_plan.h

// How a backend that gives each row to one worker (CUDA: a warp) balances a graph (kernels/gsa_split_plan.h):
// rows of more than a threshold of edges cut into pieces whose partial results are merged in piece order, and the
// other rows heaviest first. Filled by prepared graphs; all-null (nothing split, no order) otherwise.
struct GsaScheduleView {
  const int64_t* piece_begin = nullptr;  // [n_pieces] edge range [begin, end) of each piece
  const int64_t* piece_end = nullptr;
  const int64_t* piece_row = nullptr;    // [n_pieces] the row of each piece
  const int64_t* split_rows = nullptr;   // [n_split] ascending; pieces of split_rows[i]: [piece_ptr[i], piece_ptr[i+1])
  const int64_t* piece_ptr = nullptr;    // [n_split + 1]
  const int64_t* order = nullptr;        // [n_order] the unsplit rows, heaviest first
  int64_t n_pieces = 0;
  int64_t n_split = 0;
  int64_t n_order = 0;
};

// Dense 16-row (or 64-row) tiles of a graph for a tensor-core forward (kernels/gsa_tile_plan.h, gsa_pack_tiles), on
// the kernels' device, and the destination schedule restricted to the rows outside them. n_dense < 0: the graph
// carries none (a backend that wants them plans per call).
struct GsaTileView {
  const int64_t* dense_tile = nullptr;  // [n_dense] tile ids: rows [R t, R t + R), R = 64 (first n_wide) or 16
  const int64_t* union_ptr = nullptr;   // [n_dense + 1] into union_col
  const int32_t* union_col = nullptr;   // sorted sources of each tile
  const int64_t* mask_ptr = nullptr;    // [n_dense + 1] into mask: 16 rows x ceil(union / 32) words per tile
  const uint32_t* mask = nullptr;
  const int64_t* edge_ptr = nullptr;    // [n_dense + 1] into edge
  const int32_t* edge = nullptr;        // each tile's CSR edges in mask order (GsaTilePlan::edge, gsa_tile_edge)
  int64_t n_dense = -1;
  int64_t dense_edges = 0;              // edges inside dense tiles
  GsaScheduleView rest;                 // rows outside dense tiles (a subset of GsaGraphView::rows)
  int64_t n_rest_rows = 0;
  int64_t tile_rows = 16;               // the plan's GsaTileOptions::rows (16 or 64)
  int64_t n_wide = 0;                   // leading dense tiles of 64 rows (GsaTilePlan::n_wide)
};

// A pattern graph as raw device-resident arrays (see patterns/graph.h for the layout).
struct GsaGraphView {
  const int64_t* row_ptr = nullptr;    // [N + 1] CSR by destination
  const int32_t* col = nullptr;        // [E] source node of each edge
  const int32_t* rel = nullptr;        // [E] relation id of each edge (read only when rel_emb is set)
  const int64_t* t_row_ptr = nullptr;  // [N + 1] CSR by source
  const int32_t* t_col = nullptr;      // [E] destination of each transposed edge
  const int32_t* t_edge = nullptr;     // [E] edge index of each transposed edge
  // Edges grouped by relation (for backends that reduce d(rel_emb) per relation): rel_edge[rel_ptr[r]..
  // rel_ptr[r+1]) are the edges of relation r in ascending order and rel_dst their destinations.
  const int64_t* rel_ptr = nullptr;    // [R + 1]
  const int32_t* rel_edge = nullptr;   // [E]
  const int32_t* rel_dst = nullptr;    // [E]
  // CPU: blocks of kGsaCpuRowBlock rows and of sources in the order they run (gsa_block_order); nullptr: in order.
  const int32_t* row_blocks = nullptr;
  const int32_t* src_blocks = nullptr;
  GsaScheduleView rows;                // by destination (forward, dq)
  GsaScheduleView srcs;                // by source through the transpose (dk, dv)
  GsaTileView tiles;                   // dense tiles for the tensor-core forward and dq (CUDA; n_dense < 0: none)
  GsaTileView src_tiles;               // the same over the transpose (tiles of sources), for dk and dv
  // CUDA, SB_CUDA_TC_ROWS=64: 64-row tiles by destination for the tensor-core forward (n_dense < 0: none, the forward
  // takes `tiles`); the backward and calls with relation embeddings keep `tiles`.
  GsaTileView wide_tiles;
  // Host only: the CPU kernels' plans of this graph (gsa_cpu_plans), made once with it; nullptr: made per call.
  const GsaCpuPlans* cpu_plans = nullptr;
  int64_t n_nodes = 0;
  int64_t n_edges = 0;
};

// Element strides of a [B, N, H, D] tensor whose last dimension is contiguous.
struct GsaStrides {
  int64_t batch = 0;
  int64_t node = 0;
  int64_t head = 0;
};

// Element type of every floating tensor in one call (lse and workspaces are always fp32).
enum class GsaDtype : uint8_t { f32, f64, f16, bf16 };

struct GsaParams {
  GsaGraphView graph;
  GsaDtype dtype = GsaDtype::f32;
  int64_t B = 0, N = 0, H = 0, D = 0;
  int64_t R = 0;        // relation table rows; 0 when there is no rel_emb
  double scale = 1.0;   // usually 1 / sqrt(D)

  // Forward inputs and output, [B, N, H, D].
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* o = nullptr;
  GsaStrides q_strides, k_strides, v_strides, o_strides;
  // rel_emb: [R, D] shared by all heads, row stride rel_stride; nullptr for none.
  const void* rel_emb = nullptr;
  int64_t rel_stride = 0;
  // lse: [B, N, H] contiguous natural-log softmax normaliser in the accumulation type (fp32, fp64 for
  // fp64 inputs); -inf for a row without sources.
  void* lse = nullptr;

  // Backward: d_o in, dq/dk/dv out ([B, N, H, D], same strides as q/k/v), d_rel_emb out ([R, D], rel_stride).
  const void* d_o = nullptr;
  GsaStrides d_o_strides;
  void* dq = nullptr;
  void* dk = nullptr;
  void* dv = nullptr;
  GsaStrides dq_strides, dk_strides, dv_strides;
  void* d_rel_emb = nullptr;
  // Backward workspaces on the kernels' device, caller-allocated at the sizes the backend asks for
  // (GsaBackend::backward_workspace in kernels/gsa_backend.h):
  void* delta = nullptr;          // [B, N, H] in the accumulation type: sum_d dO * O
  void* workspace = nullptr;      // backend-private scratch (its layout belongs to the backend)
  int64_t workspace_bytes = 0;
};

}  // namespace sb
