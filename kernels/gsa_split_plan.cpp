// GsaSplitPlan construction (see gsa_split_plan.h).
#include "kernels/gsa_split_plan.h"

#include <algorithm>

namespace sb {

GsaSplitPlan gsa_split_plan(const int64_t* row_ptr, int64_t n_rows, int64_t threshold) {
  GsaSplitPlan plan;
  plan.threshold = std::max<int64_t>(threshold, 0);
  plan.row_split.assign(static_cast<size_t>(std::max<int64_t>(n_rows, 0)), 0);
  plan.piece_ptr.push_back(0);
  if (threshold <= 0) return plan;
  for (int64_t u = 0; u < n_rows; ++u) {
    const int64_t e0 = row_ptr[u], degree = row_ptr[u + 1] - e0;
    if (degree <= threshold) continue;
    const int64_t pieces = (degree + threshold - 1) / threshold;
    const int64_t base = degree / pieces, extra = degree % pieces;  // the first `extra` pieces get one more edge
    int64_t e = e0;
    for (int64_t k = 0; k < pieces; ++k) {
      const int64_t size = base + (k < extra ? 1 : 0);
      plan.piece_begin.push_back(e);
      plan.piece_end.push_back(e + size);
      plan.piece_row.push_back(u);
      e += size;
    }
    plan.split_rows.push_back(u);
    plan.piece_ptr.push_back(static_cast<int64_t>(plan.piece_begin.size()));
    plan.row_split[static_cast<size_t>(u)] = 1;
  }
  return plan;
}

int64_t gsa_device_split_threshold(int64_t n_rows, int64_t n_edges) {
  return gsa_split_threshold(n_rows, n_edges, 256, 4);
}

std::vector<int64_t> gsa_longest_first(const int64_t* row_ptr, int64_t n_rows, const GsaSplitPlan& plan) {
  int64_t max_degree = 0;
  for (int64_t u = 0; u < n_rows; ++u) {
    if (!plan.row_split[static_cast<size_t>(u)]) max_degree = std::max(max_degree, row_ptr[u + 1] - row_ptr[u]);
  }
  // Bucket starts by descending degree, then a stable pass in row order.
  std::vector<int64_t> start(static_cast<size_t>(max_degree + 2), 0);
  for (int64_t u = 0; u < n_rows; ++u) {
    if (!plan.row_split[static_cast<size_t>(u)]) ++start[static_cast<size_t>(max_degree - (row_ptr[u + 1] - row_ptr[u]) + 1)];
  }
  for (size_t i = 1; i < start.size(); ++i) start[i] += start[i - 1];
  std::vector<int64_t> order(static_cast<size_t>(start.back()));
  for (int64_t u = 0; u < n_rows; ++u) {
    if (plan.row_split[static_cast<size_t>(u)]) continue;
    order[static_cast<size_t>(start[static_cast<size_t>(max_degree - (row_ptr[u + 1] - row_ptr[u]))]++)] = u;
  }
  return order;
}

GsaPackedSchedule gsa_pack_schedule(const int64_t* row_ptr, int64_t n_rows, int64_t threshold) {
  const GsaSplitPlan plan = gsa_split_plan(row_ptr, n_rows, threshold);
  const std::vector<int64_t> order = gsa_longest_first(row_ptr, n_rows, plan);
  GsaPackedSchedule s;
  s.n_rows = n_rows;
  s.n_pieces = plan.n_pieces();
  s.n_split = static_cast<int64_t>(plan.split_rows.size());
  for (const std::vector<int64_t>* part :
       {&plan.piece_begin, &plan.piece_end, &plan.piece_row, &plan.split_rows, &plan.piece_ptr, &order}) {
    s.data.insert(s.data.end(), part->begin(), part->end());
  }
  return s;
}

GsaScheduleView gsa_schedule_view(const int64_t* data, int64_t n_rows, int64_t n_pieces, int64_t n_split) {
  GsaScheduleView v;
  v.piece_begin = data;
  v.piece_end = data + n_pieces;
  v.piece_row = data + 2 * n_pieces;
  v.split_rows = data + 3 * n_pieces;
  v.piece_ptr = v.split_rows + n_split;
  v.order = v.piece_ptr + n_split + 1;
  v.n_pieces = n_pieces;
  v.n_split = n_split;
  v.n_order = n_rows - n_split;
  return v;
}

int64_t gsa_split_threshold(int64_t n_rows, int64_t n_edges, int64_t min_edges, int64_t factor) {
  const int64_t mean = n_rows > 0 ? (n_edges + n_rows - 1) / n_rows : 0;
  return std::max(min_edges, factor * mean);
}

std::vector<int32_t> gsa_block_order(const int64_t* row_ptr, const int32_t* col, int64_t n_rows) {
  const int64_t n_blocks = (n_rows + kGsaCpuRowBlock - 1) / kGsaCpuRowBlock;
  std::vector<int64_t> key(static_cast<size_t>(n_blocks), INT64_MAX);
  for (int64_t c = 0; c < n_blocks; ++c) {
    const int64_t e1 = row_ptr[std::min(n_rows, (c + 1) * kGsaCpuRowBlock)];
    for (int64_t e = row_ptr[c * kGsaCpuRowBlock]; e < e1; ++e) key[c] = std::min<int64_t>(key[c], col[e]);
  }
  std::vector<int32_t> order(static_cast<size_t>(n_blocks));
  for (int64_t c = 0; c < n_blocks; ++c) order[c] = static_cast<int32_t>(c);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return key[a] < key[b]; });
  return order;
}

}  // namespace sb
