// GsaTilePlan: 16- or 64-row tiles, their source unions, densities and element masks; the fallback rows' schedule.
#include "kernels/gsa_tile_plan.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

#include "common/error.h"

namespace sb {

GsaTilePlan gsa_tile_plan(const int64_t* row_ptr, const int32_t* col, int64_t n_nodes, const GsaTileOptions& options) {
  if (options.rows != kGsaTileRows && options.rows != kGsaWideTileRows) {
    throw Error("gsa_tile_plan: rows = " + std::to_string(options.rows) + " (expected 16 or 64)");
  }
  GsaTilePlan plan;
  plan.n_nodes = n_nodes;
  plan.tile_rows = options.rows;
  plan.n_tiles = (n_nodes + options.rows - 1) / options.rows;
  // Stamps instead of per-tile sorts of every edge: seen_tile[c] = last tile that met source c, seen_row[c] the last
  // row (both counts of visits: 64-row plans visit rows twice); pos[c] its index in the tile's union.
  // O(E + sum of union log union).
  std::vector<int64_t> seen_tile(static_cast<size_t>(n_nodes), -1), seen_row(static_cast<size_t>(n_nodes), -1);
  std::vector<int32_t> pos(static_cast<size_t>(n_nodes), 0);
  std::vector<int32_t> cols;
  std::vector<int64_t> rank;  // rank[c]: the edge of the current row to union column c
  int64_t stamp = 0, row_stamp = 0;
  // Plans rows [r0, r1) as one tile of `rows` rows: appends it to the dense tiles and returns true when dense; with
  // stats, records its union, edges and density.
  const auto plan_tile = [&](int64_t r0, int64_t r1, int64_t rows, bool stats) {
    const int64_t t = stamp++;
    const int64_t edges = row_ptr[r1] - row_ptr[r0];
    cols.clear();
    bool repeats = false;  // a row repeating a source would lose an edge in the mask: never dense
    for (int64_t u = r0; u < r1; ++u) {
      const int64_t visit = row_stamp++;
      for (int64_t e = row_ptr[u]; e < row_ptr[u + 1]; ++e) {
        const int32_t c = col[e];
        if (seen_row[c] == visit) repeats = true;
        seen_row[c] = visit;
        if (seen_tile[c] != t) {
          seen_tile[c] = t;
          cols.push_back(c);
        }
      }
    }
    std::sort(cols.begin(), cols.end());
    const int64_t n_union = static_cast<int64_t>(cols.size());
    const double density = n_union > 0 ? static_cast<double>(edges) / static_cast<double>((r1 - r0) * n_union) : 0.0;
    const bool dense = n_union > 0 && !repeats && density >= options.min_density && n_union <= options.max_union;
    if (stats) {
      plan.tile_union.push_back(n_union);
      plan.tile_edges.push_back(edges);
      plan.tile_density.push_back(density);
      plan.tile_dense.push_back(dense ? 1 : 0);
    }
    if (!dense) return false;
    plan.dense_tile.push_back(r0 / rows);
    plan.union_col.insert(plan.union_col.end(), cols.begin(), cols.end());
    plan.union_ptr.push_back(static_cast<int64_t>(plan.union_col.size()));
    for (int64_t c = 0; c < n_union; ++c) pos[cols[c]] = static_cast<int32_t>(c);
    if (static_cast<int64_t>(rank.size()) < n_union) rank.resize(static_cast<size_t>(n_union));
    const int64_t words = (n_union + kGsaTileMaskBits - 1) / kGsaTileMaskBits;
    const size_t base = plan.mask.size();
    plan.mask.resize(base + static_cast<size_t>(rows * words), 0u);
    const size_t edge_base = plan.edge.size();
    plan.edge.resize(edge_base + static_cast<size_t>(edges));
    for (int64_t u = r0; u < r1; ++u) {
      for (int64_t e = row_ptr[u]; e < row_ptr[u + 1]; ++e) {
        const int64_t c = pos[col[e]];
        plan.mask[base + static_cast<size_t>((u - r0) * words + c / kGsaTileMaskBits)] |= 1u << (c % kGsaTileMaskBits);
      }
      // The row's edges by union column: a counting pass over its (distinct) columns' marks.
      const int64_t n_row = row_ptr[u + 1] - row_ptr[u];
      int32_t* out = plan.edge.data() + edge_base + (row_ptr[u] - row_ptr[r0]);
      for (int64_t e = row_ptr[u]; e < row_ptr[u + 1]; ++e) rank[pos[col[e]]] = e;
      int64_t k = 0;
      for (int64_t w = 0; w < words && k < n_row; ++w) {
        for (uint32_t bits = plan.mask[base + static_cast<size_t>((u - r0) * words + w)]; bits != 0; bits &= bits - 1) {
          out[k++] = static_cast<int32_t>(rank[w * kGsaTileMaskBits + __builtin_ctz(bits)]);
        }
      }
    }
    plan.mask_ptr.push_back(static_cast<int64_t>(plan.mask.size()));
    plan.edge_ptr.push_back(static_cast<int64_t>(plan.edge.size()));
    plan.dense_edges += edges;
    return true;
  };
  const int64_t rows = options.rows;
  std::vector<int64_t> sparse;  // tiles that are not dense, ascending
  for (int64_t t = 0; t < plan.n_tiles; ++t) {
    if (!plan_tile(t * rows, std::min(n_nodes, (t + 1) * rows), rows, true)) sparse.push_back(t);
  }
  if (rows == kGsaTileRows) {
    for (int64_t t : sparse) {
      for (int64_t u = t * rows; u < std::min(n_nodes, (t + 1) * rows); ++u) plan.fallback_rows.push_back(u);
    }
    return plan;
  }
  // 64-row tiles that are not dense: again as 16-row tiles, after the wide ones.
  plan.n_wide = plan.n_dense();
  for (int64_t t : sparse) {
    for (int64_t r0 = t * rows; r0 < std::min(n_nodes, (t + 1) * rows); r0 += kGsaTileRows) {
      const int64_t r1 = std::min(n_nodes, r0 + kGsaTileRows);
      if (plan_tile(r0, r1, kGsaTileRows, false)) continue;
      for (int64_t u = r0; u < r1; ++u) plan.fallback_rows.push_back(u);
    }
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

namespace {

// Appends x to data from a fresh int64 entry (two int32 or uint32 to an entry); returns its offset in entries.
template <typename X>
int64_t append(std::vector<int64_t>& data, const std::vector<X>& x) {
  const int64_t at = static_cast<int64_t>(data.size());
  data.resize(data.size() + (x.size() * sizeof(X) + 7) / 8, 0);
  if (!x.empty()) std::memcpy(data.data() + at, x.data(), x.size() * sizeof(X));
  return at;
}

}  // namespace

GsaPackedTiles gsa_pack_tiles(const GsaTilePlan& plan, const std::vector<int64_t>& rows_schedule, int64_t n_pieces,
                              int64_t n_split) {
  GsaPackedTiles t;
  const std::vector<int64_t> rest =
      gsa_fallback_schedule(rows_schedule, plan.n_nodes, n_pieces, n_split, plan, &t.rest);
  t.at_tile = append(t.data, plan.dense_tile);
  t.at_union_ptr = append(t.data, plan.union_ptr);
  t.at_mask_ptr = append(t.data, plan.mask_ptr);
  t.at_rest = append(t.data, rest);
  t.at_union_col = append(t.data, plan.union_col);
  t.at_mask = append(t.data, plan.mask);
  t.at_edge_ptr = append(t.data, plan.edge_ptr);
  t.at_edge = append(t.data, plan.edge);
  t.n_dense = plan.n_dense();
  t.dense_edges = plan.dense_edges;
  t.n_rest_rows = static_cast<int64_t>(plan.fallback_rows.size());
  t.tile_rows = plan.tile_rows;
  t.n_wide = plan.n_wide;
  return t;
}

int64_t gsa_tile_rows_switch(const char* value) {
  const std::string v = value != nullptr ? value : "";
  if (v.empty() || v == "16") return kGsaTileRows;
  if (v == "64") return kGsaWideTileRows;
  throw Error("SB_CUDA_TC_ROWS=" + v + ": expected 16 (16-row tensor-core tiles, the default) or 64 (64-row tiles "
              "for the forward)");
}

int64_t gsa_tile_rows_from_env() {
  static const int64_t rows = gsa_tile_rows_switch(std::getenv("SB_CUDA_TC_ROWS"));
  return rows;
}

GsaTileView gsa_tile_view(const int64_t* data, const GsaPackedTiles& layout) {
  GsaTileView v;
  v.dense_tile = data + layout.at_tile;
  v.union_ptr = data + layout.at_union_ptr;
  v.union_col = reinterpret_cast<const int32_t*>(data + layout.at_union_col);
  v.mask_ptr = data + layout.at_mask_ptr;
  v.mask = reinterpret_cast<const uint32_t*>(data + layout.at_mask);
  v.edge_ptr = data + layout.at_edge_ptr;
  v.edge = reinterpret_cast<const int32_t*>(data + layout.at_edge);
  v.n_dense = layout.n_dense;
  v.dense_edges = layout.dense_edges;
  v.rest = gsa_schedule_view_sized(data + layout.at_rest, layout.rest);
  v.n_rest_rows = layout.n_rest_rows;
  v.tile_rows = layout.tile_rows;
  v.n_wide = layout.n_wide;
  return v;
}

}  // namespace sb
