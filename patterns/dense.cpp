// dense: every token attends to every token (causal: to every earlier token and itself).
#include "patterns/patterns.h"

namespace sb {

namespace {

class DensePattern : public AttentionPattern {
 public:
  std::string name() const override { return "dense"; }
  std::string description() const override { return "full attention over all token pairs"; }
  std::vector<ParamSpec> params() const override { return {}; }
  bool supports_causal() const override { return true; }

  Graph build(int64_t n, bool causal, const Params&) const override {
    return build_token_graph(n, causal, [n, causal](int64_t i, std::vector<int32_t>& srcs) {
      for (int64_t j = 0; j < (causal ? i + 1 : n); ++j) srcs.push_back(static_cast<int32_t>(j));
    });
  }
};

}  // namespace

std::unique_ptr<AttentionPattern> make_dense_pattern() { return std::make_unique<DensePattern>(); }

}  // namespace sb
