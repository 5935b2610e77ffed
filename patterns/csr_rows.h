// Shared helpers of the pattern builders: the token node table and two-pass CSR construction.
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>
#include <stdexcept>
#include <string>
#include <vector>

#include "patterns/graph.h"

namespace sb::detail {

// Node table with n token nodes (ids 0..n-1); extra nodes are appended by the caller.
inline std::vector<NodeInfo> token_node_table(int64_t n, int64_t reserve_extra = 0) {
  std::vector<NodeInfo> nodes;
  nodes.reserve(static_cast<size_t>(n + reserve_extra));
  for (int64_t i = 0; i < n; ++i) {
    nodes.push_back({NodeKind::token, 0, static_cast<int32_t>(i), static_cast<int32_t>(i)});
  }
  return nodes;
}

// Builds the destination CSR in two passes so the edge arrays are allocated once at their exact size
// (no growth, no sorted edge list): degree(u) is the number of sources of node u, fill(u, col, rel)
// writes them in ascending source order and returns how many it wrote.
template <class Degree, class Fill>
Graph build_csr_graph(int64_t n_tokens, bool causal, std::vector<NodeInfo> nodes, std::vector<std::string> relations,
                      Degree&& degree, Fill&& fill) {
  const int64_t nn = static_cast<int64_t>(nodes.size());
  std::vector<int64_t> row_ptr(static_cast<size_t>(nn + 1));
  row_ptr[0] = 0;
  for (int64_t u = 0; u < nn; ++u) row_ptr[u + 1] = row_ptr[u] + degree(u);
  check_edge_count(row_ptr[nn]);
  std::vector<int32_t> col(static_cast<size_t>(row_ptr[nn]));
  std::vector<uint16_t> rel(static_cast<size_t>(row_ptr[nn]));
  for (int64_t u = 0; u < nn; ++u) {
    const int64_t wrote = fill(u, col.data() + row_ptr[u], rel.data() + row_ptr[u]);
    // A mismatch is a bug in the pattern, not bad input.
    if (wrote != row_ptr[u + 1] - row_ptr[u]) throw std::logic_error("pattern row size differs from its count");
  }
  return graph_from_csr(n_tokens, causal, std::move(nodes), std::move(relations), std::move(row_ptr), std::move(col),
                        std::move(rel));
}

// One row's sources as a fill function writes them (ascending, with their relation ids), or only their count in the
// degree pass (col null), so that one row function serves both passes of build_csr_graph.
class RowSink {
 public:
  RowSink(int32_t* col, uint16_t* rel) : col_(col), rel_(rel) {}
  void put(int64_t src, uint16_t r) {
    if (col_ != nullptr) {
      col_[n_] = static_cast<int32_t>(src);
      rel_[n_] = r;
    }
    ++n_;
  }
  int64_t count() const { return n_; }

 private:
  int32_t* col_;
  uint16_t* rel_;
  int64_t n_ = 0;
};

// The distance relations (ids 0..2*kDistClip) followed by `extra` named relations.
inline std::vector<std::string> dist_relations_plus(const std::vector<std::string>& extra) {
  std::vector<std::string> names;
  for (int d = -kDistClip; d <= kDistClip; ++d) names.push_back(dist_relation_name(d));
  names.insert(names.end(), extra.begin(), extra.end());
  return names;
}
// Id of the i-th extra relation of dist_relations_plus.
inline uint16_t extra_relation_id(int i) { return static_cast<uint16_t>(2 * kDistClip + 1 + i); }

}  // namespace sb::detail
