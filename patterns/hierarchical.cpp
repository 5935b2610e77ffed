// hierarchical(s): Hi-Transformer (Wu et al. 2021) as one graph: sentence-level attention plus sentence nodes.
#include "patterns/csr_rows.h"
#include "patterns/patterns.h"

namespace sb {

namespace {

class HierarchicalPattern : public AttentionPattern {
 public:
  std::string name() const override { return "hierarchical"; }
  std::string description() const override {
    return "Hi-Transformer: attention inside sentences of s tokens, one node per sentence, sentence nodes all-to-all";
  }
  std::vector<ParamSpec> params() const override {
    return {{"s", 64, 1, int64_t{1} << 30, "tokens per sentence (the last one may be shorter)"}};
  }
  bool supports_causal() const override { return true; }

  Graph build(int64_t n, bool causal, const Params& p) const override {
    const int64_t s = p.at("s");
    const int64_t n_sent = (n + s - 1) / s;
    std::vector<NodeInfo> nodes = detail::token_node_table(n, n_sent);
    for (int64_t t = 0; t < n_sent; ++t) {
      nodes.push_back({NodeKind::sentence, 1, static_cast<int32_t>(t * s), static_cast<int32_t>(std::min(n, (t + 1) * s) - 1)});
    }
    const uint16_t sentence_rel = detail::extra_relation_id(0);  // token <-> its sentence node
    const uint16_t document_rel = detail::extra_relation_id(1);  // sentence node <- sentence node
    auto row = [n, s, n_sent, causal, sentence_rel, document_rel](int64_t u, int32_t* col, uint16_t* rel) -> int64_t {
      detail::RowSink out(col, rel);
      if (u < n) {
        const int64_t t = u / s;
        const int64_t hi = causal ? u : std::min(n, (t + 1) * s) - 1;
        for (int64_t j = t * s; j <= hi; ++j) out.put(j, dist_relation_id(u - j));
        if (causal) {
          // Only sentences that end before u: every earlier sentence.
          for (int64_t v = 0; v < t; ++v) out.put(n + v, sentence_rel);
        } else {
          out.put(n + t, sentence_rel);
        }
        return out.count();
      }
      const int64_t t = u - n;
      for (int64_t j = t * s; j <= std::min(n, (t + 1) * s) - 1; ++j) out.put(j, sentence_rel);
      for (int64_t v = 0; v <= (causal ? t : n_sent - 1); ++v) out.put(n + v, document_rel);
      return out.count();
    };
    return detail::build_csr_graph(
        n, causal, std::move(nodes), detail::dist_relations_plus({"sentence", "document"}),
        [&](int64_t u) { return row(u, nullptr, nullptr); }, row);
  }
};

}  // namespace

std::unique_ptr<AttentionPattern> make_hierarchical_pattern() { return std::make_unique<HierarchicalPattern>(); }

}  // namespace sb
