// Reach of a pattern graph: fewest hops from every source token to a query token (backward BFS), and its summary
// per source distance for an L-layer model.
#include "patterns/reach.h"

#include <algorithm>

#include <fmt/format.h>

#include "common/error.h"

namespace sb {

std::vector<int32_t> hops_to(const Graph& g, int64_t q) {
  const int64_t n = g.n_tokens, nodes = g.n_nodes();
  if (q < 0 || q >= n) throw Error(fmt::format("reach: query token {} is outside [0, {})", q, n));
  std::vector<int32_t> node_dist(static_cast<size_t>(nodes), -1), hops(static_cast<size_t>(n), -1);
  // Stop once every token that can be found is: all of them, or (causal) every token <= q.
  const int64_t want = g.causal ? q + 1 : n;
  int64_t found = 0;
  auto mark = [&](int32_t t, int32_t depth) {
    if (hops[static_cast<size_t>(t)] >= 0) return;
    hops[static_cast<size_t>(t)] = depth;
    found += !g.causal || t <= q;
  };
  std::vector<int32_t> frontier = {static_cast<int32_t>(q)}, next;
  node_dist[static_cast<size_t>(q)] = 0;
  for (int32_t depth = 0; !frontier.empty() && found < want; ++depth) {
    for (const int32_t v : frontier) {
      // What v holds at layer 0: itself (a token) or its tokens' mean (a relay or sentence node).
      const NodeInfo& info = g.nodes[static_cast<size_t>(v)];
      if (v < n) {
        mark(v, depth);
      } else if (info.kind != NodeKind::span) {
        for (int32_t t = info.first; t <= info.last; ++t) mark(t, depth);
      }
    }
    if (found >= want) break;
    next.clear();
    for (const int32_t v : frontier) {
      for (int64_t e = g.row_ptr[static_cast<size_t>(v)]; e < g.row_ptr[static_cast<size_t>(v) + 1]; ++e) {
        const int32_t u = g.col[static_cast<size_t>(e)];
        if (node_dist[static_cast<size_t>(u)] >= 0) continue;
        node_dist[static_cast<size_t>(u)] = depth + 1;
        next.push_back(u);
      }
    }
    frontier.swap(next);
  }
  return hops;
}

std::vector<int64_t> reach_query_positions(int64_t n_tokens, int64_t max_queries) {
  std::vector<int64_t> out;
  if (n_tokens <= 0) return out;
  if (max_queries <= 0 || n_tokens <= max_queries) {
    for (int64_t q = 0; q < n_tokens; ++q) out.push_back(q);
    return out;
  }
  // Evenly spaced, ending at the last token.
  for (int64_t i = 1; i <= max_queries; ++i) out.push_back((n_tokens - 1) * i / max_queries);
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

int64_t ReachSummary::full_reach() const {
  int64_t d = 0;
  for (const ReachRow& r : rows) {
    if (r.queries == 0 || r.reachable < r.queries) break;
    d = r.distance;
  }
  return d;
}

ReachSummary reach_summary(const Graph& g, int64_t layers, int64_t max_queries) {
  if (layers < 1) throw Error(fmt::format("--layers: expected an integer >= 1, got {}", layers));
  ReachSummary s;
  s.n_tokens = g.n_tokens;
  s.layers = layers;
  s.queries = reach_query_positions(g.n_tokens, max_queries);
  s.rows.resize(static_cast<size_t>(std::max<int64_t>(0, g.n_tokens - 1)));
  for (size_t i = 0; i < s.rows.size(); ++i) s.rows[i].distance = static_cast<int64_t>(i) + 1;
  std::vector<bool> unreachable(s.rows.size(), false);
  for (const int64_t q : s.queries) {
    const std::vector<int32_t> hops = hops_to(g, q);
    for (int64_t d = 1; d <= q; ++d) {
      ReachRow& r = s.rows[static_cast<size_t>(d - 1)];
      const int32_t h = hops[static_cast<size_t>(q - d)];
      ++r.queries;
      if (h < 0) {
        unreachable[static_cast<size_t>(d - 1)] = true;
        continue;
      }
      if (h <= layers) ++r.reachable;
      r.min_hops = r.min_hops < 0 ? h : std::min(r.min_hops, h);
      r.max_hops = std::max(r.max_hops, h);
    }
  }
  for (size_t i = 0; i < s.rows.size(); ++i) {
    if (unreachable[i]) s.rows[i].max_hops = -1;
  }
  return s;
}

}  // namespace sb
