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

int64_t gsa_split_threshold(int64_t n_rows, int64_t n_edges, int64_t min_edges, int64_t factor) {
  const int64_t mean = n_rows > 0 ? (n_edges + n_rows - 1) / n_rows : 0;
  return std::max(min_edges, factor * mean);
}

}  // namespace sb
