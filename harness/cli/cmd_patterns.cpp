// `sparsebench patterns` (the pattern table) and `sparsebench pattern NAME` (statistics and JSON export).
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/limits.h"
#include "harness/cli/cli.h"
#include "harness/scenario/scenario.h"
#include "patterns/pattern.h"
#include "patterns/reach.h"

namespace sb {

namespace {

std::string param_summary(const AttentionPattern& p) {
  std::vector<std::string> parts;
  for (const ParamSpec& s : p.params()) {
    parts.push_back(fmt::format("{}={} [{}, {}]", s.name, s.default_value, s.min_value, s.max_value));
  }
  return parts.empty() ? "-" : fmt::format("{}", fmt::join(parts, " "));
}

// Before a long build: the graph's size extrapolated from two small builds (edges ~ n^a), printed so a long
// job says what it is about to take, and refused (naming --n) when it cannot fit in memory.
void announce_large_build(const std::string& name, int64_t n, bool causal, const Params& params) {
  constexpr int64_t kLarge = int64_t{1} << 20;
  if (n < kLarge) return;
  const int64_t n1 = 1024, n2 = 2048;
  const GraphStats s1 = build_pattern(name, n1, causal, params).stats(0);
  const GraphStats s2 = build_pattern(name, n2, causal, params).stats(0);
  const double a = std::log(static_cast<double>(s2.n_edges) / std::max<int64_t>(1, s1.n_edges)) / std::log(2.0);
  const double scale = static_cast<double>(n) / n2;
  const double edges = static_cast<double>(s2.n_edges) * std::pow(scale, a);
  const double bytes = static_cast<double>(s2.bytes) * std::pow(scale, a);
  const double gib = bytes / double(int64_t{1} << 30);
  const int64_t have = physical_memory_bytes();
  if (have > 0 && bytes > static_cast<double>(have)) {
    throw Error(fmt::format("--n {}: the {} graph would hold about {:.3g} edges ({:.1f} GiB), more than this machine's "
                            "{:.1f} GiB of memory",
                            n, name, edges, gib, static_cast<double>(have) / double(int64_t{1} << 30)));
  }
  fmt::print("pattern: building {} at n={}: about {:.3g} edges, {:.1f} GiB (extrapolated from n={} and {}); this "
             "may take a while\n",
             name, n, edges, gib, n1, n2);
  std::fflush(stdout);
}

// The reach of an L-layer model over g, per source distance, consecutive distances with the same figures on one
// line; returns it as JSON for --export.
nlohmann::json print_reach(const Graph& g, int64_t layers, int64_t queries) {
  const ReachSummary s = reach_summary(g, layers, queries);
  fmt::print("reach with {} layers ({} query positions; a source at distance d reaches a query in h hops = h layers):\n"
             "  every sampled query reaches its source up to distance {}\n",
             layers, s.queries.size(), s.full_reach());
  fmt::print("  {:>15}  {:>9}  {:>9}  {}\n", "distance", "reachable", "queries", "hops min..max");
  nlohmann::json rows = nlohmann::json::array();
  auto hop = [](int32_t h) { return h < 0 ? std::string("unreachable") : std::to_string(h); };
  for (size_t i = 0; i < s.rows.size();) {
    const ReachRow& r = s.rows[i];
    size_t j = i + 1;
    while (j < s.rows.size() && s.rows[j].fraction() == r.fraction() && s.rows[j].min_hops == r.min_hops &&
           s.rows[j].max_hops == r.max_hops) {
      ++j;
    }
    const int64_t hi = s.rows[j - 1].distance;
    fmt::print("  {:>15}  {:>8.1f}%  {:>9}  {}..{}\n",
               hi == r.distance ? std::to_string(r.distance) : fmt::format("{}-{}", r.distance, hi),
               100.0 * r.fraction(), r.queries, hop(r.min_hops), hop(r.max_hops));
    rows.push_back({{"lo", r.distance}, {"hi", hi}, {"fraction_reachable", r.fraction()},
                    {"min_hops", r.min_hops}, {"max_hops", r.max_hops}});
    i = j;
  }
  return {{"layers", layers}, {"query_positions", static_cast<int64_t>(s.queries.size())},
          {"full_reach", s.full_reach()}, {"distances", rows}};
}

}  // namespace

void print_stats(const std::string& name, const Params& params, const GraphStats& s, bool causal) {
  std::vector<std::string> ps;
  for (const auto& [k, v] : params) ps.push_back(fmt::format("{}={}", k, v));
  fmt::print("{:<13} {:<22} {:>6} n={:<8} nodes={:<8} edges={:<11} token in-degree min/mean/max={}/{:.1f}/{} "
             "node in-degree max={} bytes={} ({:.1f} B/edge) max_hops={}\n",
             name, ps.empty() ? "-" : fmt::format("{}", fmt::join(ps, ",")), causal ? "causal" : "bidir",
             s.n_tokens, s.n_nodes, s.n_edges, s.token_in_degree_min, s.token_in_degree_mean,
             s.token_in_degree_max, s.node_in_degree_max, s.bytes, static_cast<double>(s.bytes) / std::max<int64_t>(1, s.n_edges),
             s.max_hops < 0 ? std::string("n/a") : std::to_string(s.max_hops));
}

int cmd_patterns(const std::vector<std::string>& argv) {
  Args args(argv, {"help", "stats"});
  args.check_known({"n"});
  if (args.flag("help")) {
    fmt::print("usage: sparsebench patterns [--stats] [--n N]\n"
               "  Lists every registered pattern; --stats also builds each at n (default 4096),\n"
               "  bidirectional and causal where supported, and prints its graph statistics.\n");
    return 0;
  }
  fmt::print("{:<13} {:<7} {:<40} {}\n", "pattern", "causal", "parameters (default [min, max])", "description");
  for (const auto& p : all_patterns()) {
    fmt::print("{:<13} {:<7} {:<40} {}\n", p->name(), p->supports_causal() ? "yes" : "no", param_summary(*p),
               p->description());
  }
  if (!args.flag("stats")) return 0;
  const int64_t n = args.integer("n", 4096);
  fmt::print("\nstatistics at n={} (default parameters; max_hops computed up to n=2048):\n", n);
  for (const auto& p : all_patterns()) {
    for (bool causal : {false, true}) {
      if (causal && !p->supports_causal()) continue;
      const Params params = resolve_params(*p, {});
      const Graph g = build_pattern(p->name(), n, causal, params);
      print_stats(p->name(), params, g.stats(), causal);
    }
  }
  return 0;
}

int cmd_pattern(const std::vector<std::string>& argv) {
  Args args(argv, {"help", "causal", "stats", "validate", "reach"});
  args.check_known({"n", "set", "export", "max-hops-n", "layers", "queries"});
  if (args.flag("help") || args.positional().size() != 1) {
    fmt::print("usage: sparsebench pattern NAME --n N [--set k=4 ...] [--causal] [--stats] [--validate]\n"
               "                           [--export FILE.json] [--max-hops-n 2048]\n"
               "                           [--reach --layers L [--queries 256]]\n"
               "  Builds NAME's graph for n tokens, prints its statistics (in-degree, edges, bytes,\n"
               "  max hops between tokens) and optionally writes the JSON export (nodes and labelled edges).\n"
               "  --reach: per source distance, the share of query positions an L-layer model can reach\n"
               "  (fewest hops through the graph, extra nodes included, <= L), over --queries sampled positions.\n");
    return args.flag("help") ? 0 : 2;
  }
  const std::string name = args.positional()[0];
  if (!args.has("n")) throw Error("pattern: --n N is required");
  const int64_t n = args.integer("n", 0);
  Params given;
  for (const std::string& s : args.all("set")) parse_param_assignment(s, given);
  const bool causal = args.flag("causal");
  const Params params = resolve_params(find_pattern(name), given);
  if (n < 1 || n > (int64_t{1} << 30)) throw Error(fmt::format("--n: expected an integer in [1, {}], got {}", int64_t{1} << 30, n));
  if (causal && !find_pattern(name).supports_causal()) {
    throw Error(fmt::format("pattern {} has no causal form; drop --causal or pick another pattern", name));
  }
  announce_large_build(name, n, causal, params);
  const Graph g = build_pattern(name, n, causal, params);
  if (args.flag("validate")) g.validate();
  print_stats(name, params, g.stats(args.integer("max-hops-n", 2048)), causal);
  // Relation vocabulary (what the relative-position embedding indexes), with how many edges use each.
  std::vector<int64_t> per_relation(static_cast<size_t>(g.n_relations()), 0);
  for (uint16_t r : g.rel) per_relation[r]++;
  std::vector<std::string> used;
  for (int64_t r = 0; r < g.n_relations(); ++r) {
    if (per_relation[r] > 0) used.push_back(fmt::format("{}={}", g.relations[r], per_relation[r]));
  }
  fmt::print("relations: {} ids, {} used: {}\n", g.n_relations(), used.size(),
             used.size() <= 24 ? fmt::format("{}", fmt::join(used, " "))
                               : fmt::format("{} ...", fmt::join(used.begin(), used.begin() + 24, " ")));
  if (args.has("layers") && !args.flag("reach")) throw Error("--layers applies only with --reach");
  nlohmann::json reach;
  if (args.flag("reach")) {
    if (!args.has("layers")) throw Error("--reach: --layers L is required");
    const int64_t layers = args.integer("layers", 0), queries = args.integer("queries", 256);
    if (layers < 1 || layers > 1024) throw Error(fmt::format("--layers: expected an integer in [1, 1024], got {}", layers));
    if (queries < 1) throw Error(fmt::format("--queries: expected an integer >= 1, got {}", queries));
    reach = print_reach(g, layers, queries);
  }
  if (auto path = args.maybe("export")) {
    // Written in place (the path may be a device or pipe), every step checked and its reason reported.
    nlohmann::json doc = graph_export_json(name, params, g);
    if (!reach.is_null()) doc["reach"] = reach;
    const std::string text = doc.dump() + "\n";
    std::FILE* out = std::fopen(path->c_str(), "wb");
    if (!out) throw Error(fmt::format("--export {}: cannot open for writing: {}", *path, std::strerror(errno)));
    const bool wrote = std::fwrite(text.data(), 1, text.size(), out) == text.size() && std::fflush(out) == 0;
    const int err = errno;
    if (std::fclose(out) != 0 || !wrote) {
      throw Error(fmt::format("--export {}: write failed: {}", *path, std::strerror(wrote ? errno : err)));
    }
    fmt::print("wrote {}\n", *path);
  }
  return 0;
}

}  // namespace sb
