// The pattern registry and builders as torch.ops.sparsebench.* (pattern_catalog, build_pattern, pattern_stats), so
// Python builds graphs with the same C++ builders as the harness instead of parsing exported JSON.
#include <torch/torch.h>

#include <nlohmann/json.hpp>

#include <cstring>
#include <string>
#include <tuple>

#include "common/error.h"
#include "patterns/pattern.h"

namespace sb {

namespace {

using json = nlohmann::json;

// Every pattern: name, description, causal support and each parameter with its default and inclusive range.
std::string pattern_catalog() {
  json out = json::array();
  for (const auto& p : all_patterns()) {
    json params = json::array();
    for (const ParamSpec& s : p->params()) {
      params.push_back({{"name", s.name}, {"default", s.default_value}, {"min", s.min_value}, {"max", s.max_value},
                        {"help", s.help}});
    }
    out.push_back({{"name", p->name()}, {"description", p->description()}, {"causal", p->supports_causal()},
                   {"params", params}});
  }
  return out.dump();
}

// params: a JSON object of integer values, e.g. {"k": 4}; names and ranges are checked by resolve_params.
Params params_of(const std::string& text) {
  const json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) throw Error("pattern parameters: expected a JSON object, got '" + text + "'");
  Params out;
  for (const auto& [key, value] : j.items()) {
    if (!value.is_number_integer()) {
      throw Error("pattern parameter " + key + ": expected an integer, got " + value.dump());
    }
    out[key] = value.get<int64_t>();
  }
  return out;
}

template <typename T>
torch::Tensor tensor_of(const std::vector<T>& v, torch::Dtype dtype) {
  torch::Tensor t = torch::empty({static_cast<int64_t>(v.size())}, torch::TensorOptions().dtype(dtype));
  if (!v.empty()) std::memcpy(t.data_ptr(), v.data(), v.size() * sizeof(T));
  return t;
}

// The graph of (name, n, causal, params) as tensors on the CPU: CSR by destination (row_ptr int64 [N+1], col int32
// [E], rel int32 [E]), by source (t_row_ptr, t_col, t_edge), the node table int32 [N, 4] (kind, level, first, last),
// and a JSON text with the token count, relation names, node kind names, resolved parameters, statistics (without
// hops) and fingerprint.
std::tuple<torch::Tensor, torch::Tensor, torch::Tensor, torch::Tensor, torch::Tensor, torch::Tensor, torch::Tensor,
           std::string>
build_pattern_op(const std::string& name, int64_t n, bool causal, const std::string& params) {
  const Params given = params_of(params);
  const Graph g = build_pattern(name, n, causal, given);
  std::vector<int32_t> rel(g.rel.begin(), g.rel.end());
  std::vector<int32_t> nodes;
  nodes.reserve(g.nodes.size() * 4);
  json kinds = json::array();
  for (const NodeInfo& node : g.nodes) {
    nodes.insert(nodes.end(), {static_cast<int32_t>(node.kind), node.level, node.first, node.last});
  }
  for (const NodeKind k : {NodeKind::token, NodeKind::span, NodeKind::relay, NodeKind::sentence}) {
    kinds.push_back(node_kind_name(k));
  }
  const json info = {{"name", name},
                     {"n_tokens", g.n_tokens},
                     {"causal", g.causal},
                     {"relations", g.relations},
                     {"node_kinds", kinds},
                     {"params", resolve_params(find_pattern(name), given)},
                     {"stats", graph_stats_json(g.stats(0))},
                     {"fingerprint", g.fingerprint()}};
  return {tensor_of(g.row_ptr, torch::kInt64),
          tensor_of(g.col, torch::kInt32),
          tensor_of(rel, torch::kInt32),
          tensor_of(g.t_row_ptr, torch::kInt64),
          tensor_of(g.t_col, torch::kInt32),
          tensor_of(g.t_edge, torch::kInt32),
          tensor_of(nodes, torch::kInt32).reshape({g.n_nodes(), 4}),
          info.dump()};
}

// The statistics of that graph, hops included when n_tokens <= max_hops_n (a BFS from every token).
std::string pattern_stats(const std::string& name, int64_t n, bool causal, const std::string& params,
                          int64_t max_hops_n) {
  return graph_stats_json(shared_pattern_graph(name, n, causal, params_of(params))->stats(max_hops_n)).dump();
}

}  // namespace

// Named by kernels/CMakeLists.txt (LINKER:--undefined), so libsparsebench_ops.so keeps these registrations.
extern "C" void sb_pattern_op_registrations() {}

}  // namespace sb

TORCH_LIBRARY_FRAGMENT(sparsebench, m) {
  m.def("pattern_catalog() -> str", &sb::pattern_catalog);
  m.def("build_pattern(str name, int n, bool causal, str params) -> "
        "(Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, str)",
        &sb::build_pattern_op);
  m.def("pattern_stats(str name, int n, bool causal, str params, int max_hops_n) -> str", &sb::pattern_stats);
}
