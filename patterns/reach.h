// Reach: how many layers information needs to travel from one token to another through a pattern's graph.
#pragma once

#include <cstdint>
#include <vector>

#include "patterns/graph.h"

namespace sb {

// One layer moves information one edge (src -> dst: dst attends to src); every node updates at once from the
// previous layer's states. Extra nodes start as the model starts them: span nodes at zero (nothing), every other
// kind (relay, sentence) at the mean of the tokens it covers (all of them at layer 0).

// hops[s] = the fewest layers after which token q's state depends on token s (0 for s = q), -1 when no number
// of layers reaches it (e.g. s > q in a causal graph). Sizes n_tokens. A backward BFS from q over the
// destination CSR.
std::vector<int32_t> hops_to(const Graph& g, int64_t q);

// Up to `max_queries` query positions spread evenly over [0, n) (the last token always among them); all of
// them when n <= max_queries.
std::vector<int64_t> reach_query_positions(int64_t n_tokens, int64_t max_queries);

// Per source distance d = q - s (1 <= d < n) over the sampled query positions q >= d: how many there are, how
// many reach their source within `layers` hops, and the fewest / most hops among them (-1: unreachable).
struct ReachRow {
  int64_t distance = 0;
  int64_t queries = 0;
  int64_t reachable = 0;
  int32_t min_hops = -1;
  int32_t max_hops = -1;  // -1 when some query cannot be reached at all
  double fraction() const { return queries ? static_cast<double>(reachable) / static_cast<double>(queries) : 0.0; }
};
struct ReachSummary {
  int64_t n_tokens = 0;
  int64_t layers = 0;
  std::vector<int64_t> queries;  // the sampled query positions
  std::vector<ReachRow> rows;    // distances 1 .. n_tokens - 1
  // The largest distance up to which every sampled query reaches its source (0: not even distance 1).
  int64_t full_reach() const;
};
ReachSummary reach_summary(const Graph& g, int64_t layers, int64_t max_queries = 256);

}  // namespace sb
