// The pattern registry: one registration line per pattern, plus parameter resolution and checked building.
#include <atomic>
#include <list>
#include <mutex>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/error.h"
#include "common/text.h"
#include "patterns/pattern.h"
#include "patterns/patterns.h"

namespace sb {

namespace {
std::atomic<int64_t> g_graph_builds{0};
}  // namespace

// The registration list: one X(name) line per pattern, defined by make_name_pattern() in patterns/name.cpp.
#define SB_PATTERN_LIST(X) \
  X(dense)                 \
  X(window)                \
  X(strided)               \
  X(fixed)                 \
  X(star)                  \
  X(bpt)                   \
  X(segtree)               \
  X(hierarchical)          \
  X(longformer)            \
  X(bigbird)

#define SB_DECLARE_PATTERN(name) std::unique_ptr<AttentionPattern> make_##name##_pattern();
SB_PATTERN_LIST(SB_DECLARE_PATTERN)

namespace {

std::vector<std::unique_ptr<AttentionPattern>> make_registry() {
  std::vector<std::unique_ptr<AttentionPattern>> r;
#define SB_REGISTER_PATTERN(name) r.push_back(make_##name##_pattern());
  SB_PATTERN_LIST(SB_REGISTER_PATTERN)
  return r;
}

}  // namespace

const std::vector<std::unique_ptr<AttentionPattern>>& all_patterns() {
  static const std::vector<std::unique_ptr<AttentionPattern>> registry = make_registry();
  return registry;
}

std::vector<std::string> pattern_names() {
  std::vector<std::string> names;
  for (const auto& p : all_patterns()) names.push_back(p->name());
  return names;
}

const AttentionPattern& find_pattern(const std::string& name) {
  for (const auto& p : all_patterns()) {
    if (p->name() == name) return *p;
  }
  throw Error(fmt::format("unknown pattern '{}'; valid patterns: {}", name, fmt::join(pattern_names(), ", ")));
}

Params resolve_params(const AttentionPattern& pattern, const Params& given) {
  const std::vector<ParamSpec> specs = pattern.params();
  for (const auto& [key, value] : given) {
    bool known = false;
    for (const ParamSpec& s : specs) known = known || s.name == key;
    if (!known) {
      std::vector<std::string> names;
      for (const ParamSpec& s : specs) names.push_back(s.name);
      throw Error(fmt::format("pattern {}: unknown parameter '{}'; its parameters: {}", pattern.name(), key,
                              names.empty() ? std::string("(none)") : fmt::format("{}", fmt::join(names, ", "))));
    }
  }
  Params resolved;
  for (const ParamSpec& s : specs) {
    auto it = given.find(s.name);
    const int64_t v = it == given.end() ? s.default_value : it->second;
    if (v < s.min_value || v > s.max_value) {
      throw Error(fmt::format("pattern {}: parameter {} must be in [{}, {}], got {}", pattern.name(), s.name,
                              s.min_value, s.max_value, v));
    }
    resolved[s.name] = v;
  }
  return resolved;
}

void parse_param_assignment(const std::string& text, Params& params) {
  const auto eq = text.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == text.size()) {
    throw Error(fmt::format("--set expects NAME=INTEGER, got '{}'", text));
  }
  const std::string key = text.substr(0, eq);
  const std::string value = text.substr(eq + 1);
  const auto v = parse_int64(value);
  if (!v) throw Error(fmt::format("--set {}: expected an integer, got '{}'", key, value));
  params[key] = *v;
}

Graph build_pattern(const std::string& name, int64_t n, bool causal, const Params& given) {
  const AttentionPattern& pattern = find_pattern(name);
  if (n < 1) throw Error(fmt::format("pattern {}: n must be >= 1, got {}", name, n));
  if (n > (int64_t{1} << 30)) throw Error(fmt::format("pattern {}: n must be <= 2^30, got {}", name, n));
  if (causal && !pattern.supports_causal()) {
    throw Error(fmt::format("pattern {} has no causal form; drop --causal or pick another pattern", name));
  }
  g_graph_builds.fetch_add(1, std::memory_order_relaxed);
  return pattern.build(n, causal, resolve_params(pattern, given));
}

std::shared_ptr<const Graph> shared_pattern_graph(const std::string& name, int64_t n, bool causal,
                                                  const Params& given) {
  struct Entry {
    std::string key;
    std::shared_ptr<const Graph> graph;
    int64_t bytes = 0;
  };
  static std::mutex mutex;
  static std::list<Entry> store;  // most recently used first
  static int64_t held = 0;
  const Params resolved = resolve_params(find_pattern(name), given);
  std::string key = fmt::format("{}|{}|{}|", name, n, causal ? 1 : 0);
  for (const auto& [k, v] : resolved) key += fmt::format("{}={};", k, v);
  std::lock_guard<std::mutex> lock(mutex);
  for (auto it = store.begin(); it != store.end(); ++it) {
    if (it->key != key) continue;
    store.splice(store.begin(), store, it);
    return store.front().graph;
  }
  auto graph = std::make_shared<const Graph>(build_pattern(name, n, causal, resolved));
  store.push_front({key, graph, graph->bytes()});
  held += store.front().bytes;
  while (held > kGraphStoreBytes && store.size() > 1) {  // the newest stays even when alone over the budget
    held -= store.back().bytes;
    store.pop_back();
  }
  return graph;
}

int64_t pattern_graph_builds() { return g_graph_builds.load(std::memory_order_relaxed); }

}  // namespace sb
