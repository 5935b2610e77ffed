// GsaTilePlan: rows of a CSR graph in tiles of consecutive destinations (16 rows, or 64 with 16-row tiles where a
// 64-row tile is not dense), each tile's sorted union of sources and its element mask, and whether the tile runs as a
// dense gathered tile (tensor cores) or stays on the per-edge kernels. Plain C++ (no CUDA): the CUDA tensor-core
// forward uploads it, the CPU tests check its cover.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/gsa_math.h"
#include "kernels/gsa_params.h"

namespace sb {

// Rows per tile (one 16-row MMA tile), rows of a wide tile (four MMA row groups sharing one gathered union) and
// columns per mask word.
constexpr int64_t kGsaTileRows = 16;
constexpr int64_t kGsaWideTileRows = 64;
constexpr int64_t kGsaTileMaskBits = 32;

struct GsaTileOptions {
  // A tile is dense when edges / (rows x union) >= min_density and its union holds at most max_union columns (one
  // block walks the union in 32-column chunks, so a long union is a long tail). Measured on an H200 (bf16, H=8, D=64,
  // causal, prepared tiles): bpt k=4 at n=16384 ran 1.45 ms at 0.25 (a few sparse tiles with long unions), 0.35 ms at
  // 0.35 and 0.5, 0.57 ms on the lane groups alone; window w=128 tiles have density 0.9.
  double min_density = 0.35;
  int64_t max_union = 1024;
  // Rows per tile: kGsaTileRows, or kGsaWideTileRows (the density rule on the 64-row tile; a 64-row tile that fails
  // it is planned again as four 16-row tiles, whose sparse ones go to the per-edge kernels).
  int64_t rows = kGsaTileRows;
};

struct GsaTilePlan {
  int64_t n_nodes = 0;
  int64_t tile_rows = kGsaTileRows;  // GsaTileOptions::rows
  int64_t n_tiles = 0;  // ceil(n_nodes / tile_rows); tile t holds rows [t * tile_rows, min(n, (t + 1) * tile_rows))
  // Every tile of tile_rows rows: its union size, edge count and density (0 for an edgeless tile), whether it is dense.
  std::vector<int64_t> tile_union, tile_edges;
  std::vector<double> tile_density;
  std::vector<uint8_t> tile_dense;
  // Dense tiles only: first the n_wide dense tiles of tile_rows = 64 rows, then 16-row ones (every dense tile of a
  // 16-row plan, n_wide = 0), each part in ascending order. Tile id in units of its rows (first_row(i) =
  // dense_tile[i] * rows_of(i)); sources union_col[union_ptr[i] .. union_ptr[i + 1]) ascending; masks
  // mask[mask_ptr[i] + r * words(i) + c / 32] bit c % 32 set when row r of the tile attends to union column c, with
  // words(i) = ceil(union / 32) and always rows_of(i) rows (rows past n_nodes all zero).
  int64_t n_wide = 0;
  std::vector<int64_t> dense_tile;
  std::vector<int64_t> union_ptr{0};
  std::vector<int32_t> union_col;
  std::vector<int64_t> mask_ptr{0};
  std::vector<uint32_t> mask;
  // Dense tiles only: each tile's edges (indices into the planned CSR) in its masks' order, row by row and ascending
  // union column, tile i's from edge_ptr[i]: what relation embeddings need (gsa_tile_edge). Rows need not list their
  // sources in order.
  std::vector<int64_t> edge_ptr{0};
  std::vector<int32_t> edge;
  // Rows of the tiles that are not dense, ascending: the per-edge kernels' share.
  std::vector<int64_t> fallback_rows;
  int64_t dense_edges = 0;  // edges inside dense tiles

  int64_t n_dense() const { return static_cast<int64_t>(dense_tile.size()); }
  int64_t rows_of(int64_t i) const { return i < n_wide ? kGsaWideTileRows : kGsaTileRows; }
  int64_t first_row(int64_t i) const { return dense_tile[i] * rows_of(i); }
  int64_t words(int64_t i) const { return (union_ptr[i + 1] - union_ptr[i] + kGsaTileMaskBits - 1) / kGsaTileMaskBits; }
  bool mask_bit(int64_t i, int64_t r, int64_t c) const {
    return ((mask[mask_ptr[i] + r * words(i) + c / kGsaTileMaskBits] >> (c % kGsaTileMaskBits)) & 1u) != 0;
  }
};

// Set bits of `word` below bit j (j < 32): an element's rank among its row's edges in a chunk.
SB_HD int gsa_bits_below(uint32_t word, int j) {
  const uint32_t below = word & ((1u << j) - 1u);
#if defined(__CUDA_ARCH__)
  return __popc(below);
#else
  return __builtin_popcount(below);
#endif
}

// The CSR edge of element (r, c) of dense tile i (its mask bit set): row_edges = edge + edge_ptr[i] + row_ptr[r0 + r]
// - row_ptr[r0] (the row's edges in the tile's list, r0 its first row), seen = set bits of the row's mask words
// before c's, word = c's. Host and device alike, so the CPU tests check what the kernels compute.
SB_HD int32_t gsa_tile_edge(const int32_t* row_edges, int64_t seen, uint32_t word, int64_t c) {
  return row_edges[seen + gsa_bits_below(word, static_cast<int>(c % kGsaTileMaskBits))];
}

// Plans the tiles of the CSR graph row_ptr [n + 1], col [E]. A tile whose rows repeat a source is never dense (a mask
// holds each pair once). Depends on the graph and options alone.
GsaTilePlan gsa_tile_plan(const int64_t* row_ptr, const int32_t* col, int64_t n_nodes,
                          const GsaTileOptions& options = {});

// The per-edge kernels' schedule restricted to plan.fallback_rows, from a packed schedule's data (gsa_pack_schedule
// layout, n_pieces and n_split as in `full`): pieces of fallback rows only (in their order), their split rows and
// piece_ptr, the unsplit fallback rows in the schedule's order. Its pieces are a subset of full's, so a workspace
// sized for full fits it; an empty `full` (no schedule) gives the fallback rows in ascending order. Returns the packed
// data; n_pieces, n_split and n_order of the result go to *out_sizes.
struct GsaScheduleSizes {
  int64_t n_pieces = 0, n_split = 0, n_order = 0;
};
std::vector<int64_t> gsa_fallback_schedule(const std::vector<int64_t>& full, int64_t n_rows, int64_t n_pieces,
                                           int64_t n_split, const GsaTilePlan& plan, GsaScheduleSizes* out_sizes);

// A view of packed schedule data whose order holds n_order rows (gsa_schedule_view assumes every unsplit row).
GsaScheduleView gsa_schedule_view_sized(const int64_t* data, const GsaScheduleSizes& sizes);

// A plan's dense tiles and the fallback schedule packed into one int64 array (int32 and uint32 arrays two to an
// entry), what a device backend uploads once per prepared graph; offsets in int64 entries.
struct GsaPackedTiles {
  std::vector<int64_t> data;
  int64_t at_tile = 0, at_union_ptr = 0, at_union_col = 0, at_mask_ptr = 0, at_mask = 0, at_rest = 0;
  int64_t at_edge_ptr = 0, at_edge = 0;
  int64_t n_dense = 0, dense_edges = 0, n_rest_rows = 0;
  int64_t tile_rows = kGsaTileRows, n_wide = 0;  // the plan's
  GsaScheduleSizes rest;
};
// rows_schedule: the graph's packed destination schedule (gsa_pack_schedule) with its n_pieces and n_split, or empty.
GsaPackedTiles gsa_pack_tiles(const GsaTilePlan& plan, const std::vector<int64_t>& rows_schedule, int64_t n_pieces,
                              int64_t n_split);
// SB_CUDA_TC_ROWS: rows per tile of the tensor-core forward's plans, 16 (unset, empty or 16: the default) or 64
// (opt-in until a GPU has verified and timed it). gsa_tile_rows_switch parses a value (nullptr: unset) and throws
// sb::Error naming the variable for any other; gsa_tile_rows_from_env reads the variable once. Read where a plan is
// made (prepared graphs, per-call plans); kernels take the rows from the plan.
int64_t gsa_tile_rows_switch(const char* value);
int64_t gsa_tile_rows_from_env();

// Pointers into packed tiles' data (host or device memory) at `layout`'s offsets (its data is not read).
GsaTileView gsa_tile_view(const int64_t* data, const GsaPackedTiles& layout);

}  // namespace sb
