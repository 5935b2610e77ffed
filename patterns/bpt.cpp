// bpt(k, clip): BP-Transformer's binary partitioning graph (Ye et al. 2019, §3.2 Algorithm 1, §3.4 relations).
#include <fmt/format.h>

#include "common/error.h"
#include "patterns/patterns.h"
#include "patterns/tree.h"

namespace sb {

namespace {

using detail::BinaryTree;

// Pointer state of one token's walk when it enters level j: the first left/right index taken there,
// and whether that first step instead takes the level-(j-1) node left over by the parent move.
struct LevelStep {
  int64_t lp;
  int64_t rp;
  bool lov;
  bool rov;
};

constexpr int kMaxLevels = 32;  // n <= 2^30 gives at most 31 levels

// Walks the levels as Algorithm 1 does (k nodes per side per level, then up to the parent level).
void plan_walk(const BinaryTree& tree, int64_t i, int64_t k, LevelStep* steps) {
  int64_t lp = i - 1, rp = i + 1;
  bool lov = false, rov = false;
  for (int j = 0; j < tree.levels; ++j) {
    steps[j] = {lp, rp, lov, rov};
    const int64_t next_l = lp - k;  // the next untaken index on each side at level j
    const int64_t next_r = rp + k;
    // An even next-left (a left child) would bring in a parent overlapping taken nodes: take the child alone.
    lov = next_l >= 0 && next_l % 2 == 0;
    rov = next_r % 2 == 1;
    lp = next_l >= 0 ? next_l / 2 : -1;
    rp = next_r / 2;
  }
}

// Relation ids as the original code numbers them: (2k+1) * min(level, clip) + o,
// o = 0 for self/anc, 2m-1 for the m-th left node, 2m for the m-th right node.
struct RelationIds {
  int64_t stride;  // 2k+1
  int64_t clip;
  uint16_t operator()(int64_t level, int64_t o) const {
    return static_cast<uint16_t>(stride * std::min(level, clip) + o);
  }
};

// Visits the sources of token i in ascending node id: emit(node_id, relation_id).
template <class Emit>
void token_sources(const BinaryTree& tree, int64_t i, int64_t k, bool causal, const RelationIds& rid, Emit&& emit) {
  LevelStep steps[kMaxLevels];
  plan_walk(tree, i, k, steps);
  for (int j = 0; j < tree.levels; ++j) {
    const LevelStep& s = steps[j];
    const bool has_up = j + 1 < tree.levels;
    const int64_t off = tree.offset[j];
    // Left overlap child at level j, taken by level j+1 as its first left node.
    if (has_up && steps[j + 1].lov) emit(off + s.lp - k, rid(j + 1, 1));
    // Regular left nodes at level j: m-th step takes index lp - (m-1); an overlap replaced step 1.
    for (int64_t p = std::max<int64_t>(0, s.lp - k + 1); p <= s.lp - (s.lov ? 1 : 0); ++p) {
      emit(off + p, rid(j, 2 * (s.lp - p + 1) - 1));
    }
    if (j == 0) emit(i, rid(0, 0));
    if (causal) continue;
    for (int64_t p = s.rp + (s.rov ? 1 : 0); p <= std::min(tree.size[j] - 1, s.rp + k - 1); ++p) {
      emit(off + p, rid(j, 2 * (p - s.rp + 1)));
    }
    // Right overlap child; it may fall off the end of a ragged level, then there is nothing left to take.
    if (has_up && steps[j + 1].rov && s.rp + k < tree.size[j]) emit(off + s.rp + k, rid(j + 1, 2));
  }
}

// Number of sources token_sources visits, from the same ranges in O(levels).
int64_t token_degree(const BinaryTree& tree, int64_t i, int64_t k, bool causal) {
  LevelStep steps[kMaxLevels];
  plan_walk(tree, i, k, steps);
  int64_t d = 1;  // self
  for (int j = 0; j < tree.levels; ++j) {
    const LevelStep& s = steps[j];
    const bool has_up = j + 1 < tree.levels;
    d += has_up && steps[j + 1].lov;
    d += std::max<int64_t>(0, s.lp - (s.lov ? 1 : 0) - std::max<int64_t>(0, s.lp - k + 1) + 1);
    if (causal) continue;
    d += std::max<int64_t>(0, std::min(tree.size[j] - 1, s.rp + k - 1) - (s.rp + (s.rov ? 1 : 0)) + 1);
    d += has_up && steps[j + 1].rov && s.rp + k < tree.size[j];
  }
  return d;
}

class BptPattern : public AttentionPattern {
 public:
  std::string name() const override { return "bpt"; }
  std::string description() const override {
    return "BP-Transformer: k nodes per side per level of a binary partition, fine to coarse";
  }
  std::vector<ParamSpec> params() const override {
    return {{"k", 4, 1, int64_t{1} << 30, "contextual nodes per side per level"},
            {"clip", 30, 1, 30, "levels above clip share the relation embeddings of level clip"}};
  }
  bool supports_causal() const override { return true; }

  Graph build(int64_t n, bool causal, const Params& p) const override {
    const int64_t k = p.at("k");
    const int64_t clip = p.at("clip");
    const BinaryTree tree(n);
    // The m-th node on a side never exceeds the level size, so k beyond n adds no relations.
    const int64_t k_ids = std::min(k, n);
    const RelationIds rid{2 * k_ids + 1, clip};
    const int64_t n_rel = rid.stride * (std::min<int64_t>(tree.levels - 1, clip) + 1);
    if (n_rel > 65535) {
      throw Error(fmt::format("pattern bpt: k={} and clip={} at n={} need {} relation ids, more than 65535; "
                              "lower k or clip",
                              k, clip, n, n_rel));
    }
    std::vector<std::string> relations;
    relations.reserve(static_cast<size_t>(n_rel));
    for (int64_t id = 0; id < n_rel; ++id) {
      const int64_t level = id / rid.stride, o = id % rid.stride;
      if (o == 0) {
        relations.push_back(level == 0 ? std::string("self") : fmt::format("anc:{}", level));
      } else {
        relations.push_back(fmt::format("{}:{}:{}", o % 2 == 1 ? "left" : "right", level, (o + 1) / 2));
      }
    }
    return detail::build_csr_graph(
        n, causal, tree.node_table(), std::move(relations),
        [&](int64_t u) -> int64_t {
          if (u < n) return token_degree(tree, u, k, causal);
          const NodeInfo nd = span_of(tree, u);
          return nd.last - nd.first + 1;
        },
        [&](int64_t u, int32_t* col, uint16_t* rel) -> int64_t {
          int64_t c = 0;
          if (u < n) {
            token_sources(tree, u, k, causal, rid, [&](int64_t src, uint16_t r) {
              col[c] = static_cast<int32_t>(src);
              rel[c++] = r;
            });
            return c;
          }
          // Affiliated edges: a span node receives from every token it covers.
          const NodeInfo nd = span_of(tree, u);
          const uint16_t anc = rid(nd.level, 0);
          for (int64_t t = nd.first; t <= nd.last; ++t, ++c) {
            col[c] = static_cast<int32_t>(t);
            rel[c] = anc;
          }
          return c;
        });
  }

 private:
  static NodeInfo span_of(const BinaryTree& tree, int64_t u) {
    int j = 1;
    while (j + 1 < tree.levels && u >= tree.offset[j + 1]) ++j;
    const int64_t t = u - tree.offset[j];
    return {NodeKind::span, j, static_cast<int32_t>(tree.first(j, t)), static_cast<int32_t>(tree.last(j, t))};
  }
};

}  // namespace

int64_t bpt_edge_count(int64_t n, int64_t k, bool causal) {
  const BinaryTree tree(n);
  int64_t e = n * (tree.levels - 1);  // affiliated edges: one per token per span level
  for (int64_t i = 0; i < n; ++i) e += token_degree(tree, i, k, causal);
  return e;
}

std::unique_ptr<AttentionPattern> make_bpt_pattern() { return std::make_unique<BptPattern>(); }

}  // namespace sb
