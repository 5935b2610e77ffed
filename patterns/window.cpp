// window(w): restricted self-attention over the w nearest keys (Vaswani et al.), the BPT paper's baseline.
#include "patterns/csr_rows.h"
#include "patterns/patterns.h"

namespace sb {

namespace {

class WindowPattern : public AttentionPattern {
 public:
  std::string name() const override { return "window"; }
  std::string description() const override { return "restricted attention: w keys around each token, self included"; }
  std::vector<ParamSpec> params() const override {
    return {{"w", 256, 1, int64_t{1} << 30, "keys per token away from the boundaries, self included"}};
  }
  bool supports_causal() const override { return true; }

  Graph build(int64_t n, bool causal, const Params& p) const override {
    const int64_t w = p.at("w");
    const int64_t left = causal ? w - 1 : (w - 1) / 2;
    const int64_t right = causal ? 0 : w / 2;  // ceil((w-1)/2)
    auto lo = [left](int64_t i) { return std::max<int64_t>(0, i - left); };
    auto hi = [n, right](int64_t i) { return std::min(n - 1, i + right); };
    return detail::build_csr_graph(
        n, causal, detail::token_node_table(n), detail::dist_relations_plus({}),
        [&](int64_t i) { return hi(i) - lo(i) + 1; },
        [&](int64_t i, int32_t* col, uint16_t* rel) {
          int64_t c = 0;
          for (int64_t j = lo(i); j <= hi(i); ++j, ++c) {
            col[c] = static_cast<int32_t>(j);
            rel[c] = dist_relation_id(i - j);
          }
          return c;
        });
  }
};

}  // namespace

std::unique_ptr<AttentionPattern> make_window_pattern() { return std::make_unique<WindowPattern>(); }

}  // namespace sb
