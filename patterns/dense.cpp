// dense: every token attends to every token (causal: to every earlier token and itself).
#include "patterns/csr_rows.h"
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
    // Row sizes are known up front, so an oversized n is rejected before anything is allocated.
    return detail::build_csr_graph(
        n, causal, detail::token_node_table(n), detail::dist_relations_plus({}),
        [n, causal](int64_t i) { return causal ? i + 1 : n; },
        [n, causal](int64_t i, int32_t* col, uint16_t* rel) {
          const int64_t hi = causal ? i : n - 1;
          for (int64_t j = 0; j <= hi; ++j) {
            col[j] = static_cast<int32_t>(j);
            rel[j] = dist_relation_id(i - j);
          }
          return hi + 1;
        });
  }
};

}  // namespace

std::unique_ptr<AttentionPattern> make_dense_pattern() { return std::make_unique<DensePattern>(); }

}  // namespace sb
