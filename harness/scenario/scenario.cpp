// Scenario loading, --set overrides and validation: every problem is reported as "FILE: /pointer: message".
#include "harness/scenario/scenario.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include <fmt/format.h>

#include "common/error.h"
#include "common/json_guard.h"
#include "common/limits.h"

namespace sb {

const std::vector<std::string>& scenario_top_keys() {
  static const std::vector<std::string> k = {"name",   "description",      "kind", "device",    "repeats", "warmup",
                                             "seed",   "memory_budget_mb", "axes", "attention", "model",   "train"};
  return k;
}
const std::vector<std::string>& scenario_axes_keys() {
  static const std::vector<std::string> k = {"patterns", "lengths", "tokens", "batch", "causal", "threads", "modes"};
  return k;
}
const std::vector<std::string>& scenario_attention_keys() {
  static const std::vector<std::string> k = {"heads", "head_dim", "relations"};
  return k;
}
const std::vector<std::string>& scenario_model_keys() {
  static const std::vector<std::string> k = {"layers", "dim", "ffn", "heads", "dropout", "post_norm", "positions"};
  return k;
}
const std::vector<std::string>& scenario_train_keys() {
  static const std::vector<std::string> k = {"steps", "minutes", "eval_every", "eval_bytes", "batch", "lr", "warmup", "data"};
  return k;
}
const std::vector<std::string>& scenario_pattern_entry_keys() {
  static const std::vector<std::string> k = {"name", "label", "attention", "degree", "solve", "max_length"};
  return k;
}

namespace {

constexpr int64_t kUnbounded = int64_t{1} << 30;
constexpr double kMaxDegree = static_cast<double>(kMaxLength);  // a token attends to at most a sequence

std::string child(const std::string& ptr, const std::string& key) { return ptr + "/" + json_pointer_token(key); }
std::string child(const std::string& ptr, size_t i) { return ptr + "/" + std::to_string(i); }

// Never dumps the whole value: a deep or huge one is cut while printing.
std::string shown(const json& v) { return json_excerpt(v, 60); }

std::string join_names(const std::vector<std::string>& names) { return fmt::format("{}", fmt::join(names, ", ")); }

// Validation context: the file name and a thrower in the house style.
struct Checker {
  std::string file;

  [[noreturn]] void fail(const std::string& ptr, const std::string& msg) const {
    throw Error(fmt::format("{}: {}: {}", file, ptr.empty() ? "/" : ptr, msg));
  }

  void object(const json& v, const std::string& ptr, const std::vector<std::string>& allowed) const {
    if (!v.is_object()) fail(ptr, fmt::format("expected an object, got {}", shown(v)));
    for (const auto& [key, _] : v.items()) {
      if (std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
        fail(child(ptr, key), fmt::format("unknown key; expected one of: {}", join_names(allowed)));
      }
    }
  }

  void required(const json& obj, const std::string& ptr, const std::string& key) const {
    if (!obj.contains(key)) fail(child(ptr, key), "required key is missing");
  }

  static bool is_int(const json& v) {
    if (v.is_number_unsigned()) return v.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
    return v.is_number_integer();
  }

  int64_t integer(const json& v, const std::string& ptr, int64_t lo, int64_t hi = kUnbounded) const {
    const bool ok = is_int(v) && v.get<int64_t>() >= lo && v.get<int64_t>() <= hi;
    if (!ok) {
      const std::string range = hi >= kUnbounded ? fmt::format(">= {}", lo) : fmt::format("in [{}, {}]", lo, hi);
      fail(ptr, fmt::format("expected an integer {}, got {}", range, shown(v)));
    }
    return v.get<int64_t>();
  }

  // A number > lo (exclusive) or >= lo (inclusive), and < hi when given.
  double number(const json& v, const std::string& ptr, double lo, bool lo_inclusive,
                double hi = std::numeric_limits<double>::infinity()) const {
    bool ok = v.is_number();
    if (ok) {
      const double x = v.get<double>();
      ok = std::isfinite(x) && (lo_inclusive ? x >= lo : x > lo) && x < hi;
    }
    if (!ok) {
      std::string range = fmt::format("{} {}", lo_inclusive ? ">=" : ">", lo);
      if (std::isfinite(hi)) range += fmt::format(" and < {}", hi);
      fail(ptr, fmt::format("expected a number {}, got {}", range, shown(v)));
    }
    return v.get<double>();
  }

  bool boolean(const json& v, const std::string& ptr) const {
    if (!v.is_boolean()) fail(ptr, fmt::format("expected true or false, got {}", shown(v)));
    return v.get<bool>();
  }

  std::string string(const json& v, const std::string& ptr, bool non_empty = true) const {
    if (!v.is_string() || (non_empty && v.get<std::string>().empty())) {
      fail(ptr, fmt::format("expected a {}string, got {}", non_empty ? "non-empty " : "", shown(v)));
    }
    return v.get<std::string>();
  }

  std::string choice(const json& v, const std::string& ptr, const std::vector<std::string>& options) const {
    if (!v.is_string() || std::find(options.begin(), options.end(), v.get<std::string>()) == options.end()) {
      std::vector<std::string> quoted;
      for (const auto& o : options) quoted.push_back("\"" + o + "\"");
      fail(ptr, fmt::format("expected one of {}, got {}", join_names(quoted), shown(v)));
    }
    return v.get<std::string>();
  }

  // A scalar or a non-empty array of scalars; `each` checks one element at its pointer.
  template <typename F>
  void scalar_or_list(const json& v, const std::string& ptr, F each) const {
    if (v.is_array()) {
      if (v.empty()) fail(ptr, "expected a non-empty array");
      for (size_t i = 0; i < v.size(); ++i) each(v[i], child(ptr, i));
    } else {
      each(v, ptr);
    }
  }
};

void validate_pattern_entry(const Checker& c, const json& e, const std::string& ptr, const std::string& kind) {
  if (!e.is_object()) c.fail(ptr, fmt::format("expected an object like {{\"name\": \"bpt\", \"k\": 4}}, got {}", shown(e)));
  c.required(e, ptr, "name");
  const std::string name = c.string(e["name"], child(ptr, "name"));
  const AttentionPattern* pattern = nullptr;
  for (const auto& p : all_patterns()) {
    if (p->name() == name) pattern = p.get();
  }
  if (!pattern) {
    c.fail(child(ptr, "name"), fmt::format("unknown pattern '{}'; valid patterns: {}", name, join_names(pattern_names())));
  }
  const std::vector<ParamSpec> specs = pattern->params();
  auto spec_of = [&](const std::string& key) -> const ParamSpec* {
    for (const ParamSpec& s : specs) {
      if (s.name == key) return &s;
    }
    return nullptr;
  };
  const auto& extra = scenario_pattern_entry_keys();
  for (const auto& [key, value] : e.items()) {
    const std::string kp = child(ptr, key);
    if (std::find(extra.begin(), extra.end(), key) != extra.end()) continue;
    const ParamSpec* s = spec_of(key);
    if (!s) {
      std::vector<std::string> names;
      for (const ParamSpec& p : specs) names.push_back(p.name);
      c.fail(kp, fmt::format("unknown parameter of pattern {}; its parameters: {}; other keys: {}", name,
                             names.empty() ? std::string("(none)") : join_names(names), join_names(extra)));
    }
    c.scalar_or_list(value, kp, [&](const json& v, const std::string& p) { c.integer(v, p, s->min_value, s->max_value); });
  }
  if (e.contains("label")) c.string(e["label"], child(ptr, "label"));
  if (e.contains("max_length")) c.integer(e["max_length"], child(ptr, "max_length"), 1);
  if (e.contains("attention")) {
    const std::string a = c.choice(e["attention"], child(ptr, "attention"), {"graph", "dense"});
    if (a == "dense" && name != "dense") {
      c.fail(child(ptr, "attention"), fmt::format("the dense op computes dense attention only; use it with "
                                                  "pattern \"dense\", not \"{}\"", name));
    }
  }
  if (e.contains("solve") && !e.contains("degree")) c.fail(child(ptr, "solve"), "needs \"degree\" beside it");
  if (e.contains("degree")) {
    c.scalar_or_list(e["degree"], child(ptr, "degree"),
                     [&](const json& v, const std::string& p) { c.number(v, p, 0.0, false, kMaxDegree); });
    std::string solve;
    if (e.contains("solve")) {
      solve = c.string(e["solve"], child(ptr, "solve"));
      if (!spec_of(solve)) {
        std::vector<std::string> names;
        for (const ParamSpec& p : specs) names.push_back(p.name);
        c.fail(child(ptr, "solve"), fmt::format("pattern {} has no parameter '{}'; its parameters: {}", name, solve,
                                                names.empty() ? std::string("(none)") : join_names(names)));
      }
      if (e.contains(solve)) {
        c.fail(child(ptr, solve), fmt::format("is solved from \"degree\"; do not give it as well"));
      }
    } else {
      for (const ParamSpec& s : specs) {
        if (!e.contains(s.name)) {
          solve = s.name;
          break;
        }
      }
      if (solve.empty()) {
        c.fail(child(ptr, "degree"), specs.empty()
                                         ? fmt::format("pattern {} has no parameter to solve for a degree", name)
                                         : fmt::format("every parameter of pattern {} is given; leave one out or "
                                                       "name it in \"solve\"", name));
      }
    }
  }
  (void)kind;
}

}  // namespace

json parse_scenario_text(const std::string& text, const std::string& file) {
  check_json_text(text, file);  // depth and duplicate keys, before anything recursive touches the document
  try {
    return json::parse(text);
  } catch (const json::parse_error& e) {
    const auto [line, col] = text_line_col(text, e.byte > 0 ? e.byte - 1 : 0);
    std::string msg = e.what();
    // Keep nlohmann's explanation, drop its "[json.exception...] parse error at line x, column y: " prefix.
    const auto colon = msg.find(": ");
    if (msg.rfind("[json.exception", 0) == 0 && colon != std::string::npos) msg = msg.substr(colon + 2);
    throw Error(fmt::format("{}:{}:{}: malformed JSON: {}", file, line, col, msg));
  } catch (const json::exception& e) {
    // e.g. a number too large for any JSON number type: locate the literal it quotes.
    std::string msg = e.what();
    const auto colon = msg.find("] ");
    if (colon != std::string::npos) msg = msg.substr(colon + 2);
    size_t at = std::string::npos;
    const auto q1 = msg.find('\'');
    const auto q2 = q1 == std::string::npos ? q1 : msg.find('\'', q1 + 1);
    if (q2 != std::string::npos && q2 > q1 + 1) at = text.find(msg.substr(q1 + 1, q2 - q1 - 1));
    if (at == std::string::npos) throw Error(fmt::format("{}: malformed JSON: {}", file, msg));
    const auto [line, col] = text_line_col(text, at);
    throw Error(fmt::format("{}:{}:{}: malformed JSON: {}", file, line, col, msg));
  }
}

json read_scenario_file(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw Error(fmt::format("{}: is a directory, not a scenario file", path));
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(fmt::format("{}: cannot open scenario file", path));
  std::stringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw Error(fmt::format("{}: read failed", path));
  return parse_scenario_text(ss.str(), path);
}

void apply_override(json& doc, const std::string& assignment) {
  const auto eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0) throw Error(fmt::format("--set expects PATH=VALUE, got '{}'", assignment));
  std::string path = assignment.substr(0, eq);
  const std::string text = assignment.substr(eq + 1);
  if (path[0] == '/') path = path.substr(1);
  std::vector<std::string> parts;
  std::stringstream ss(path);
  std::string part;
  while (std::getline(ss, part, '/')) {
    if (part.empty()) throw Error(fmt::format("--set {}: empty path component", path));
    parts.push_back(part);
  }
  if (parts.empty()) throw Error(fmt::format("--set expects PATH=VALUE, got '{}'", assignment));
  json value;
  check_json_text(text, fmt::format("--set {}", path));
  try {
    value = json::parse(text);
  } catch (const json::parse_error&) {
    value = text;  // bare words are strings: --set kind=model
  }
  if (!doc.is_object()) throw Error("--set: the scenario is not a JSON object");
  json* cur = &doc;
  std::string at;
  for (size_t i = 0; i < parts.size(); ++i) {
    const std::string& key = parts[i];
    const bool last = i + 1 == parts.size();
    if (cur->is_array()) {
      size_t used = 0;
      size_t idx = 0;
      try {
        idx = std::stoul(key, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used != key.size() || idx >= cur->size()) {
        throw Error(fmt::format("--set {}: {}{} has no element '{}'", path, at.empty() ? "/" : at, "", key));
      }
      cur = &(*cur)[idx];
    } else if (cur->is_object()) {
      if (last) {
        (*cur)[key] = value;
        return;
      }
      if (!cur->contains(key)) (*cur)[key] = json::object();
      cur = &(*cur)[key];
    } else {
      throw Error(fmt::format("--set {}: {} is not an object or array", path, at.empty() ? "/" : at));
    }
    at += "/" + key;
    if (last) *cur = value;
  }
}

void validate_scenario(const json& doc, const std::string& file) {
  const Checker c{file};
  c.object(doc, "", scenario_top_keys());
  c.required(doc, "", "kind");
  const std::string kind = c.choice(doc["kind"], "/kind", {"attention", "model", "train"});
  if (doc.contains("name")) {
    const std::string name = c.string(doc["name"], "/name");
    for (char ch : name) {
      if (!(std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '-' || ch == '.')) {
        c.fail("/name", fmt::format("expected letters, digits, '_', '-' or '.' (it names a directory), got {}",
                                    shown(doc["name"])));
      }
    }
    if (name == "." || name == "..") c.fail("/name", fmt::format("\"{}\" would leave the results directory", name));
  }
  if (doc.contains("description")) c.string(doc["description"], "/description", false);
  if (doc.contains("device")) c.choice(doc["device"], "/device", {"cpu", "cuda"});
  if (doc.contains("repeats")) c.integer(doc["repeats"], "/repeats", 1, 100000);
  if (doc.contains("warmup")) c.integer(doc["warmup"], "/warmup", 0, 100000);
  if (doc.contains("seed")) c.integer(doc["seed"], "/seed", 0);
  if (doc.contains("memory_budget_mb")) c.number(doc["memory_budget_mb"], "/memory_budget_mb", 0.0, false, 1e9);

  if (doc.contains("attention")) {
    if (kind != "attention") c.fail("/attention", fmt::format("only used by kind \"attention\", this is \"{}\"", kind));
    const json& a = doc["attention"];
    c.object(a, "/attention", scenario_attention_keys());
    if (a.contains("heads")) c.integer(a["heads"], "/attention/heads", 1, 4096);
    if (a.contains("head_dim")) c.integer(a["head_dim"], "/attention/head_dim", 1, 65536);
    if (a.contains("relations")) c.boolean(a["relations"], "/attention/relations");
  }
  if (doc.contains("model")) {
    if (kind == "attention") c.fail("/model", "only used by kinds \"model\" and \"train\"");
    const json& m = doc["model"];
    c.object(m, "/model", scenario_model_keys());
    if (m.contains("layers")) c.integer(m["layers"], "/model/layers", 1, 1024);
    const int64_t dim = m.contains("dim") ? c.integer(m["dim"], "/model/dim", 1, 1 << 20) : ModelSettings{}.dim;
    if (m.contains("ffn")) c.integer(m["ffn"], "/model/ffn", 1, 1 << 22);
    if (m.contains("heads")) {
      const int64_t h = c.integer(m["heads"], "/model/heads", 1, 4096);
      if (dim % h != 0) c.fail("/model/heads", fmt::format("expected a divisor of /model/dim ({}), got {}", dim, h));
    } else if (dim % ModelSettings{}.heads != 0) {
      c.fail("/model/dim", fmt::format("expected a multiple of /model/heads ({}), got {}", ModelSettings{}.heads, dim));
    }
    if (m.contains("dropout")) c.number(m["dropout"], "/model/dropout", 0.0, true, 1.0);
    if (m.contains("post_norm")) c.boolean(m["post_norm"], "/model/post_norm");
    if (m.contains("positions")) c.choice(m["positions"], "/model/positions", {"relative", "absolute"});
  }
  if (doc.contains("train")) {
    if (kind != "train") c.fail("/train", fmt::format("only used by kind \"train\", this is \"{}\"", kind));
    const json& t = doc["train"];
    c.object(t, "/train", scenario_train_keys());
    if (t.contains("steps")) c.integer(t["steps"], "/train/steps", 1);
    if (t.contains("minutes")) c.number(t["minutes"], "/train/minutes", 0.0, false);
    if (t.contains("eval_every")) c.integer(t["eval_every"], "/train/eval_every", 0);
    if (t.contains("batch")) c.integer(t["batch"], "/train/batch", 1);
    if (t.contains("lr")) c.number(t["lr"], "/train/lr", 0.0, false);
    if (t.contains("eval_bytes")) c.integer(t["eval_bytes"], "/train/eval_bytes", 0);
    if (t.contains("warmup")) c.integer(t["warmup"], "/train/warmup", 0);
    if (t.contains("data")) c.string(t["data"], "/train/data");
  }

  c.required(doc, "", "axes");
  const json& axes = doc["axes"];
  c.object(axes, "/axes", scenario_axes_keys());
  c.required(axes, "/axes", "patterns");
  c.required(axes, "/axes", "lengths");
  const json& patterns = axes["patterns"];
  if (!patterns.is_array() || patterns.empty()) {
    c.fail("/axes/patterns", fmt::format("expected a non-empty array of pattern entries, got {}", shown(patterns)));
  }
  for (size_t i = 0; i < patterns.size(); ++i) validate_pattern_entry(c, patterns[i], child("/axes/patterns", i), kind);
  if (!axes["lengths"].is_array()) c.fail("/axes/lengths", fmt::format("expected an array of integers, got {}", shown(axes["lengths"])));
  c.scalar_or_list(axes["lengths"], "/axes/lengths", [&](const json& v, const std::string& p) { c.integer(v, p, 1, kMaxLength); });
  if (kind == "train") {
    for (const char* k : {"batch", "modes"}) {
      if (axes.contains(k)) {
        c.fail(child("/axes", k), std::string("not used by kind \"train\"") +
                                      (std::string(k) == "modes" ? "" : "; set /train/batch or /axes/tokens"));
      }
    }
    if (axes.contains("tokens") && doc.contains("train") && doc["train"].is_object() && doc["train"].contains("batch")) {
      c.fail("/axes/tokens", "give either /axes/tokens (batch = tokens / context) or /train/batch, not both");
    }
  }
  if (axes.contains("tokens") && axes.contains("batch")) c.fail("/axes/batch", "give either /axes/tokens or /axes/batch, not both");
  if (axes.contains("tokens")) {
    c.scalar_or_list(axes["tokens"], "/axes/tokens", [&](const json& v, const std::string& p) { c.integer(v, p, 1); });
  }
  if (axes.contains("batch")) {
    c.scalar_or_list(axes["batch"], "/axes/batch", [&](const json& v, const std::string& p) { c.integer(v, p, 1, 1 << 20); });
  }
  if (axes.contains("causal")) {
    c.scalar_or_list(axes["causal"], "/axes/causal", [&](const json& v, const std::string& p) {
      const bool causal = c.boolean(v, p);
      if (kind == "train" && !causal) c.fail(p, "language-model training is causal: expected true, got false");
    });
  }
  if (axes.contains("threads")) {
    c.scalar_or_list(axes["threads"], "/axes/threads", [&](const json& v, const std::string& p) { c.integer(v, p, 0, kMaxThreads); });
  }
  if (axes.contains("modes")) {
    c.scalar_or_list(axes["modes"], "/axes/modes",
                     [&](const json& v, const std::string& p) { c.choice(v, p, {"forward", "forward_backward"}); });
  }
}

Scenario scenario_from_json(const json& doc, const std::string& file) {
  validate_scenario(doc, file);
  Scenario s;
  s.file = file;
  s.doc = doc;
  std::string stem = file;
  const auto slash = stem.find_last_of('/');
  if (slash != std::string::npos) stem = stem.substr(slash + 1);
  if (stem.size() > 5 && stem.substr(stem.size() - 5) == ".json") stem = stem.substr(0, stem.size() - 5);
  s.name = doc.value("name", stem);
  s.description = doc.value("description", std::string());
  s.kind = doc["kind"].get<std::string>();
  s.device = doc.value("device", std::string("cpu"));
  s.repeats = doc.value("repeats", int64_t{5});
  s.warmup = doc.value("warmup", int64_t{1});
  s.seed = doc.value("seed", int64_t{0});
  if (doc.contains("memory_budget_mb")) {
    s.memory_budget_bytes = static_cast<int64_t>(doc["memory_budget_mb"].get<double>() * 1024.0 * 1024.0);
  }
  if (doc.contains("attention")) {
    const json& a = doc["attention"];
    s.attention.heads = a.value("heads", s.attention.heads);
    s.attention.head_dim = a.value("head_dim", s.attention.head_dim);
    s.attention.relations = a.value("relations", s.attention.relations);
  }
  if (doc.contains("model")) {
    const json& m = doc["model"];
    s.model.layers = m.value("layers", s.model.layers);
    s.model.dim = m.value("dim", s.model.dim);
    s.model.ffn = m.value("ffn", s.model.ffn);
    s.model.heads = m.value("heads", s.model.heads);
    s.model.dropout = m.value("dropout", s.model.dropout);
    s.model.post_norm = m.value("post_norm", s.model.post_norm);
    s.model.positions = m.value("positions", s.model.positions);
  }
  if (doc.contains("train")) {
    // Scenario keys map onto the trainer's command-line option names.
    for (const auto& [key, value] : doc["train"].items()) {
      std::string opt = key;
      std::replace(opt.begin(), opt.end(), '_', '-');
      s.train_options.emplace_back(opt, value.is_string() ? value.get<std::string>() : value.dump());
    }
  }
  return s;
}

Scenario load_scenario(const std::string& path, const std::vector<std::string>& overrides) {
  json doc = read_scenario_file(path);
  for (const std::string& o : overrides) apply_override(doc, o);
  return scenario_from_json(doc, path);
}

}  // namespace sb
