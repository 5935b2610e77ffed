// GsaTilePlan: 16-row tiles, their source unions, densities and element masks; the fallback rows' schedule.
#include "kernels/gsa_tile_plan.h"

#include <algorithm>

namespace sb {

GsaTilePlan gsa_tile_plan(const int64_t* row_ptr, const int32_t* col, int64_t n_nodes, const GsaTileOptions& options) {
  GsaTilePlan plan;
  plan.n_nodes = n_nodes;
  plan.n_tiles = (n_nodes + kGsaTileRows - 1) / kGsaTileRows;
  std::vector<int32_t> cols;
  for (int64_t t = 0; t < plan.n_tiles; ++t) {
    const int64_t r0 = t * kGsaTileRows, r1 = std::min(n_nodes, r0 + kGsaTileRows);
    const int64_t edges = row_ptr[r1] - row_ptr[r0];
    cols.assign(col + row_ptr[r0], col + row_ptr[r1]);
    std::sort(cols.begin(), cols.end());
    // A row repeating a source would lose an edge in the mask: such a tile is never dense.
    bool repeats = false;
    for (int64_t u = r0; u < r1 && !repeats; ++u) {
      std::vector<int32_t> row(col + row_ptr[u], col + row_ptr[u + 1]);
      std::sort(row.begin(), row.end());
      repeats = std::adjacent_find(row.begin(), row.end()) != row.end();
    }
    cols.erase(std::unique(cols.begin(), cols.end()), cols.end());
    const int64_t n_union = static_cast<int64_t>(cols.size());
    const double density = n_union > 0 ? static_cast<double>(edges) / static_cast<double>((r1 - r0) * n_union) : 0.0;
    const bool dense = n_union > 0 && !repeats && density >= options.min_density && n_union <= options.max_union;
    plan.tile_union.push_back(n_union);
    plan.tile_edges.push_back(edges);
    plan.tile_density.push_back(density);
    plan.tile_dense.push_back(dense ? 1 : 0);
    if (!dense) {
      for (int64_t u = r0; u < r1; ++u) plan.fallback_rows.push_back(u);
      continue;
    }
    plan.dense_tile.push_back(t);
    plan.union_col.insert(plan.union_col.end(), cols.begin(), cols.end());
    plan.union_ptr.push_back(static_cast<int64_t>(plan.union_col.size()));
    const int64_t words = (n_union + kGsaTileMaskBits - 1) / kGsaTileMaskBits;
    const size_t base = plan.mask.size();
    plan.mask.resize(base + static_cast<size_t>(kGsaTileRows * words), 0u);
    for (int64_t u = r0; u < r1; ++u) {
      for (int64_t e = row_ptr[u]; e < row_ptr[u + 1]; ++e) {
        const int64_t c = std::lower_bound(cols.begin(), cols.end(), col[e]) - cols.begin();
        plan.mask[base + static_cast<size_t>((u - r0) * words + c / kGsaTileMaskBits)] |= 1u << (c % kGsaTileMaskBits);
      }
    }
    plan.mask_ptr.push_back(static_cast<int64_t>(plan.mask.size()));
    plan.dense_edges += edges;
  }
  return plan;
}

std::vector<int64_t> gsa_fallback_schedule(const std::vector<int64_t>& full, int64_t n_rows, int64_t n_pieces,
                                           int64_t n_split, const GsaTilePlan& plan, GsaScheduleSizes* out_sizes) {
  std::vector<uint8_t> fallback(static_cast<size_t>(n_rows), 0);
  for (int64_t u : plan.fallback_rows) fallback[u] = 1;
  GsaScheduleSizes sizes;
  std::vector<int64_t> begin, end, row, split_rows, piece_ptr{0}, order;
  if (full.empty()) {
    order = plan.fallback_rows;
  } else {
    const GsaScheduleView s =
        gsa_schedule_view_sized(full.data(), GsaScheduleSizes{n_pieces, n_split, n_rows - n_split});
    for (int64_t i = 0; i < n_split; ++i) {
      if (!fallback[s.split_rows[i]]) continue;
      split_rows.push_back(s.split_rows[i]);
      for (int64_t k = s.piece_ptr[i]; k < s.piece_ptr[i + 1]; ++k) {
        begin.push_back(s.piece_begin[k]);
        end.push_back(s.piece_end[k]);
        row.push_back(s.piece_row[k]);
      }
      piece_ptr.push_back(static_cast<int64_t>(begin.size()));
    }
    for (int64_t i = 0; i < s.n_order; ++i) {
      if (fallback[s.order[i]]) order.push_back(s.order[i]);
    }
  }
  sizes.n_pieces = static_cast<int64_t>(begin.size());
  sizes.n_split = static_cast<int64_t>(split_rows.size());
  sizes.n_order = static_cast<int64_t>(order.size());
  std::vector<int64_t> data;
  for (const std::vector<int64_t>* part : {&begin, &end, &row, &split_rows, &piece_ptr, &order}) {
    data.insert(data.end(), part->begin(), part->end());
  }
  if (out_sizes != nullptr) *out_sizes = sizes;
  return data;
}

GsaScheduleView gsa_schedule_view_sized(const int64_t* data, const GsaScheduleSizes& sizes) {
  GsaScheduleView v;
  v.piece_begin = data;
  v.piece_end = data + sizes.n_pieces;
  v.piece_row = data + 2 * sizes.n_pieces;
  v.split_rows = data + 3 * sizes.n_pieces;
  v.piece_ptr = v.split_rows + sizes.n_split;
  v.order = v.piece_ptr + sizes.n_split + 1;
  v.n_pieces = sizes.n_pieces;
  v.n_split = sizes.n_split;
  v.n_order = sizes.n_order;
  return v;
}

}  // namespace sb
