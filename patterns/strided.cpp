// strided(l): Sparse Transformer's strided pattern (Child et al. 2019), both heads merged into one graph.
#include "patterns/csr_rows.h"
#include "patterns/patterns.h"

namespace sb {

namespace {

class StridedPattern : public AttentionPattern {
 public:
  std::string name() const override { return "strided"; }
  std::string description() const override {
    return "Sparse Transformer strided: the previous l tokens plus every l-th token";
  }
  std::vector<ParamSpec> params() const override {
    return {{"l", 128, 1, int64_t{1} << 30, "stride and local window length"}};
  }
  bool supports_causal() const override { return true; }

  Graph build(int64_t n, bool causal, const Params& p) const override {
    const int64_t l = p.at("l");
    // Sources in ascending order: stride positions left of the window, the window |i-j| < l
    // (causal: i-l < j <= i), stride positions right of it.
    auto row = [n, l, causal](int64_t i, int32_t* col, uint16_t* rel) -> int64_t {
      const int64_t lo = std::max<int64_t>(0, i - l + 1);
      const int64_t hi = causal ? i : std::min(n - 1, i + l - 1);
      detail::RowSink out(col, rel);
      for (int64_t j = i % l; j < lo; j += l) out.put(j, dist_relation_id(i - j));
      for (int64_t j = lo; j <= hi; ++j) out.put(j, dist_relation_id(i - j));
      if (!causal) {
        for (int64_t j = i + l; j < n; j += l) out.put(j, dist_relation_id(i - j));
      }
      return out.count();
    };
    return detail::build_csr_graph(
        n, causal, detail::token_node_table(n), detail::dist_relations_plus({}),
        [&](int64_t i) { return row(i, nullptr, nullptr); }, row);
  }
};

}  // namespace

std::unique_ptr<AttentionPattern> make_strided_pattern() { return std::make_unique<StridedPattern>(); }

}  // namespace sb
