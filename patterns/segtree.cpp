// segtree: SegTree-Transformer (Ye et al. 2019): each token attends to a minimal disjoint cover of the sequence.
#include <fmt/format.h>

#include "patterns/patterns.h"
#include "patterns/tree.h"

namespace sb {

namespace {

using detail::BinaryTree;

// Visits the fewest pairwise disjoint tree nodes covering tokens [lo, hi]: emit(level, index), left to right.
// Greedy from the left: the largest node starting at p that stays inside [lo, hi] (a node clipped by the
// ragged right edge counts only when hi is the last token).
template <class Emit>
void min_cover(const BinaryTree& tree, int64_t lo, int64_t hi, Emit&& emit) {
  int64_t p = lo;
  while (p <= hi) {
    int j = p == 0 ? tree.levels - 1 : std::min(__builtin_ctzll(static_cast<unsigned long long>(p)), tree.levels - 1);
    if (hi < tree.n - 1) {
      while ((p + (int64_t{1} << j)) - 1 > hi) --j;
    }
    emit(j, p >> j);
    p = std::min(p + (int64_t{1} << j), tree.n);
  }
}

// Relation ids: 3*level + o, o = 0 self/anc, 1 left, 2 right.
uint16_t seg_rel(int level, int o) { return static_cast<uint16_t>(3 * level + o); }

// Sources of token i in ascending id order, written to col/rel; returns the count (at most 2*levels + 3).
int64_t token_row(const BinaryTree& tree, int64_t i, bool causal, int32_t* col, uint16_t* rel) {
  std::pair<int64_t, uint16_t> buf[2 * 32 + 3];
  int c = 0;
  auto add = [&](int level, int64_t index, int o) { buf[c++] = {tree.id(level, index), seg_rel(level, o)}; };
  if (i >= 2) min_cover(tree, 0, i - 2, [&](int j, int64_t t) { add(j, t, 1); });
  if (i >= 1) add(0, i - 1, 1);
  add(0, i, 0);
  if (!causal) {
    if (i + 1 < tree.n) add(0, i + 1, 2);
    if (i + 2 < tree.n) min_cover(tree, i + 2, tree.n - 1, [&](int j, int64_t t) { add(j, t, 2); });
  }
  std::sort(buf, buf + c);
  if (col != nullptr) {
    for (int e = 0; e < c; ++e) {
      col[e] = static_cast<int32_t>(buf[e].first);
      rel[e] = buf[e].second;
    }
  }
  return c;
}

class SegtreePattern : public AttentionPattern {
 public:
  std::string name() const override { return "segtree"; }
  std::string description() const override {
    return "SegTree-Transformer: neighbours plus the fewest disjoint tree spans covering the sequence";
  }
  std::vector<ParamSpec> params() const override { return {}; }
  bool supports_causal() const override { return true; }

  Graph build(int64_t n, bool causal, const Params&) const override {
    const BinaryTree tree(n);
    std::vector<std::string> relations;
    for (int j = 0; j < tree.levels; ++j) {
      relations.push_back(j == 0 ? std::string("self") : fmt::format("anc:{}", j));
      relations.push_back(fmt::format("left:{}", j));
      relations.push_back(fmt::format("right:{}", j));
    }
    // The node table moves into the graph; the row passes read their own copy of the spans.
    const std::vector<NodeInfo> spans = tree.node_table();
    auto span_size = [&spans](int64_t u) { return int64_t{spans[u].last} - spans[u].first + 1; };
    return detail::build_csr_graph(
        n, causal, tree.node_table(), std::move(relations),
        [&](int64_t u) { return u < n ? token_row(tree, u, causal, nullptr, nullptr) : span_size(u); },
        [&](int64_t u, int32_t* col, uint16_t* rel) -> int64_t {
          if (u < n) return token_row(tree, u, causal, col, rel);
          // Bottom-up edges: a span node receives from every token it covers.
          const NodeInfo& nd = spans[u];
          int64_t c = 0;
          for (int64_t t = nd.first; t <= nd.last; ++t, ++c) {
            col[c] = static_cast<int32_t>(t);
            rel[c] = seg_rel(nd.level, 0);
          }
          return c;
        });
  }
};

}  // namespace

std::unique_ptr<AttentionPattern> make_segtree_pattern() { return std::make_unique<SegtreePattern>(); }

}  // namespace sb
