// bigbird(b, r, seed): BigBird-ITC (Zaheer et al. 2020): block window, global first/last block, r random blocks.
#include <unordered_set>

#include "patterns/csr_rows.h"
#include "patterns/patterns.h"

namespace sb {

namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// The source blocks of every query block, ascending, plus which of them are random picks.
struct BlockPlan {
  std::vector<std::vector<int64_t>> sources;
  std::vector<std::vector<int64_t>> random;
};

// Random candidates of block I are the interior blocks 1..I-2 (`below` of them), then I+2..last interior.
int64_t candidate_at(int64_t rank, int64_t below, int64_t I) { return rank < below ? rank + 1 : rank - below + I + 2; }

BlockPlan plan_blocks(int64_t n_blocks, int64_t r, int64_t seed, bool causal) {
  BlockPlan plan;
  plan.sources.resize(static_cast<size_t>(n_blocks));
  plan.random.resize(static_cast<size_t>(n_blocks));
  const int64_t last_interior = causal ? n_blocks - 1 : n_blocks - 2;
  for (int64_t I = 0; I < n_blocks; ++I) {
    std::vector<int64_t>& src = plan.sources[I];
    const bool global = I == 0 || (!causal && I == n_blocks - 1);
    if (global) {
      for (int64_t b = 0; b <= (causal ? I : n_blocks - 1); ++b) src.push_back(b);
      continue;
    }
    src.push_back(0);
    for (int64_t b = I - 1; b <= (causal ? I : I + 1); ++b) {
      if (b > 0 && b <= last_interior) src.push_back(b);
    }
    if (!causal) src.push_back(n_blocks - 1);
    // Interior blocks outside the window (causal: before I-1).
    const int64_t below = std::max<int64_t>(0, I - 2);
    const int64_t above = causal ? 0 : std::max<int64_t>(0, last_interior - (I + 1));
    const int64_t pool = below + above;
    const int64_t take = std::min(r, pool);
    // Floyd's sampling of `take` distinct ranks from [0, pool), seeded per block so results do not
    // depend on the order blocks are planned in.
    uint64_t state = splitmix64(static_cast<uint64_t>(seed) * 0x100000001B3ull ^ static_cast<uint64_t>(I));
    std::unordered_set<int64_t> picked;
    for (int64_t t = pool - take; t < pool; ++t) {
      state = splitmix64(state);
      const int64_t x = static_cast<int64_t>(state % static_cast<uint64_t>(t + 1));
      picked.insert(picked.count(x) ? t : x);
    }
    for (int64_t rank : picked) plan.random[I].push_back(candidate_at(rank, below, I));
    std::sort(plan.random[I].begin(), plan.random[I].end());
    src.insert(src.end(), plan.random[I].begin(), plan.random[I].end());
    std::sort(src.begin(), src.end());
    src.erase(std::unique(src.begin(), src.end()), src.end());
  }
  return plan;
}

class BigbirdPattern : public AttentionPattern {
 public:
  std::string name() const override { return "bigbird"; }
  std::string description() const override {
    return "BigBird-ITC: blocks of b, window of 3 blocks, first/last block global, r random blocks";
  }
  std::vector<ParamSpec> params() const override {
    return {{"b", 64, 1, int64_t{1} << 30, "block length"},
            {"r", 3, 0, 1 << 16, "random blocks per interior query block"},
            {"seed", 0, 0, int64_t{1} << 62, "seed of the random block choice"}};
  }
  bool supports_causal() const override { return true; }

  Graph build(int64_t n, bool causal, const Params& p) const override {
    const int64_t b = p.at("b");
    const int64_t n_blocks = (n + b - 1) / b;
    const BlockPlan plan = plan_blocks(n_blocks, p.at("r"), p.at("seed"), causal);
    const uint16_t global_rel = detail::extra_relation_id(0);
    const uint16_t random_rel = detail::extra_relation_id(1);
    auto is_global = [&](int64_t blk) { return blk == 0 || (!causal && blk == n_blocks - 1); };
    // Token-level edges: `global` when either block is global, `random` for a random block, else dist.
    auto row = [&](int64_t i, int32_t* col, uint16_t* rel) -> int64_t {
      const int64_t I = i / b;
      const std::vector<int64_t>& rnd = plan.random[I];
      int64_t c = 0;
      for (int64_t blk : plan.sources[I]) {
        const int64_t hi = blk == I && causal ? i : std::min(n, (blk + 1) * b) - 1;
        if (col == nullptr) {
          c += hi - blk * b + 1;
          continue;
        }
        const bool global = is_global(blk) || is_global(I);
        const bool random = std::binary_search(rnd.begin(), rnd.end(), blk);
        for (int64_t j = blk * b; j <= hi; ++j, ++c) {
          col[c] = static_cast<int32_t>(j);
          rel[c] = j == i ? dist_relation_id(0) : global ? global_rel : random ? random_rel : dist_relation_id(i - j);
        }
      }
      return c;
    };
    return detail::build_csr_graph(
        n, causal, detail::token_node_table(n), detail::dist_relations_plus({"global", "random"}),
        [&](int64_t i) { return row(i, nullptr, nullptr); }, row);
  }
};

}  // namespace

std::unique_ptr<AttentionPattern> make_bigbird_pattern() { return std::make_unique<BigbirdPattern>(); }

}  // namespace sb
