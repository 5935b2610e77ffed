// star: Star-Transformer (Guo et al. 2019): ring neighbours plus one relay node linked to every token.
#include "patterns/csr_rows.h"
#include "patterns/patterns.h"

namespace sb {

namespace {

class StarPattern : public AttentionPattern {
 public:
  std::string name() const override { return "star"; }
  std::string description() const override {
    return "Star-Transformer: tokens i-1, i, i+1 and a relay node (initialised with the token mean)";
  }
  std::vector<ParamSpec> params() const override { return {}; }
  // The relay sees every token, so no causal form exists.
  bool supports_causal() const override { return false; }

  Graph build(int64_t n, bool causal, const Params&) const override {
    std::vector<NodeInfo> nodes = detail::token_node_table(n, 1);
    nodes.push_back({NodeKind::relay, 1, 0, static_cast<int32_t>(n - 1)});
    const int32_t relay = static_cast<int32_t>(n);
    const uint16_t relay_rel = detail::extra_relation_id(0);
    auto row = [n, relay, relay_rel](int64_t u, int32_t* col, uint16_t* rel) -> int64_t {
      detail::RowSink out(col, rel);
      if (u == relay) {
        for (int64_t j = 0; j <= n; ++j) out.put(j, relay_rel);  // every token, then itself
        return out.count();
      }
      for (int64_t j = std::max<int64_t>(0, u - 1); j <= std::min(n - 1, u + 1); ++j) {
        out.put(j, dist_relation_id(u - j));
      }
      out.put(relay, relay_rel);
      return out.count();
    };
    return detail::build_csr_graph(
        n, causal, std::move(nodes), detail::dist_relations_plus({"relay"}),
        [&](int64_t u) { return row(u, nullptr, nullptr); }, row);
  }
};

}  // namespace

std::unique_ptr<AttentionPattern> make_star_pattern() { return std::make_unique<StarPattern>(); }

}  // namespace sb
