// Graph construction (edge list or CSR), transpose, validation, statistics and fingerprint.
#include "patterns/graph.h"

#include <algorithm>
#include <cstring>
#include <fmt/format.h>
#include <numeric>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/hash.h"

namespace sb {

const char* node_kind_name(NodeKind kind) {
  switch (kind) {
    case NodeKind::token: return "token";
    case NodeKind::span: return "span";
    case NodeKind::relay: return "relay";
    case NodeKind::sentence: return "sentence";
  }
  return "unknown";
}

void check_edge_count(int64_t n_edges) {
  if (n_edges > kMaxEdges) {
    throw Error(fmt::format("graph: {} edges exceed the limit of {} (edge indices are 32-bit); use a smaller n or "
                            "a sparser setting", n_edges, kMaxEdges));
  }
}

std::string dist_relation_name(int64_t d) {
  return fmt::format("dist:{}", std::clamp<int64_t>(d, -kDistClip, kDistClip));
}

namespace {

std::vector<NodeInfo> token_nodes(int64_t n) {
  std::vector<NodeInfo> nodes(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    nodes[i] = {NodeKind::token, 0, static_cast<int32_t>(i), static_cast<int32_t>(i)};
  }
  return nodes;
}

// Sorts each destination row by source (keeping rel aligned) where it is not sorted already.
void sort_rows(const std::vector<int64_t>& row_ptr, std::vector<int32_t>& col, std::vector<uint16_t>& rel) {
  std::vector<std::pair<int32_t, uint16_t>> tmp;
  const int64_t rows = static_cast<int64_t>(row_ptr.size()) - 1;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t b = row_ptr[r], e = row_ptr[r + 1];
    if (std::is_sorted(col.begin() + b, col.begin() + e)) continue;
    tmp.resize(static_cast<size_t>(e - b));
    for (int64_t i = b; i < e; ++i) tmp[i - b] = {col[i], rel[i]};
    std::sort(tmp.begin(), tmp.end());
    for (int64_t i = b; i < e; ++i) {
      col[i] = tmp[i - b].first;
      rel[i] = tmp[i - b].second;
    }
  }
}

}  // namespace

void group_edges(const std::vector<int64_t>& row_ptr, const std::vector<int32_t>& key, int64_t n_groups,
                 std::vector<int64_t>& group_ptr, std::vector<int32_t>& group_dst, std::vector<int32_t>& group_edge) {
  const int64_t nn = static_cast<int64_t>(row_ptr.size()) - 1;
  const int64_t ne = static_cast<int64_t>(key.size());
  group_ptr.assign(static_cast<size_t>(n_groups + 1), 0);
  for (int64_t e = 0; e < ne; ++e) group_ptr[key[e] + 1]++;
  for (int64_t g = 0; g < n_groups; ++g) group_ptr[g + 1] += group_ptr[g];
  std::vector<int64_t> cursor(group_ptr.begin(), group_ptr.end() - 1);
  group_dst.resize(static_cast<size_t>(ne));
  group_edge.resize(static_cast<size_t>(ne));
  for (int64_t u = 0; u < nn; ++u) {
    for (int64_t e = row_ptr[u]; e < row_ptr[u + 1]; ++e) {
      const int64_t slot = cursor[key[e]]++;
      group_dst[slot] = static_cast<int32_t>(u);
      group_edge[slot] = static_cast<int32_t>(e);
    }
  }
}

GraphBuilder::GraphBuilder(int64_t n_tokens, bool causal)
    : n_tokens_(n_tokens), causal_(causal), nodes_(token_nodes(n_tokens)) {}

int32_t GraphBuilder::add_node(NodeKind kind, int32_t level, int32_t first, int32_t last) {
  nodes_.push_back({kind, level, first, last});
  return static_cast<int32_t>(nodes_.size() - 1);
}

uint16_t GraphBuilder::relation(const std::string& name) {
  for (size_t i = 0; i < relations_.size(); ++i) {
    if (relations_[i] == name) return static_cast<uint16_t>(i);
  }
  if (relations_.size() >= 65535) throw Error("graph: more than 65535 relations");
  relations_.push_back(name);
  return static_cast<uint16_t>(relations_.size() - 1);
}

Graph GraphBuilder::finish() {
  const int64_t nn = static_cast<int64_t>(nodes_.size());
  std::vector<int64_t> row_ptr(static_cast<size_t>(nn + 1), 0);
  for (const Edge& e : edges_) {
    if (e.dst < 0 || e.dst >= nn || e.src < 0 || e.src >= nn) {
      throw Error(fmt::format("graph: edge {} -> {} outside nodes [0, {})", e.src, e.dst, nn));
    }
    row_ptr[e.dst + 1]++;
  }
  for (int64_t u = 0; u < nn; ++u) row_ptr[u + 1] += row_ptr[u];
  std::vector<int64_t> cursor(row_ptr.begin(), row_ptr.end() - 1);
  std::vector<int32_t> col(edges_.size());
  std::vector<uint16_t> rel(edges_.size());
  for (const Edge& e : edges_) {
    const int64_t slot = cursor[e.dst]++;
    col[slot] = e.src;
    rel[slot] = e.rel;
  }
  edges_.clear();
  edges_.shrink_to_fit();
  return graph_from_csr(n_tokens_, causal_, std::move(nodes_), std::move(relations_), std::move(row_ptr),
                        std::move(col), std::move(rel));
}

Graph graph_from_csr(int64_t n_tokens, bool causal, std::vector<NodeInfo> nodes,
                     std::vector<std::string> relations, std::vector<int64_t> row_ptr,
                     std::vector<int32_t> col, std::vector<uint16_t> rel) {
  check_edge_count(static_cast<int64_t>(col.size()));
  Graph g;
  g.n_tokens = n_tokens;
  g.causal = causal;
  g.nodes = std::move(nodes);
  g.relations = std::move(relations);
  g.row_ptr = std::move(row_ptr);
  g.col = std::move(col);
  g.rel = std::move(rel);
  if (static_cast<int64_t>(g.row_ptr.size()) != g.n_nodes() + 1 || g.col.size() != g.rel.size() ||
      g.row_ptr.back() != g.n_edges()) {
    throw Error("graph: inconsistent CSR arrays");
  }
  sort_rows(g.row_ptr, g.col, g.rel);
  group_edges(g.row_ptr, g.col, g.n_nodes(), g.t_row_ptr, g.t_col, g.t_edge);  // the transpose
  return g;
}

void Graph::validate() const {
  const int64_t nn = n_nodes();
  const int64_t ne = n_edges();
  auto fail = [](const std::string& msg) { throw Error("graph invalid: " + msg); };
  if (n_tokens < 1 || n_tokens > nn) fail(fmt::format("n_tokens {} with {} nodes", n_tokens, nn));
  if (static_cast<int64_t>(row_ptr.size()) != nn + 1 || row_ptr[0] != 0 || row_ptr[nn] != ne) {
    fail("row_ptr size or bounds");
  }
  if (static_cast<int64_t>(rel.size()) != ne || static_cast<int64_t>(t_col.size()) != ne ||
      static_cast<int64_t>(t_edge.size()) != ne || static_cast<int64_t>(t_row_ptr.size()) != nn + 1) {
    fail("edge array sizes differ");
  }
  for (int64_t u = 0; u < nn; ++u) {
    const NodeInfo& nd = nodes[u];
    if (u < n_tokens && (nd.kind != NodeKind::token || nd.first != u || nd.last != u)) {
      fail(fmt::format("node {} should be token {}", u, u));
    }
    if (u >= n_tokens && nd.kind == NodeKind::token) fail(fmt::format("extra node {} has kind token", u));
    if (nd.first < 0 || nd.last < nd.first || nd.last >= n_tokens) {
      fail(fmt::format("node {} covers [{}, {}] outside the tokens", u, nd.first, nd.last));
    }
    if (row_ptr[u + 1] < row_ptr[u]) fail(fmt::format("row_ptr decreases at node {}", u));
    bool self = false;
    for (int64_t e = row_ptr[u]; e < row_ptr[u + 1]; ++e) {
      const int32_t v = col[e];
      if (v < 0 || v >= nn) fail(fmt::format("edge {} has source {} outside the nodes", e, v));
      if (e > row_ptr[u] && col[e - 1] >= v) fail(fmt::format("row {} is unsorted or has a duplicate source {}", u, v));
      if (rel[e] >= relations.size()) fail(fmt::format("edge {} has relation id {} of {}", e, rel[e], relations.size()));
      if (v == u) self = true;
      if (causal && u < n_tokens && nodes[v].last > u) {
        fail(fmt::format("causal token {} receives from node {} covering [{}, {}]", u, v, nodes[v].first, nodes[v].last));
      }
    }
    if (u < n_tokens && !self) fail(fmt::format("token {} has no self-loop", u));
  }
  // The transpose must hold every edge exactly once, grouped by its source.
  std::vector<char> seen(static_cast<size_t>(ne), 0);
  for (int64_t v = 0; v < nn; ++v) {
    for (int64_t t = t_row_ptr[v]; t < t_row_ptr[v + 1]; ++t) {
      const int32_t e = t_edge[t];
      if (e < 0 || e >= ne || seen[e]) fail(fmt::format("transpose entry {} repeats or misses edge {}", t, e));
      seen[e] = 1;
      if (col[e] != v) fail(fmt::format("transpose entry {} lists edge {} under source {}", t, e, v));
      const int32_t u = t_col[t];
      if (u < 0 || u >= nn || e < row_ptr[u] || e >= row_ptr[u + 1]) {
        fail(fmt::format("transpose entry {} names destination {} not owning edge {}", t, u, e));
      }
    }
  }
}

int64_t Graph::bytes() const {
  return static_cast<int64_t>(row_ptr.size() * sizeof(int64_t) + col.size() * sizeof(int32_t) +
                              rel.size() * sizeof(uint16_t) + t_row_ptr.size() * sizeof(int64_t) +
                              t_col.size() * sizeof(int32_t) + t_edge.size() * sizeof(int32_t) +
                              nodes.size() * sizeof(NodeInfo));
}

nlohmann::json graph_stats_json(const GraphStats& s) {
  return {{"n_tokens", s.n_tokens},
          {"n_nodes", s.n_nodes},
          {"n_edges", s.n_edges},
          {"in_degree_min", s.token_in_degree_min},
          {"in_degree_mean", s.token_in_degree_mean},
          {"in_degree_max", s.token_in_degree_max},
          {"node_in_degree_max", s.node_in_degree_max},
          {"bytes", s.bytes},
          {"max_hops", s.max_hops}};
}

GraphStats Graph::stats(int64_t max_hops_n) const {
  GraphStats s;
  s.n_tokens = n_tokens;
  s.n_nodes = n_nodes();
  s.n_edges = n_edges();
  s.bytes = bytes();
  s.token_in_degree_min = INT64_MAX;
  int64_t total = 0;
  for (int64_t i = 0; i < n_tokens; ++i) {
    const int64_t d = row_ptr[i + 1] - row_ptr[i];
    s.token_in_degree_min = std::min(s.token_in_degree_min, d);
    s.token_in_degree_max = std::max(s.token_in_degree_max, d);
    total += d;
  }
  s.token_in_degree_mean = static_cast<double>(total) / static_cast<double>(n_tokens);
  s.node_in_degree_max = s.token_in_degree_max;
  for (int64_t i = n_tokens; i < n_nodes(); ++i) s.node_in_degree_max = std::max(s.node_in_degree_max, row_ptr[i + 1] - row_ptr[i]);
  if (n_tokens > max_hops_n) return s;
  // BFS along information flow (source -> destination) from every token; a token may only
  // reach tokens at or after it when causal, every token otherwise.
  const int64_t nn = n_nodes();
  std::vector<int32_t> dist(static_cast<size_t>(nn));
  std::vector<int32_t> queue(static_cast<size_t>(nn));
  int64_t worst = 0;
  for (int64_t a = 0; a < n_tokens; ++a) {
    std::fill(dist.begin(), dist.end(), -1);
    size_t head = 0, tail = 0;
    dist[a] = 0;
    queue[tail++] = static_cast<int32_t>(a);
    while (head < tail) {
      const int32_t v = queue[head++];
      for (int64_t t = t_row_ptr[v]; t < t_row_ptr[v + 1]; ++t) {
        const int32_t u = t_col[t];
        if (dist[u] < 0) {
          dist[u] = dist[v] + 1;
          queue[tail++] = u;
        }
      }
    }
    for (int64_t b = causal ? a : 0; b < n_tokens; ++b) {
      if (dist[b] < 0) {
        s.max_hops = -1;
        return s;
      }
      worst = std::max<int64_t>(worst, dist[b]);
    }
  }
  s.max_hops = worst;
  return s;
}

std::string Graph::fingerprint() const {
  uint64_t h = kFnvBasis;
  auto mix = [&h](const void* data, size_t len) { h = fnv1a64(data, len, h); };
  mix(&n_tokens, sizeof(n_tokens));
  const char c = causal ? 1 : 0;
  mix(&c, 1);
  for (const NodeInfo& nd : nodes) {
    const int32_t fields[4] = {static_cast<int32_t>(nd.kind), nd.level, nd.first, nd.last};
    mix(fields, sizeof(fields));
  }
  mix(row_ptr.data(), row_ptr.size() * sizeof(int64_t));
  mix(col.data(), col.size() * sizeof(int32_t));
  mix(rel.data(), rel.size() * sizeof(uint16_t));
  for (const std::string& r : relations) mix(r.c_str(), r.size() + 1);
  return fmt::format("{:016x}", h);
}

}  // namespace sb
