// GsaSplitPlan: which rows of a CSR graph are too long for one work item, the edge ranges (pieces) they are cut
// into, and the fixed order their partial results are merged in. Plain C++ (no SIMD, no CUDA), so any kernel can
// use it: the CPU kernels split heavy destination rows (forward, dq) and heavy sources (dk/dv) with it.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/gsa_params.h"

namespace sb {

struct GsaSplitPlan {
  // Rows with more than this many edges are split; 0 when no row is.
  int64_t threshold = 0;
  // Split rows in ascending order; the pieces of split_rows[i] are pieces [piece_ptr[i], piece_ptr[i + 1]).
  std::vector<int64_t> split_rows;
  std::vector<int64_t> piece_ptr;
  // Edge range [piece_begin[k], piece_end[k]) of piece k. The pieces of one row are contiguous, ascending and
  // together cover the row's edges exactly once; partial results are merged in piece order, which depends only
  // on row_ptr and the threshold (never on the thread count), so split rows stay bitwise reproducible.
  std::vector<int64_t> piece_begin;
  std::vector<int64_t> piece_end;
  std::vector<int64_t> piece_row;  // the row each piece belongs to
  // row_split[u] = 1 when row u is split (rows loops skip it), for every row.
  std::vector<uint8_t> row_split;
  // Column tiles (gsa_column_split_plan only): tile t groups the pieces tile_pieces[tile_ptr[t] .. tile_ptr[t + 1]),
  // 2 or more, of different rows over the same full block of columns; piece_tiled[k] = 1 for pieces in a tile.
  std::vector<int64_t> tile_ptr{0};
  std::vector<int64_t> tile_pieces;
  std::vector<uint8_t> piece_tiled;

  int64_t n_pieces() const { return static_cast<int64_t>(piece_begin.size()); }
  int64_t n_tiles() const { return static_cast<int64_t>(tile_ptr.size()) - 1; }
  bool empty() const { return split_rows.empty(); }
};

// The CPU kernels' plans of one graph: they depend on the graph alone, so a prepared graph makes them once
// (gsa_cpu_plans, kernels/gsa_cpu.h) and no kernel call plans again.
struct GsaCpuPlans {
  GsaSplitPlan rows;      // destination rows: the forward's, and the backward's without relation terms
  GsaSplitPlan rows_rel;  // destination rows of the backward with relation terms (only one-relation rows at blocks)
  GsaSplitPlan sources;   // sources of the backward by source
};

// Builds the plan for the CSR row_ptr [n_rows + 1]: every row with more than `threshold` edges is cut into
// ceil(degree / threshold) pieces of near-equal size (sizes differ by at most one, larger first).
// threshold <= 0 splits nothing.
GsaSplitPlan gsa_split_plan(const int64_t* row_ptr, int64_t n_rows, int64_t threshold);

// The forward's plan (and, over the transpose, the backward by source's): as gsa_split_plan, except that a row holding
// full aligned blocks of `block` columns (every column c of [t * block, (t + 1) * block) exactly once, columns
// ascending) is cut at those blocks when it is heavy or its aligned group of `group` rows would not run as a register
// tile (bpt's and segtree's span nodes: rows whose neighbours share none of their sources; bigbird's global rows when
// heavy). Pieces of different rows over the same block then form tiles of up to `group` pieces, in ascending block
// order, so the block's key and value rows serve every piece of a tile. The edges between blocks form pieces of at most
// `threshold` edges. With `rel` (the edges' relations), only rows whose edges all share one relation are cut at blocks
// (the backward by destination's plan: such a row's relation gradient is zero, so its pieces need no relation
// partials). Depends on the graph alone, so results stay reproducible.
GsaSplitPlan gsa_column_split_plan(const int64_t* row_ptr, const int32_t* col, int64_t n_rows, int64_t threshold,
                                   int64_t block, int group, const int32_t* rel = nullptr);

// Whether the edges [e0, e1) all have one relation (rel: the edges' relations).
bool gsa_one_relation(const int32_t* rel, int64_t e0, int64_t e1);

// The threshold the CPU kernels use for a graph of n_rows rows and n_edges edges: a row is heavy when it holds
// more than max(min_edges, factor * mean degree) edges (defaults: 512 and 8).
int64_t gsa_split_threshold(int64_t n_rows, int64_t n_edges, int64_t min_edges = 512, int64_t factor = 8);

// The threshold of the schedules prepared graphs carry for device backends, where one warp walks a row's edges
// in order: max(256, 4 x mean degree). Not yet tuned on a GPU.
int64_t gsa_device_split_threshold(int64_t n_rows, int64_t n_edges);

// Rows (or sources) per CPU scheduling block.
constexpr int64_t kGsaCpuRowBlock = 16;

// A group of rows runs as a register tile when the union of their columns is at most this many times their mean
// degree (the CPU forward tile, and gsa_column_split_plan's test for it).
constexpr double kGsaTileWaste = 1.3;

// Columns per block of the CPU forward's column tiles (gsa_column_split_plan): the forward tile's shortest rows.
constexpr int64_t kGsaCpuColumnBlock = 32;

// Destinations per block of the CPU backward by source's column tiles: larger than the forward's, since each piece
// keeps a partial dk, dv ([H, D] each) until the merge. At bpt k=4/16/64, n=8192, 128 made 1,400-3,472 pieces where
// 32 made 5,552-13,536, and ran 0.97-0.98 of the time of heavy sources cut by degree (32: 1.00-1.02).
constexpr int64_t kGsaCpuSourceBlock = 128;

// The CPU kernels' order of the blocks of kGsaCpuRowBlock rows: ascending by the smallest column (source, or
// destination in the transpose) of their edges, ties and edgeless blocks in block order. Rows whose columns are
// near each other then run close in time, so their key and value rows are still in cache: bpt's span nodes (ids
// n and up) run beside the tokens they cover instead of after all of them, each level streaming every token's keys
// and values again. Depends on the graph alone, so results stay reproducible.
std::vector<int32_t> gsa_block_order(const int64_t* row_ptr, const int32_t* col, int64_t n_rows);

// The rows a plan leaves whole, heaviest first (ties in ascending row order): the order a device backend hands
// rows to its workers, so the longest ones do not start last. A counting sort: O(rows + threshold).
std::vector<int64_t> gsa_longest_first(const int64_t* row_ptr, int64_t n_rows, const GsaSplitPlan& plan);

// A plan and gsa_longest_first's order packed into one int64 array, what a device backend uploads once per
// prepared graph: piece_begin, piece_end, piece_row [P] each, split_rows [S], piece_ptr [S + 1], order [N - S].
struct GsaPackedSchedule {
  std::vector<int64_t> data;
  int64_t n_rows = 0, n_pieces = 0, n_split = 0;
};
GsaPackedSchedule gsa_pack_schedule(const int64_t* row_ptr, int64_t n_rows, int64_t threshold);
// Pointers into a packed schedule's data (host or device memory) with its sizes.
GsaScheduleView gsa_schedule_view(const int64_t* data, int64_t n_rows, int64_t n_pieces, int64_t n_split);

}  // namespace sb
