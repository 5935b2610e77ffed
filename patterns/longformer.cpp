// longformer(w, d, g): Longformer (Beltagy et al. 2020): dilated sliding window plus g global tokens.
#include "patterns/csr_rows.h"
#include "patterns/patterns.h"

namespace sb {

namespace {

class LongformerPattern : public AttentionPattern {
 public:
  std::string name() const override { return "longformer"; }
  std::string description() const override {
    return "Longformer: window of w with dilation d, the first g tokens global";
  }
  std::vector<ParamSpec> params() const override {
    return {{"w", 256, 1, int64_t{1} << 30, "window: offsets |m| <= w/2 (causal: -w < m <= 0)"},
            {"d", 1, 1, int64_t{1} << 20, "dilation: the window holds tokens i + d*m"},
            {"g", 1, 0, int64_t{1} << 30, "global tokens at the start of the sequence"}};
  }
  bool supports_causal() const override { return true; }

  Graph build(int64_t n, bool causal, const Params& p) const override {
    const int64_t w = p.at("w");
    const int64_t d = p.at("d");
    const int64_t g = std::min(p.at("g"), n);
    const uint16_t global_rel = detail::extra_relation_id(0);
    // Edges to or from a global token are labelled `global` (self-loops keep dist:0).
    auto row = [=](int64_t i, int32_t* col, uint16_t* rel) -> int64_t {
      detail::RowSink out(col, rel);
      const int64_t max_src = causal ? i : n - 1;
      if (i < g) {
        for (int64_t j = 0; j <= max_src; ++j) out.put(j, j == i ? dist_relation_id(0) : global_rel);
        return out.count();
      }
      for (int64_t j = 0; j < g; ++j) out.put(j, global_rel);
      const int64_t m_lo = std::max(causal ? -(w - 1) : -(w / 2), -(i / d));
      const int64_t m_hi = std::min(causal ? int64_t{0} : w / 2, (n - 1 - i) / d);
      for (int64_t m = m_lo; m <= m_hi; ++m) {
        const int64_t j = i + d * m;
        if (j >= g) out.put(j, dist_relation_id(i - j));
      }
      return out.count();
    };
    return detail::build_csr_graph(
        n, causal, detail::token_node_table(n), detail::dist_relations_plus({"global"}),
        [&](int64_t i) { return row(i, nullptr, nullptr); }, row);
  }
};

}  // namespace

std::unique_ptr<AttentionPattern> make_longformer_pattern() { return std::make_unique<LongformerPattern>(); }

}  // namespace sb
