// Axis expansion of a validated scenario: parameter products, equal-degree solving, analytic memory, skips.
#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "harness/scenario/scenario.h"
#include "common/error.h"

namespace sb {

namespace {

// Values of an axis given as a scalar or a list.
std::vector<json> as_list(const json& v) {
  if (v.is_array()) return std::vector<json>(v.begin(), v.end());
  return {v};
}

double mean_degree(const std::string& pattern, int64_t n, bool causal, const Params& p) {
  // Through the store: the solution's graph is the point's, built once.
  return shared_pattern_graph(pattern, n, causal, p)->stats(0).token_in_degree_mean;
}

std::string params_text(const Params& p) {
  std::vector<std::string> parts;
  for (const auto& [k, v] : p) parts.push_back(fmt::format("{}={}", k, v));
  return fmt::format("{}", fmt::join(parts, ","));
}

std::string mib(int64_t bytes) { return fmt::format("{:.1f} MiB", static_cast<double>(bytes) / (1024.0 * 1024.0)); }

// Between a and b (either order), where the degree is monotone and the target lies between f(a) and f(b) or before
// f(a): the value around the crossing that comes closest (a binary search for the first value from a that reaches
// the target; ties go to it).
template <typename Eval>
std::pair<int64_t, double> closest_on_monotone(Eval& eval, int64_t a, int64_t b, double f_a, double f_b, double target) {
  const bool increasing = f_b >= f_a;
  auto reaches = [&](double f) { return increasing ? f >= target : f <= target; };
  if (reaches(f_a)) return {a, f_a};
  while (std::abs(b - a) > 1) {
    const int64_t m = a + (b - a) / 2;
    const double f = eval(m);
    if (reaches(f)) {
      b = m;
      f_b = f;
    } else {
      a = m;
      f_a = f;
    }
  }
  return std::abs(f_a - target) < std::abs(f_b - target) ? std::make_pair(a, f_a) : std::make_pair(b, f_b);
}

}  // namespace

DegreeSolution solve_degree(const std::string& pattern, int64_t n, bool causal, Params fixed,
                            const std::string& param, double target) {
  const AttentionPattern& pat = find_pattern(pattern);
  const ParamSpec* spec = nullptr;
  std::vector<ParamSpec> specs = pat.params();
  for (const ParamSpec& s : specs) {
    if (s.name == param) spec = &s;
  }
  if (!spec) throw Error(fmt::format("pattern {}: no parameter '{}' to solve", pattern, param));
  // Beyond n every parameter here saturates (a window or fan-out wider than the sequence).
  const int64_t lo = spec->min_value;
  const int64_t hi = std::max(lo, std::min(spec->max_value, std::max<int64_t>(n, lo + 1)));
  DegreeSolution best;
  auto eval = [&](int64_t v) {
    fixed[param] = v;
    ++best.builds;
    return mean_degree(pattern, n, causal, fixed);
  };
  auto answer = [&](std::pair<int64_t, double> va) {
    best.value = va.first;
    best.achieved = va.second;
    return best;
  };
  const double f_lo = eval(lo);
  const double f_hi = hi > lo ? eval(hi) : f_lo;
  // A target below both ends may lie in a valley: strided's degree is about l + n/2l, highest at both ends. Probes at
  // lo + 2^j find the valley; a ternary search finds its floor; each side of the floor is monotone.
  if (target < std::min(f_lo, f_hi) && hi - lo >= 2) {
    std::vector<std::pair<int64_t, double>> probes = {{lo, f_lo}};
    for (int64_t step = 1; lo + step < hi; step *= 2) probes.emplace_back(lo + step, eval(lo + step));
    probes.emplace_back(hi, f_hi);
    size_t m = 0;
    for (size_t i = 1; i < probes.size(); ++i) {
      if (probes[i].second < probes[m].second) m = i;
    }
    if (m != 0 && m + 1 != probes.size()) {
      int64_t a = probes[m - 1].first, b = probes[m + 1].first;
      while (b - a > 8) {
        const int64_t x = a + (b - a) / 3, y = b - (b - a) / 3;
        if (eval(x) <= eval(y)) {
          b = y;
        } else {
          a = x;
        }
      }
      std::pair<int64_t, double> floor{a, eval(a)};
      for (int64_t v = a + 1; v <= b; ++v) {
        const double f = eval(v);
        if (f < floor.second) floor = {v, f};
      }
      if (floor.second >= target) return answer(floor);
      // Both sides reach the target: the closer crossing, the larger value on a tie.
      const auto left = closest_on_monotone(eval, floor.first, lo, floor.second, f_lo, target);
      const auto right = closest_on_monotone(eval, floor.first, hi, floor.second, f_hi, target);
      return answer(std::abs(left.second - target) < std::abs(right.second - target) ? left : right);
    }
  }
  const bool increasing = f_hi >= f_lo;
  const bool reaches_hi = increasing ? f_hi >= target : f_hi <= target;
  if (!reaches_hi) {  // out of range: the closer end
    return answer(std::abs(f_lo - target) < std::abs(f_hi - target) ? std::make_pair(lo, f_lo) : std::make_pair(hi, f_hi));
  }
  return answer(closest_on_monotone(eval, lo, hi, f_lo, f_hi, target));
}

GraphStats dense_op_stats(int64_t n, bool causal) {
  GraphStats s;
  s.n_tokens = n;
  s.n_nodes = n;
  s.n_edges = causal ? n * (n + 1) / 2 : n * n;
  s.token_in_degree_min = causal ? 1 : n;
  s.token_in_degree_max = n;
  s.node_in_degree_max = n;
  s.token_in_degree_mean = causal ? (n + 1) / 2.0 : static_cast<double>(n);
  s.bytes = 0;  // the dense op holds no graph
  s.max_hops = 1;
  return s;
}

int64_t analytic_memory_bytes(const Scenario& s, const Point& p) {
  const double b = static_cast<double>(p.batch());
  const double nodes = static_cast<double>(p.stats.n_nodes);
  const double t = static_cast<double>(p.length());
  // Floats one head keeps besides the node vectors: the materialised dense op stores scores and probabilities for
  // all T x T pairs; the graph op and the fused dense kernels keep one log-sum-exp per node.
  const double edge = dense_materialises(p.attention()) ? 2.0 * t * t : nodes;
  const double graph = static_cast<double>(p.stats.bytes);
  const bool backward = p.mode != "forward";
  // Bytes of an activation in the point's dtype, and of what stays wider: softmax statistics, scores, logits,
  // parameters and optimizer state (float32 under bfloat16/float16). On the CPU the op stages half types through
  // float32 copies of its tensors.
  const double value = p.dtype() == "float64" ? 8.0 : p.dtype() == "float32" ? 4.0 : 2.0;
  const double wide = p.dtype() == "float64" ? 8.0 : 4.0;
  const double staged = s.device == "cpu" && value == 2.0 ? 4.0 : 0.0;
  double bytes = 0.0;
  if (s.kind == ScenarioKind::attention) {
    const double io = b * nodes * s.attention.heads * s.attention.head_dim;
    const double per_pass = 4.0 * io * (value + staged) + b * s.attention.heads * edge * wide;  // q, k, v, o; scores or lse
    bytes = backward ? 2.0 * per_pass : per_pass;
  } else {
    const ModelConfig& m = s.train.model;
    const double d = static_cast<double>(m.dim), f = static_cast<double>(m.ffn);
    const double params = m.layers * (4.0 * d * d + 2.0 * d * f + 9.0 * d) + 2.0 * 256.0 * d;
    const double layer =
        b * (nodes * ((8.0 * d + 2.0 * f) * value + 4.0 * d * staged) + m.heads * edge * wide);
    const double logits = b * t * 256.0 * wide;
    bytes = backward ? 4.0 * params * wide + m.layers * layer + 3.0 * logits : params * wide + layer + 2.0 * logits;
  }
  return static_cast<int64_t>(std::min(graph + bytes, 9.0e18));
}

std::string memory_budget_skip(const Scenario& s, const Point& p) {
  if (s.memory_budget_bytes <= 0 || p.analytic_bytes <= s.memory_budget_bytes) return "";
  return fmt::format("analytic memory {} exceeds the budget {}", mib(p.analytic_bytes), mib(s.memory_budget_bytes));
}

namespace {

uint64_t saturating_mul(uint64_t a, uint64_t b) {
  if (a != 0 && b > std::numeric_limits<uint64_t>::max() / a) return std::numeric_limits<uint64_t>::max();
  return a * b;
}

uint64_t axis_size(const json& v) { return v.is_array() ? v.size() : 1; }

}  // namespace

PointCount count_points(const Scenario& s) {
  const json& axes = s.doc["axes"];
  const bool train = s.kind == ScenarioKind::train;
  // Pattern variants: per entry, the product of its parameter lists and degree targets.
  uint64_t variants = 0;
  std::vector<std::pair<uint64_t, std::string>> entries;  // (variants, "/axes/patterns/i: w 10 x degree 3")
  const json& patterns = axes["patterns"];
  for (size_t ei = 0; ei < patterns.size(); ++ei) {
    const json& e = patterns[ei];
    uint64_t n = 1;
    std::vector<std::string> parts;
    for (const auto& [key, value] : e.items()) {
      const auto& extra = scenario_pattern_entry_keys();
      if (key != "degree" && std::find(extra.begin(), extra.end(), key) != extra.end()) continue;
      n = saturating_mul(n, axis_size(value));
      if (axis_size(value) > 1) parts.push_back(fmt::format("{} {}", key, axis_size(value)));
    }
    const uint64_t before = variants;
    variants += n;
    if (variants < before) variants = std::numeric_limits<uint64_t>::max();
    if (n > 1) entries.emplace_back(n, fmt::format("/axes/patterns/{}: {}", ei, fmt::join(parts, " x ")));
  }
  uint64_t total = variants;
  std::vector<std::string> factors;
  std::string pattern_text = fmt::format("pattern variants {}", variants);
  if (!entries.empty()) {
    // The largest entries say where the variants come from.
    std::stable_sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    std::vector<std::string> shown;
    for (size_t i = 0; i < entries.size() && i < 3; ++i) shown.push_back(entries[i].second);
    pattern_text += fmt::format(" ({}{})", fmt::join(shown, "; "), entries.size() > 3 ? "; ..." : "");
  }
  factors.push_back(pattern_text);
  const char* keys[] = {"lengths", "causal", "tokens", "batch", "threads", "modes", "dtypes", "seeds"};
  for (const char* k : keys) {
    if (!axes.contains(k) || (train && std::string(k) == "modes")) continue;
    const uint64_t n = axis_size(axes[k]);
    total = saturating_mul(total, n);
    if (n > 1) factors.push_back(fmt::format("{} {} (/axes/{})", k, n, k));
  }
  PointCount c;
  c.total = total;
  const bool saturated = total == std::numeric_limits<uint64_t>::max();
  c.detail = fmt::format("{}{} = {}", saturated ? "more than " : "", total, fmt::join(factors, " x "));
  return c;
}

void check_point_count(const Scenario& s) {
  const PointCount c = count_points(s);
  if (c.total <= static_cast<uint64_t>(s.max_points)) return;
  throw Error(fmt::format("{}: the axes make {} points ({}), more than /max_points {}; narrow the axes, split the "
                          "scenario, or raise /max_points (--set max_points=N)",
                          s.file, c.total == std::numeric_limits<uint64_t>::max() ? "more than 2^64" : std::to_string(c.total),
                          c.detail, s.max_points));
}

namespace {

// One pattern entry's axes: its parameter lists in the pattern's own order (the solved parameter left out), its
// degree targets and the parameter solved for them; `multi` when the entry makes several series.
struct EntryAxes {
  std::vector<std::pair<std::string, std::vector<int64_t>>> params;
  std::vector<std::optional<double>> degrees = {std::nullopt};
  std::string solve;
  bool multi = false;
};

EntryAxes entry_axes(const json& e, const AttentionPattern& pat) {
  EntryAxes ax;
  for (const ParamSpec& spec : pat.params()) {
    if (!e.contains(spec.name)) continue;
    std::vector<int64_t> values;
    for (const json& v : as_list(e[spec.name])) values.push_back(v.get<int64_t>());
    ax.multi = ax.multi || values.size() > 1;
    ax.params.emplace_back(spec.name, values);
  }
  if (!e.contains("degree")) return ax;
  ax.degrees.clear();
  for (const json& v : as_list(e["degree"])) ax.degrees.push_back(v.get<double>());
  ax.multi = ax.multi || ax.degrees.size() > 1;
  if (e.contains("solve")) {
    ax.solve = e["solve"].get<std::string>();
    return ax;
  }
  for (const ParamSpec& spec : pat.params()) {
    if (!e.contains(spec.name)) {
      ax.solve = spec.name;
      break;
    }
  }
  return ax;
}

// What the points of one (entry, parameters, degree, length, causality) share: the config with its axis values,
// the solved parameter, the skip reason, the graph's statistics and the label. A parameter or degree the pattern
// refuses goes to `error`.
Point base_point(const Scenario& s, const json& e, const AttentionPattern& pat, const EntryAxes& ax,
                 const Params& given, const std::optional<double>& target, int64_t n, bool causal, bool build_graphs,
                 std::string& error) {
  const std::string name = e["name"].get<std::string>();
  const std::string attention = e.value("attention", std::string("graph"));
  const int64_t max_length = e.value("max_length", int64_t{0});
  const std::string& solve = ax.solve;
  const bool multi = ax.multi;
  const bool train = s.kind == ScenarioKind::train;
  Point base;
  base.config = s.train;  // the scenario's model and training settings; the axis values go in below
  base.config.model.pattern = name;
  base.config.model.attention = attention;
  base.config.model.context = n;
  base.config.model.causal = causal;
  if (!train) base.config.seed = s.seed;  // timing kinds: the inputs' seed (/seed)
  base.degree_target = target;
  base.solved_param = target ? solve : "";
  if (max_length > 0 && n > max_length) {
    base.skip_reason = fmt::format("length {} > max_length {} of this pattern entry", n, max_length);
  } else if (causal && !pat.supports_causal()) {
    base.skip_reason = fmt::format("pattern {} does not support causal attention", name);
  }
  Params resolved;
  try {
    Params with = given;
    if (target && base.skip_reason.empty()) {
      const DegreeSolution sol = solve_degree(name, n, causal, given, solve, *target);
      with[solve] = sol.value;
    } else if (target) {
      for (const ParamSpec& spec : pat.params()) {
        if (spec.name == solve) with[solve] = spec.default_value;
      }
    }
    resolved = resolve_params(pat, with);
    if (base.skip_reason.empty()) {
      if (is_dense_attention(attention)) {
        base.stats = dense_op_stats(n, causal);
      } else if (build_graphs) {
        const std::shared_ptr<const Graph> g = shared_pattern_graph(name, n, causal, resolved);
        base.stats = g->stats(256);
        base.fingerprint = g->fingerprint();
      }
    }
  } catch (const Error& err) {
    error = err.what();
  }
  base.config.model.pattern_params = resolved;
  std::string label = e.contains("label") ? e["label"].get<std::string>() : name;
  if (!e.contains("label") || multi) {
    // Only what the entry sets (or solves) names the series; defaults stay out of the label.
    Params shown = given;
    if (target && resolved.count(solve)) shown[solve] = resolved.at(solve);
    if (!shown.empty()) label += "(" + params_text(shown) + ")";
  }
  if (!e.contains("label")) {
    if (attention == "dense") label += " [dense op]";
    if (attention == "dense_naive") label += " [dense naive]";
  }
  base.label = label;
  return base;
}

}  // namespace

std::vector<Point> expand_scenario(const Scenario& s, bool build_graphs) {
  check_point_count(s);  // from the axis sizes, before anything is built
  const json& axes = s.doc["axes"];
  const bool train = s.kind == ScenarioKind::train;
  const std::vector<json> lengths = as_list(axes["lengths"]);
  const std::vector<json> causals = axes.contains("causal") ? as_list(axes["causal"]) : std::vector<json>{json(train)};
  const std::vector<json> threads = axes.contains("threads") ? as_list(axes["threads"]) : std::vector<json>{json(0)};
  // Precisions: /axes/dtypes, else the trainer's /train/dtype (float32 for the timing kinds).
  const std::vector<json> dtypes = axes.contains("dtypes") ? as_list(axes["dtypes"])
                                                           : std::vector<json>{json(train ? s.train.dtype : "float32")};
  const std::vector<json> modes =
      train ? std::vector<json>{json("train")}
            : axes.contains("modes") ? as_list(axes["modes"]) : std::vector<json>{json("forward")};
  // Batch sizing: tokens per batch (batch = max(1, tokens / length)) or a fixed batch.
  std::vector<std::pair<int64_t, int64_t>> sizes;  // (tokens, batch); tokens 0 = batch given
  if (axes.contains("tokens")) {
    for (const json& v : as_list(axes["tokens"])) sizes.emplace_back(v.get<int64_t>(), 0);
  } else if (axes.contains("batch")) {
    for (const json& v : as_list(axes["batch"])) sizes.emplace_back(0, v.get<int64_t>());
  } else if (train) {
    sizes.emplace_back(0, s.train.batch);  // /train/batch or its scenario default
  } else {
    sizes.emplace_back(0, 1);
  }

  std::vector<Point> points;
  points.reserve(static_cast<size_t>(std::min<uint64_t>(count_points(s).total, kDefaultMaxPoints)));
  // Point ids, hashed: two entries that make the very same point are refused naming both; two that make different
  // points under one id (a degree solved for different parameters) get "#2", "#3"... as before.
  std::unordered_set<std::string> ids;
  std::unordered_map<std::string, int> next_suffix;
  std::unordered_map<std::string, size_t> entry_of_config;  // id + resolved parameters -> the entry that made it
  const json& entries = axes["patterns"];
  for (size_t ei = 0; ei < entries.size(); ++ei) {
    const json& e = entries[ei];
    const std::string name = e["name"].get<std::string>();
    const AttentionPattern& pat = find_pattern(name);
    const std::string attention = e.value("attention", std::string("graph"));
    const EntryAxes ax = entry_axes(e, pat);
    const auto& param_axes = ax.params;
    // Cartesian product of the parameter axes (odometer).
    std::vector<size_t> at(param_axes.size(), 0);
    while (true) {
      Params given;
      for (size_t i = 0; i < param_axes.size(); ++i) given[param_axes[i].first] = param_axes[i].second[at[i]];
      for (const auto& target : ax.degrees) {
        for (const json& lv : lengths) {
          const int64_t n = lv.get<int64_t>();
          for (const json& cv : causals) {
            const bool causal = cv.get<bool>();
            std::string error;
            const Point base = base_point(s, e, pat, ax, given, target, n, causal, build_graphs, error);
            for (const auto& [tokens, batch] : sizes) {
              for (const json& tv : threads) {
                for (const json& mv : modes) {
                 for (const json& dv : dtypes) {
                  Point p = base;
                  p.config.dtype = dv.get<std::string>();
                  if (dtypes.size() > 1) p.label += " [" + p.dtype() + "]";
                  p.tokens = tokens;
                  p.config.batch = tokens > 0 ? std::max<int64_t>(1, tokens / n) : batch;
                  p.config.threads = tv.get<int64_t>();
                  p.mode = mv.get<std::string>();
                  std::string id = fmt::format("{}/{}", name, attention);
                  if (!given.empty()) id += "/" + params_text(given);
                  if (target) id += fmt::format("/degree={}", *target);
                  id += fmt::format("/n={}/{}={}/causal={}/threads={}/mode={}", n, tokens > 0 ? "tokens" : "batch",
                                    tokens > 0 ? tokens : batch, causal ? 1 : 0, p.threads(), p.mode);
                  if (axes.contains("dtypes")) id += "/dtype=" + p.dtype();  // ids of runs without the axis unchanged
                  const auto [made_by, fresh] = entry_of_config.emplace(id + "|" + params_text(p.params()), ei);
                  if (!fresh) {
                    throw Error(fmt::format("{}: /axes/patterns/{} and /axes/patterns/{} make the same point {}; "
                                            "give each configuration once (a label or max_length does not make "
                                            "another point)",
                                            s.file, made_by->second, ei, id));
                  }
                  std::string unique = id;
                  if (!ids.insert(unique).second) {
                    int& k = next_suffix[id];
                    if (k == 0) k = 2;
                    do unique = fmt::format("{}#{}", id, k++);
                    while (!ids.insert(unique).second);
                  }
                  p.id = unique;
                  std::string point_error = error;
                  if (point_error.empty() && p.skip_reason.empty() && s.kind != ScenarioKind::attention) {
                    // A configuration the model or trainer would refuse fails here, before anything runs.
                    try {
                      if (train) validate_train_config(p.config);
                      else validate_model_config(p.config.model);
                    } catch (const Error& err) {
                      point_error = err.what();
                    }
                  }
                  if (!point_error.empty()) {
                    p.skip_reason = "error: " + point_error;
                  } else if (p.skip_reason.empty() && (build_graphs || is_dense_attention(attention))) {
                    p.analytic_bytes = analytic_memory_bytes(s, p);
                    p.skip_reason = memory_budget_skip(s, p);
                  }
                  p.index = static_cast<int64_t>(points.size());
                  points.push_back(std::move(p));
                 }
                }
              }
            }
          }
        }
      }
      size_t i = 0;
      for (; i < at.size(); ++i) {
        if (++at[i] < param_axes[i].second.size()) break;
        at[i] = 0;
      }
      if (i == at.size()) break;
    }
  }
  for (Point& p : points) {
    p.config_id = p.id;
  }
  if (!axes.contains("seeds")) return points;
  // Seeds outermost: a partly finished sweep holds whole seeds of every configuration, ready for paired comparison.
  std::vector<Point> seeded;
  for (const json& sv : as_list(axes["seeds"])) {
    for (const Point& base : points) {
      Point p = base;
      p.config.seed = sv.get<int64_t>();
      p.id = fmt::format("{}/seed={}", base.id, p.seed());
      p.index = static_cast<int64_t>(seeded.size());
      seeded.push_back(std::move(p));
    }
  }
  return seeded;
}

json point_to_json(const Scenario& s, const Point& p) {
  json r;
  r["point"] = p.id;
  r["config_id"] = p.config_id;
  r["seed"] = p.seed();
  r["index"] = p.index;
  r["scenario"] = s.name;
  r["kind"] = kind_name(s.kind);
  r["pattern"] = p.pattern();
  r["label"] = p.label;
  r["attention"] = p.attention();
  r["params"] = p.params();
  r["degree_target"] = p.degree_target ? json(*p.degree_target) : json(nullptr);
  r["solved_param"] = p.solved_param.empty() ? json(nullptr) : json(p.solved_param);
  r["length"] = p.length();
  r["tokens"] = p.tokens;
  r["batch"] = p.batch();
  r["causal"] = p.causal();
  r["threads"] = p.threads();
  r["mode"] = p.mode;
  r["dtype"] = p.dtype();
  r["device"] = s.device;
  if (s.kind == ScenarioKind::attention) {
    r["heads"] = s.attention.heads;
    r["head_dim"] = s.attention.head_dim;
    r["relations"] = s.attention.relations;
  } else {
    const json model = model_config_json(p.config.model);
    for (const FieldSpec& f : config_fields()) {
      if (f.model && f.in_scenario) r[f.key] = model[f.key];
    }
  }
  r["degree"] = p.stats.token_in_degree_mean;
  r["graph"] = graph_stats_json(p.stats);
  r["graph"]["fingerprint"] = p.fingerprint;
  r["analytic_bytes"] = p.analytic_bytes;
  return r;
}

json point_handoff_json(const Point& p) {
  return {{"index", p.index},        {"id", p.id},       {"config_id", p.config_id},
          {"label", p.label},        {"mode", p.mode},   {"tokens", p.tokens},
          {"config", train_config_json(p.config)}, {"settings", train_settings_json(p.config)}};
}

Point point_from_handoff(const json& h, const std::string& file) {
  const auto field = [&](const char* key, json::value_t type) -> const json& {
    if (!h.is_object() || !h.contains(key) || h[key].type() != type) {
      throw Error(fmt::format("{}: /{}: missing or of the wrong type", file, key));
    }
    return h[key];
  };
  Point p;
  p.index = field("index", json::value_t::number_unsigned).get<int64_t>();
  p.id = field("id", json::value_t::string).get<std::string>();
  p.config_id = field("config_id", json::value_t::string).get<std::string>();
  p.label = field("label", json::value_t::string).get<std::string>();
  p.mode = field("mode", json::value_t::string).get<std::string>();
  p.tokens = field("tokens", json::value_t::number_unsigned).get<int64_t>();
  p.config = train_config_from_json(field("config", json::value_t::object), field("settings", json::value_t::object),
                                    file, /*check_ranges=*/false);
  return p;
}

json graph_export_json(const std::string& name, const Params& params, const Graph& g) {
  json nodes = json::array();
  for (int64_t id = 0; id < g.n_nodes(); ++id) {
    const NodeInfo& nd = g.nodes[id];
    nodes.push_back({{"id", id}, {"kind", node_kind_name(nd.kind)}, {"level", nd.level}, {"first", nd.first},
                     {"last", nd.last}});
  }
  json edges = json::array();
  for (int64_t u = 0; u < g.n_nodes(); ++u) {
    for (int64_t e = g.row_ptr[u]; e < g.row_ptr[u + 1]; ++e) {
      edges.push_back(json::array({g.col[e], u, g.relations[g.rel[e]]}));
    }
  }
  return {{"pattern", name}, {"params", params}, {"n", g.n_tokens}, {"causal", g.causal},
          {"nodes", std::move(nodes)}, {"edges", std::move(edges)}};
}

}  // namespace sb
