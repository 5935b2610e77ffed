// The binary partition tree shared by bpt and segtree: level sizes, node ids and spans (ragged right edge).
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "patterns/csr_rows.h"

namespace sb::detail {

// Level 0 holds the n tokens; level j+1 has ceil(size_j / 2) nodes; the last level is the root.
// Node t of level j covers tokens [t*2^j, min((t+1)*2^j, n) - 1]. Ids: tokens, then level 1, 2, ...
struct BinaryTree {
  int64_t n = 0;
  int levels = 0;
  std::vector<int64_t> size;    // [levels]
  std::vector<int64_t> offset;  // [levels] id of node 0 of each level

  explicit BinaryTree(int64_t n_tokens) : n(n_tokens) {
    size.push_back(n);
    while (size.back() > 1) size.push_back((size.back() + 1) / 2);
    levels = static_cast<int>(size.size());
    offset.assign(size.size(), 0);
    for (int j = 1; j < levels; ++j) offset[j] = offset[j - 1] + size[j - 1];
  }
  int64_t n_nodes() const { return offset.back() + size.back(); }
  int64_t id(int level, int64_t index) const { return offset[level] + index; }
  int64_t first(int level, int64_t index) const { return index << level; }
  int64_t last(int level, int64_t index) const { return std::min((index + 1) << level, n) - 1; }

  // Tokens then span nodes, level by level, with their spans.
  std::vector<NodeInfo> node_table() const {
    std::vector<NodeInfo> nodes = token_node_table(n, n_nodes() - n);
    for (int j = 1; j < levels; ++j) {
      for (int64_t t = 0; t < size[j]; ++t) {
        nodes.push_back({NodeKind::span, j, static_cast<int32_t>(first(j, t)), static_cast<int32_t>(last(j, t))});
      }
    }
    return nodes;
  }
};

}  // namespace sb::detail
