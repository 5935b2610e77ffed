// fixed(l, c): Sparse Transformer's fixed pattern (Child et al. 2019): own block plus each block's last c "summary" tokens.
#include <fmt/format.h>

#include "patterns/csr_rows.h"
#include "common/error.h"
#include "patterns/patterns.h"

namespace sb {

namespace {

class FixedPattern : public AttentionPattern {
 public:
  std::string name() const override { return "fixed"; }
  std::string description() const override {
    return "Sparse Transformer fixed: own block of l tokens plus the last c tokens of every block";
  }
  std::vector<ParamSpec> params() const override {
    return {{"l", 128, 1, int64_t{1} << 30, "block length (stride)"},
            {"c", 8, 1, int64_t{1} << 30, "summary tokens at the end of each block, c <= l"}};
  }
  bool supports_causal() const override { return true; }

  Graph build(int64_t n, bool causal, const Params& p) const override {
    const int64_t l = p.at("l");
    const int64_t c = p.at("c");
    if (c > l) throw Error(fmt::format("pattern fixed: parameter c must be <= parameter l, got c={} and l={}", c, l));
    const int64_t n_blocks = (n + l - 1) / l;
    // Sources in ascending order, block by block: the own block whole (causal: up to i),
    // any other block (causal: earlier ones) through its summary positions [l-c, l-1].
    auto row = [n, l, c, n_blocks, causal](int64_t i, int32_t* col, uint16_t* rel) -> int64_t {
      const int64_t own = i / l;
      int64_t cnt = 0;
      auto put_range = [&](int64_t lo, int64_t hi) {
        for (int64_t j = lo; j <= hi; ++j, ++cnt) {
          if (col != nullptr) {
            col[cnt] = static_cast<int32_t>(j);
            rel[cnt] = dist_relation_id(i - j);
          }
        }
      };
      const int64_t last_block = causal ? own : n_blocks - 1;
      for (int64_t b = 0; b <= last_block; ++b) {
        const int64_t end = std::min(n, (b + 1) * l) - 1;
        if (b == own) {
          put_range(b * l, causal ? i : end);
        } else {
          put_range(b * l + l - c, end);
        }
      }
      return cnt;
    };
    return detail::build_csr_graph(
        n, causal, detail::token_node_table(n), detail::dist_relations_plus({}),
        [&](int64_t i) { return row(i, nullptr, nullptr); }, row);
  }
};

}  // namespace

std::unique_ptr<AttentionPattern> make_fixed_pattern() { return std::make_unique<FixedPattern>(); }

}  // namespace sb
