// AttentionPattern: the pluggable interface that turns a sequence length into a Graph, and its registry.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "patterns/graph.h"

namespace sb {

// Every pattern parameter is an integer with a default and an inclusive valid range.
struct ParamSpec {
  std::string name;
  int64_t default_value;
  int64_t min_value;
  int64_t max_value;
  std::string help;
};

using Params = std::map<std::string, int64_t>;

class AttentionPattern {
 public:
  virtual ~AttentionPattern() = default;
  virtual std::string name() const = 0;
  virtual std::string description() const = 0;
  virtual std::vector<ParamSpec> params() const = 0;
  virtual bool supports_causal() const = 0;
  // `p` holds every parameter, already defaulted and range-checked; n >= 1.
  virtual Graph build(int64_t n, bool causal, const Params& p) const = 0;
};

// All registered patterns, in registration order (see patterns/registry.cpp).
const std::vector<std::unique_ptr<AttentionPattern>>& all_patterns();
std::vector<std::string> pattern_names();
// Throws sb::Error listing the valid names when `name` is unknown.
const AttentionPattern& find_pattern(const std::string& name);

// Fills defaults and checks names and ranges; throws sb::Error naming the parameter and its range.
Params resolve_params(const AttentionPattern& pattern, const Params& given);
// Parses "k=4" into params; throws sb::Error on malformed input.
void parse_param_assignment(const std::string& text, Params& params);
// Checks n and causal support, resolves parameters, builds and returns the graph.
Graph build_pattern(const std::string& name, int64_t n, bool causal, const Params& given = {});

// build_pattern through a store of this process's graphs, keyed by (pattern, n, causal, resolved parameters): a
// scenario's expansion, its runner, the model and the reach table share one build of each graph. The most recently
// used graphs are kept up to a byte budget (kGraphStoreBytes); an evicted graph is built again when asked for.
constexpr int64_t kGraphStoreBytes = int64_t{256} << 20;
std::shared_ptr<const Graph> shared_pattern_graph(const std::string& name, int64_t n, bool causal,
                                                  const Params& given = {});
// Graphs build_pattern has built in this process (records show how many a point built).
int64_t pattern_graph_builds();

}  // namespace sb
