// window(w): restricted self-attention over the w nearest keys (Vaswani et al.), the BPT paper's baseline.
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
    return build_token_graph(n, causal, [n, left, right](int64_t i, std::vector<int32_t>& srcs) {
      for (int64_t j = std::max<int64_t>(0, i - left); j <= std::min(n - 1, i + right); ++j) {
        srcs.push_back(static_cast<int32_t>(j));
      }
    });
  }
};

}  // namespace

std::unique_ptr<AttentionPattern> make_window_pattern() { return std::make_unique<WindowPattern>(); }

}  // namespace sb
