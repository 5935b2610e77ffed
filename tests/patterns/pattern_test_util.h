// Helpers shared by the pattern tests: per-row source lists and span coverage checks.
#pragma once

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "patterns/graph.h"

namespace sb::testing {

// Sources of node u with their relation names.
inline std::vector<std::pair<int32_t, std::string>> sources_of(const Graph& g, int64_t u) {
  std::vector<std::pair<int32_t, std::string>> out;
  for (int64_t e = g.row_ptr[u]; e < g.row_ptr[u + 1]; ++e) out.emplace_back(g.col[e], g.relations[g.rel[e]]);
  return out;
}

inline std::vector<int32_t> source_ids(const Graph& g, int64_t u) {
  std::vector<int32_t> out;
  for (int64_t e = g.row_ptr[u]; e < g.row_ptr[u + 1]; ++e) out.push_back(g.col[e]);
  return out;
}

// "" when the spans of token i's sources are pairwise disjoint and cover exactly [0, hi];
// otherwise a description of the first defect.
inline std::string coverage_defect(const Graph& g, int64_t i, int64_t hi) {
  std::vector<std::pair<int32_t, int32_t>> spans;
  for (int32_t v : source_ids(g, i)) spans.emplace_back(g.nodes[v].first, g.nodes[v].last);
  std::sort(spans.begin(), spans.end());
  int64_t next = 0;
  for (const auto& [first, last] : spans) {
    if (first != next) {
      return "token " + std::to_string(i) + ": span [" + std::to_string(first) + ", " + std::to_string(last) +
             "] where token " + std::to_string(next) + " was expected next";
    }
    next = int64_t{last} + 1;
  }
  if (next != hi + 1) return "token " + std::to_string(i) + ": cover ends at " + std::to_string(next - 1);
  return "";
}

}  // namespace sb::testing
