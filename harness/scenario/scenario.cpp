// Scenario loading, --set overrides and validation: every problem is reported as "FILE: /pointer: message".
#include "harness/scenario/scenario.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>
#include <unordered_map>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/error.h"
#include "common/json_guard.h"
#include "common/limits.h"
#include "common/text.h"

namespace sb {

const std::vector<FieldSpec>& scenario_fields() {
  static const std::vector<FieldSpec> fields = [] {
    auto field = [](const std::string& key, FieldType type, double lo, double hi, json def, const std::string& help,
                    const std::string& section = "") {
      FieldSpec f;
      f.key = key;
      f.type = type;
      f.lo = lo;
      f.hi = hi;
      f.help = help;
      f.in_scenario = true;
      f.section = section;
      f.scenario_default = std::move(def);
      return f;
    };
    FieldSpec kind = field("kind", FieldType::choice, 0, 0, nullptr,
                           "attention: the op alone; model: a whole LanguageModel step; train: language-model runs "
                           "through the trainer.");
    kind.choices = {"attention", "model", "train"};
    FieldSpec budget = field("memory_budget_mb", FieldType::real, 0, 1e9, nullptr,
                             "Points whose analytic memory exceeds this are recorded as skipped, not run.");
    budget.lo_open = budget.hi_open = true;
    return std::vector<FieldSpec>{
        field("name", FieldType::text, 0, 0, nullptr, "Names the results directory (not . or ..); default: the file name without .json."),
        field("description", FieldType::text, 0, 0, nullptr, "Shown in report.md."),
        kind,
        *find_config_field("device"),
        field("repeats", FieldType::integer, 1, 100000, 5, "Timed runs per point (attention, model)."),
        field("warmup", FieldType::integer, 0, 100000, 1, "Untimed runs before the timed ones."),
        *find_config_field("seed"),
        budget,
        field("max_points", FieldType::integer, 1, 1e9, kDefaultMaxPoints,
              "Most points the axes may expand to; a larger product is refused, naming the count and the axes that "
              "make it, before anything is built."),
        field("heads", FieldType::integer, 1, 4096, 8, "Attention heads.", "attention"),
        field("head_dim", FieldType::integer, 1, 65536, 64, "Head dimension.", "attention"),
        field("relations", FieldType::boolean, 0, 0, true, "Pass relation embeddings [R, D] to the graph op.",
              "attention"),
    };
  }();
  return fields;
}

namespace {

// Keys of one section: the scenario fields, then the config fields scenario files take there.
std::vector<std::string> section_keys(const std::string& section) {
  std::vector<std::string> keys;
  for (const FieldSpec& f : scenario_fields()) {
    if (f.section == section) keys.push_back(f.key);
  }
  for (const FieldSpec& f : config_fields()) {
    if (f.in_scenario && f.section == section && std::find(keys.begin(), keys.end(), f.key) == keys.end()) {
      keys.push_back(f.key);
    }
  }
  return keys;
}

}  // namespace

const std::vector<std::string>& scenario_top_keys() {
  static const std::vector<std::string> k = [] {
    std::vector<std::string> keys = section_keys("");
    for (const char* object : {"axes", "attention", "model", "train"}) keys.push_back(object);
    return keys;
  }();
  return k;
}
const std::vector<std::string>& scenario_axes_keys() {
  static const std::vector<std::string> k = {"patterns", "lengths", "tokens", "batch", "causal", "threads", "modes",
                                             "seeds", "dtypes"};
  return k;
}
const std::vector<std::string>& scenario_attention_keys() {
  static const std::vector<std::string> k = section_keys("attention");
  return k;
}
const std::vector<std::string>& scenario_model_keys() {
  static const std::vector<std::string> k = section_keys("model");
  return k;
}
const std::vector<std::string>& scenario_train_keys() {
  static const std::vector<std::string> k = section_keys("train");
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

  // A value of a described field (harness/lm/config.h, scenario_fields()).
  void field(const FieldSpec& f, const json& v, const std::string& ptr) const {
    const std::string problem = field_problem(f, v, '"');
    if (!problem.empty()) fail(ptr, fmt::format("{}, got {}", problem, shown(v)));
  }

  // Every described field of `section` present in `obj`.
  void section_fields(const json& obj, const std::string& ptr, const std::string& section) const {
    auto check = [&](const FieldSpec& f) {
      if (f.in_scenario && f.section == section && obj.contains(f.key)) field(f, obj[f.key], child(ptr, f.key));
    };
    for (const FieldSpec& f : scenario_fields()) check(f);
    for (const FieldSpec& f : config_fields()) check(f);
  }

  // A scalar or a non-empty array of scalars; `each` checks one element at its pointer. A value given twice in
  // one list is refused (it would make every point it takes part in twice), found by hashing in linear time.
  template <typename F>
  void scalar_or_list(const json& v, const std::string& ptr, F each) const {
    if (v.is_array()) {
      if (v.empty()) fail(ptr, "expected a non-empty array");
      // Numbers by value (2 and 2.0 are one value, and one point id), anything else by its text.
      std::unordered_map<int64_t, size_t> ints;
      std::unordered_map<double, size_t> reals;
      std::unordered_map<std::string, size_t> others;
      if (v.front().is_number()) ints.reserve(v.size());
      for (size_t i = 0; i < v.size(); ++i) {
        const json& x = v[i];
        each(x, child(ptr, i));
        size_t earlier = 0;
        bool fresh = true;
        const double d = x.is_number() ? x.get<double>() : 0.0;
        if (x.is_number_integer() || (x.is_number_float() && d == std::floor(d) && std::abs(d) < 9.0e18)) {
          const auto n = ints.emplace(x.is_number_float() ? static_cast<int64_t>(d) : x.get<int64_t>(), i);
          fresh = n.second, earlier = n.first->second;
        } else if (x.is_number()) {
          const auto r = reals.emplace(d, i);
          fresh = r.second, earlier = r.first->second;
        } else {
          const auto o = others.emplace(x.dump(), i);
          fresh = o.second, earlier = o.first->second;
        }
        if (!fresh) {
          fail(child(ptr, i), fmt::format("{} repeats {} ({}); each value of an axis once, or every point with it "
                                          "would run twice",
                                          shown(x), child(ptr, earlier), shown(v[earlier])));
        }
      }
    } else {
      each(v, ptr);
    }
  }
};

void validate_pattern_entry(const Checker& c, const json& e, const std::string& ptr) {
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
    const std::string a = c.choice(e["attention"], child(ptr, "attention"), {"graph", "dense", "dense_naive"});
    if (is_dense_attention(a) && name != "dense") {
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
}

}  // namespace

namespace {

// " (at /axes/lengths/0)": where in the document the parser stopped; "" at the top level.
std::string pointer_note(const std::string& text, size_t at) {
  const std::string ptr = json_pointer_at(text, at);
  return ptr.empty() ? "" : fmt::format(" (at {})", ptr);
}

}  // namespace

json parse_scenario_text(const std::string& text, const std::string& file) {
  check_json_text(text, file);  // depth and duplicate keys, before anything recursive touches the document
  try {
    return json::parse(text);
  } catch (const json::parse_error& e) {
    const size_t at = e.byte > 0 ? e.byte - 1 : 0;
    const auto [line, col] = text_line_col(text, at);
    std::string msg = e.what();
    // Keep nlohmann's explanation, drop its "[json.exception...] parse error at line x, column y: " prefix.
    const auto colon = msg.find(": ");
    if (msg.rfind("[json.exception", 0) == 0 && colon != std::string::npos) msg = msg.substr(colon + 2);
    throw Error(fmt::format("{}:{}:{}: malformed JSON: {}{}", file, line, col, msg, pointer_note(text, at)));
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
    throw Error(fmt::format("{}:{}:{}: malformed JSON: {}{}", file, line, col, msg, pointer_note(text, at)));
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
  } catch (const json::exception&) {
    // Well-formed JSON that cannot be held, e.g. a number beyond double's range.
    throw Error(fmt::format("--set {}: '{}' holds a number out of range", path,
                            text.size() > 60 ? text.substr(0, 57) + "..." : text));
  }
  if (!doc.is_object()) throw Error("--set: the scenario is not a JSON object");
  json* cur = &doc;
  std::string at;
  for (size_t i = 0; i < parts.size(); ++i) {
    const std::string& key = parts[i];
    const bool last = i + 1 == parts.size();
    if (cur->is_array()) {
      // A JSON pointer's array index: "0" or digits without a leading zero (RFC 6901), so "00" is not element 0.
      const bool index_text = std::all_of(key.begin(), key.end(), [](char ch) { return ch >= '0' && ch <= '9'; }) &&
                              (key.size() == 1 || key[0] != '0');
      const auto idx = index_text ? parse_int64(key) : std::nullopt;
      if (!index_text) {
        throw Error(fmt::format("--set {}: '{}' is not an array index of {} (digits without a leading zero: 0, 1, "
                                "2, ...)",
                                path, key, at.empty() ? "/" : at));
      }
      if (!idx || *idx < 0 || static_cast<size_t>(*idx) >= cur->size()) {
        throw Error(fmt::format("--set {}: {}{} has no element '{}'", path, at.empty() ? "/" : at, "", key));
      }
      cur = &(*cur)[static_cast<size_t>(*idx)];
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
  for (const FieldSpec& f : scenario_fields()) {
    if (f.key == "kind") c.field(f, doc["kind"], "/kind");
  }
  const std::string kind = doc["kind"].get<std::string>();
  if (doc.contains("name")) {
    const std::string name = c.string(doc["name"], "/name");
    for (char ch : name) {
      if (!(std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '-' || ch == '.')) {
        c.fail("/name", fmt::format("expected letters, digits, '_', '-' or '.' (it names a directory), got {}",
                                    shown(doc["name"])));
      }
    }
    if (name == "." || name == "..") c.fail("/name", fmt::format("\"{}\" would leave the results directory", name));
    if (name.size() > kMaxNameBytes) {
      c.fail("/name", fmt::format("{} characters; it names a directory, and file systems take at most {}",
                                  name.size(), kMaxNameBytes));
    }
  }
  if (doc.contains("description")) c.string(doc["description"], "/description", false);
  for (const FieldSpec& f : scenario_fields()) {
    if (f.section.empty() && f.type != FieldType::text && f.key != "kind" && doc.contains(f.key)) {
      c.field(f, doc[f.key], "/" + f.key);
    }
  }

  if (doc.contains("attention")) {
    if (kind != "attention") c.fail("/attention", fmt::format("only used by kind \"attention\", this is \"{}\"", kind));
    c.object(doc["attention"], "/attention", scenario_attention_keys());
    c.section_fields(doc["attention"], "/attention", "attention");
  }
  if (doc.contains("model")) {
    if (kind == "attention") c.fail("/model", "only used by kinds \"model\" and \"train\"");
    const json& m = doc["model"];
    c.object(m, "/model", scenario_model_keys());
    c.section_fields(m, "/model", "model");
    const int64_t dim = m.value("dim", find_config_field("dim")->scenario_default.get<int64_t>());
    const int64_t heads = find_config_field("heads")->scenario_default.get<int64_t>();
    if (m.contains("heads")) {
      const int64_t h = m["heads"].get<int64_t>();
      if (dim % h != 0) c.fail("/model/heads", fmt::format("expected a divisor of /model/dim ({}), got {}", dim, h));
    } else if (dim % heads != 0) {
      c.fail("/model/dim", fmt::format("expected a multiple of /model/heads ({}), got {}", heads, dim));
    }
  }
  if (doc.contains("train")) {
    if (kind != "train") c.fail("/train", fmt::format("only used by kind \"train\", this is \"{}\"", kind));
    c.object(doc["train"], "/train", scenario_train_keys());
    c.section_fields(doc["train"], "/train", "train");
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
  for (size_t i = 0; i < patterns.size(); ++i) validate_pattern_entry(c, patterns[i], child("/axes/patterns", i));
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
    const FieldSpec& threads = *find_config_field("threads");
    c.scalar_or_list(axes["threads"], "/axes/threads", [&](const json& v, const std::string& p) { c.field(threads, v, p); });
  }
  if (axes.contains("seeds")) {
    if (kind != "train") c.fail("/axes/seeds", fmt::format("only used by kind \"train\" (timing kinds repeat instead), this is \"{}\"", kind));
    if (doc.contains("seed")) c.fail("/axes/seeds", "give either /seed or /axes/seeds, not both");
    const FieldSpec& seed = *find_config_field("seed");
    std::set<int64_t> seen;
    c.scalar_or_list(axes["seeds"], "/axes/seeds", [&](const json& v, const std::string& p) {
      c.field(seed, v, p);
      if (!seen.insert(v.get<int64_t>()).second) c.fail(p, fmt::format("seed {} appears twice", v.get<int64_t>()));
    });
  }
  if (axes.contains("modes")) {
    c.scalar_or_list(axes["modes"], "/axes/modes",
                     [&](const json& v, const std::string& p) { c.choice(v, p, {"forward", "forward_backward"}); });
  }
  if (axes.contains("dtypes")) {
    if (kind == "train" && doc.contains("train") && doc["train"].contains("dtype")) {
      c.fail("/axes/dtypes", "give either /train/dtype or /axes/dtypes, not both");
    }
    const FieldSpec& dtype = *find_config_field("dtype");
    std::set<std::string> seen;
    c.scalar_or_list(axes["dtypes"], "/axes/dtypes", [&](const json& v, const std::string& p) {
      c.field(dtype, v, p);
      if (!seen.insert(v.get<std::string>()).second) c.fail(p, fmt::format("dtype {} appears twice", v.get<std::string>()));
    });
  }
}

namespace {

constexpr std::pair<ScenarioKind, const char*> kKindNames[] = {
    {ScenarioKind::attention, "attention"}, {ScenarioKind::model, "model"}, {ScenarioKind::train, "train"}};

// The validated document's kind (validate_scenario refused any other name).
ScenarioKind kind_of(const std::string& name) {
  for (const auto& [kind, text] : kKindNames) {
    if (name == text) return kind;
  }
  throw Error(fmt::format("unknown scenario kind '{}'", name));
}

}  // namespace

const char* kind_name(ScenarioKind kind) {
  for (const auto& [k, text] : kKindNames) {
    if (k == kind) return text;
  }
  return "?";
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
  s.kind = kind_of(doc["kind"].get<std::string>());
  s.device = doc.value("device", std::string("cpu"));
  s.repeats = doc.value("repeats", int64_t{5});
  s.warmup = doc.value("warmup", int64_t{1});
  s.seed = doc.value("seed", int64_t{0});
  s.max_points = doc.value("max_points", kDefaultMaxPoints);
  if (doc.contains("memory_budget_mb")) {
    s.memory_budget_bytes = static_cast<int64_t>(doc["memory_budget_mb"].get<double>() * 1024.0 * 1024.0);
  }
  if (doc.contains("attention")) {
    const json& a = doc["attention"];
    s.attention.heads = a.value("heads", s.attention.heads);
    s.attention.head_dim = a.value("head_dim", s.attention.head_dim);
    s.attention.relations = a.value("relations", s.attention.relations);
  }
  // Model and training fields: the document's value, else the field's scenario default.
  for (const FieldSpec& f : config_fields()) {
    if (!f.in_scenario) continue;
    const json* where = f.section.empty() ? &doc : doc.contains(f.section) ? &doc[f.section] : nullptr;
    if (where && where->contains(f.key)) {
      f.set(s.train, (*where)[f.key]);
    } else if (!f.scenario_default.is_null()) {
      f.set(s.train, f.scenario_default);
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
