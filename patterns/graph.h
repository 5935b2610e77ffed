// Graph: the node/edge structure every attention pattern produces and every kernel consumes.
#pragma once

#include <climits>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace sb {

enum class NodeKind : uint8_t { token, span, relay, sentence };
const char* node_kind_name(NodeKind kind);

// A node and the token range [first, last] it covers (a token covers itself).
struct NodeInfo {
  NodeKind kind = NodeKind::token;
  int32_t level = 0;
  int32_t first = 0;
  int32_t last = 0;
};

// An edge src -> dst means "dst attends to src"; rel indexes Graph::relations.
struct Edge {
  int32_t src;
  int32_t dst;
  uint16_t rel;
};

struct GraphStats {
  int64_t n_tokens = 0;
  int64_t n_nodes = 0;
  int64_t n_edges = 0;
  int64_t token_in_degree_min = 0;
  double token_in_degree_mean = 0.0;
  int64_t token_in_degree_max = 0;
  int64_t node_in_degree_max = 0;  // over every node, extra nodes included (e.g. a span node over its whole span)
  int64_t bytes = 0;
  int64_t max_hops = -1;  // token-to-token; -1 when not computed (too large) or some pair unreachable
};

// The statistics as records and the Python package carry them: n_tokens, n_nodes, n_edges, in_degree_min/mean/max
// (tokens), node_in_degree_max, bytes, max_hops.
nlohmann::json graph_stats_json(const GraphStats& s);

// Nodes 0..n_tokens-1 are tokens; extra nodes follow. Edges are stored twice:
// CSR by destination (row_ptr/col/rel) and CSR by source (t_row_ptr/t_col/t_edge),
// where t_edge[t] is the index of that edge in the destination CSR.
struct Graph {
  int64_t n_tokens = 0;
  bool causal = false;
  std::vector<NodeInfo> nodes;            // [n_nodes]
  std::vector<std::string> relations;     // relation id -> name
  std::vector<int64_t> row_ptr;           // [n_nodes + 1]
  std::vector<int32_t> col;               // [E] source node of each edge
  std::vector<uint16_t> rel;              // [E] relation id of each edge
  std::vector<int64_t> t_row_ptr;         // [n_nodes + 1]
  std::vector<int32_t> t_col;             // [E] destination node, grouped by source
  std::vector<int32_t> t_edge;            // [E] edge index into col/rel

  int64_t n_nodes() const { return static_cast<int64_t>(nodes.size()); }
  int64_t n_edges() const { return static_cast<int64_t>(col.size()); }
  int64_t n_relations() const { return static_cast<int64_t>(relations.size()); }

  // Throws sb::Error describing the first inconsistency found.
  void validate() const;
  // Memory held by the CSR, its transpose and the node table.
  int64_t bytes() const;
  // max_hops is computed with a BFS from every token when n_tokens <= max_hops_n.
  GraphStats stats(int64_t max_hops_n = 2048) const;
  // Stable 64-bit FNV-1a hash of the structure (nodes, edges, relation names), as 16 hex digits.
  std::string fingerprint() const;
};

// Builds a Graph from an unsorted edge list: sorts rows by destination (sources ascending
// within a row), builds the transpose, rejects duplicate edges. Moves the edges out.
class GraphBuilder {
 public:
  GraphBuilder(int64_t n_tokens, bool causal);
  // Adds an extra node and returns its id.
  int32_t add_node(NodeKind kind, int32_t level, int32_t first, int32_t last);
  // Returns the id of relation `name`, adding it to the vocabulary if new.
  uint16_t relation(const std::string& name);
  void reserve_edges(int64_t e) { edges_.reserve(static_cast<size_t>(e)); }
  void add_edge(int32_t src, int32_t dst, uint16_t rel) { edges_.push_back({src, dst, rel}); }
  int32_t n_nodes() const { return static_cast<int32_t>(nodes_.size()); }
  Graph finish();

 private:
  int64_t n_tokens_;
  bool causal_;
  std::vector<NodeInfo> nodes_;
  std::vector<std::string> relations_;
  std::vector<Edge> edges_;
};

// Builds a graph directly from per-destination rows already in CSR form (fast path for large n):
// row_ptr/col/rel by destination, sources sorted ascending within each row.
Graph graph_from_csr(int64_t n_tokens, bool causal, std::vector<NodeInfo> nodes,
                     std::vector<std::string> relations, std::vector<int64_t> row_ptr,
                     std::vector<int32_t> col, std::vector<uint16_t> rel);

// Groups the edges of a CSR by destination (row_ptr [N + 1]) by a per-edge key in [0, n_groups) with a
// stable counting sort: group_ptr [n_groups + 1], and for each grouped entry its destination (group_dst [E])
// and edge index (group_edge [E]), both ascending within a group. Keyed by source (col, n_groups = N) it is
// the transpose (t_row_ptr, t_col, t_edge); keyed by relation id it is the relation grouping.
void group_edges(const std::vector<int64_t>& row_ptr, const std::vector<int32_t>& key, int64_t n_groups,
                 std::vector<int64_t>& group_ptr, std::vector<int32_t>& group_dst, std::vector<int32_t>& group_edge);

// Largest edge count a Graph can hold (t_edge indexes edges with int32).
constexpr int64_t kMaxEdges = INT32_MAX;
// Throws sb::Error when a graph would have more than kMaxEdges edges.
void check_edge_count(int64_t n_edges);

// Clipped signed distance relation for token-only patterns: "dist:clamp(i-j, -clip, clip)".
constexpr int kDistClip = 32;
std::string dist_relation_name(int64_t d);
// Relation id of distance d in the distance vocabulary (ids 0..2*kDistClip; detail::dist_relations_plus).
inline uint16_t dist_relation_id(int64_t d) {
  return static_cast<uint16_t>((d < -kDistClip ? -kDistClip : d > kDistClip ? kDistClip : d) + kDistClip);
}

}  // namespace sb
