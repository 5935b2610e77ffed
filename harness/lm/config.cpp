// The field table of ModelConfig and TrainConfig, and what derives from it: CLI parsing, help, checks, JSON.
#include "harness/lm/config.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/error.h"
#include "common/text.h"

namespace sb {

using json = nlohmann::json;

namespace {

// Numbers at or above this are shown as open-ended ranges (">= 0").
constexpr double kOpenEnded = static_cast<double>(int64_t{1} << 30);

// Builds one FieldSpec; the rows in config.h chain these.
struct Spec {
  FieldSpec f;
  Spec(const std::string& key, FieldType type, const std::string& help) {
    f.key = key;
    f.flag = key;
    std::replace(f.flag.begin(), f.flag.end(), '_', '-');
    f.type = type;
    f.help = help;
  }
  Spec& flag(const std::string& name) { f.flag = name; return *this; }
  Spec& no_flag() { f.flag.clear(); return *this; }
  Spec& negated() { f.negated = true; return *this; }
  Spec& open_below() { f.lo_open = true; return *this; }
  Spec& not_recorded() { f.recorded = false; return *this; }
  Spec& scenario(const std::string& section, json default_value) {
    f.in_scenario = true;
    f.section = section;
    f.scenario_default = std::move(default_value);
    return *this;
  }
  // Ties the spec to its member: `ref` returns the member of a TrainConfig.
  template <typename T>
  FieldSpec bind(T& (*ref)(TrainConfig&), bool model) {
    FieldSpec out = f;
    out.model = model;
    out.get = [ref](const TrainConfig& c) { return json(ref(const_cast<TrainConfig&>(c))); };
    out.set = [ref](TrainConfig& c, const json& v) { ref(c) = v.get<T>(); };
    out.cli_default = out.get(TrainConfig{});
    return out;
  }
};

Spec integer(const std::string& key, int64_t lo, int64_t hi, const std::string& help) {
  Spec s(key, FieldType::integer, help);
  s.f.lo = static_cast<double>(lo);
  s.f.hi = static_cast<double>(hi);
  return s;
}
Spec real(const std::string& key, double lo, double hi, const std::string& help) {
  Spec s(key, FieldType::real, help);
  s.f.lo = lo;
  s.f.hi = hi;
  return s;
}
Spec boolean(const std::string& key, const std::string& help) { return Spec(key, FieldType::boolean, help); }
Spec text(const std::string& key, const std::string& help) { return Spec(key, FieldType::text, help); }
Spec choice(const std::string& key, std::vector<std::string> choices, const std::string& help) {
  Spec s(key, FieldType::choice, help);
  s.f.choices = std::move(choices);
  return s;
}
Spec params(const std::string& key, const std::string& help) { return Spec(key, FieldType::params, help); }

bool is_int(const json& v) {
  if (v.is_number_unsigned()) return v.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  return v.is_number_integer();
}

std::string number_text(const FieldSpec& f, double x) {
  return f.type == FieldType::integer ? std::to_string(static_cast<int64_t>(x)) : fmt::format("{}", x);
}

std::string choices_text(const std::vector<std::string>& choices, char quote) {
  std::vector<std::string> quoted;
  for (const auto& c : choices) quoted.push_back(fmt::format("{0}{1}{0}", quote, c));
  if (quote == '\'' && quoted.size() == 2) return fmt::format("{} or {}", quoted[0], quoted[1]);
  return fmt::format("one of {}", fmt::join(quoted, ", "));
}

// A value as the command line showed it: numbers bare, text quoted.
std::string shown_cli(const json& v) { return v.is_string() ? fmt::format("'{}'", v.get<std::string>()) : v.dump(); }

std::string value_name(const FieldSpec& f) {
  switch (f.type) {
    case FieldType::integer: return "N";
    case FieldType::real: return "X";
    case FieldType::choice: return fmt::format("{}", fmt::join(f.choices, "|"));
    case FieldType::params: return "K=V";
    case FieldType::text: return f.key == "data" || f.key == "out_dir" ? "PATH" : "NAME";
    default: return "";
  }
}

}  // namespace

const std::vector<FieldSpec>& config_fields() {
#define SB_MODEL_ROW(member, type, default_value, spec) \
  spec.bind<type>([](TrainConfig& c) -> type& { return c.model.member; }, true),
#define SB_TRAIN_ROW(member, type, default_value, spec) \
  spec.bind<type>([](TrainConfig& c) -> type& { return c.member; }, false),
  static const std::vector<FieldSpec> fields = {SB_MODEL_FIELDS(SB_MODEL_ROW) SB_TRAIN_FIELDS(SB_TRAIN_ROW)};
#undef SB_MODEL_ROW
#undef SB_TRAIN_ROW
  return fields;
}

const FieldSpec* find_config_field(const std::string& key) {
  for (const FieldSpec& f : config_fields()) {
    if (f.key == key) return &f;
  }
  return nullptr;
}

std::string field_range_text(const FieldSpec& f) {
  if (f.type == FieldType::integer && f.hi >= kOpenEnded) return fmt::format(">= {}", number_text(f, f.lo));
  if (!f.lo_open && !f.hi_open) return fmt::format("in [{}, {}]", number_text(f, f.lo), number_text(f, f.hi));
  return fmt::format("{} {} and {} {}", f.lo_open ? ">" : ">=", number_text(f, f.lo), f.hi_open ? "<" : "<=",
                     number_text(f, f.hi));
}

std::string field_problem(const FieldSpec& f, const json& v, char quote) {
  switch (f.type) {
    case FieldType::integer: {
      const bool ok = is_int(v) && static_cast<double>(v.get<int64_t>()) >= f.lo &&
                      static_cast<double>(v.get<int64_t>()) <= f.hi;
      return ok ? "" : "expected an integer " + field_range_text(f);
    }
    case FieldType::real: {
      bool ok = v.is_number();
      if (ok) {
        const double x = v.get<double>();
        ok = std::isfinite(x) && (f.lo_open ? x > f.lo : x >= f.lo) && (f.hi_open ? x < f.hi : x <= f.hi);
      }
      return ok ? "" : "expected a number " + field_range_text(f);
    }
    case FieldType::boolean:
      return v.is_boolean() ? "" : "expected true or false";
    case FieldType::text:
      return v.is_string() && !v.get<std::string>().empty() ? "" : "expected a non-empty string";
    case FieldType::choice: {
      const bool ok = v.is_string() &&
                      std::find(f.choices.begin(), f.choices.end(), v.get<std::string>()) != f.choices.end();
      return ok ? "" : "expected " + choices_text(f.choices, quote);
    }
    case FieldType::params: {
      bool ok = v.is_object();
      for (const auto& [_, x] : v.items()) ok = ok && is_int(x);
      return ok ? "" : "expected an object of integer pattern parameters";
    }
  }
  return "";
}

json parse_cli_value(const FieldSpec& f, const std::string& text) {
  json v;
  switch (f.type) {
    case FieldType::integer: {
      const auto n = parse_int64(text);
      if (!n) throw Error(fmt::format("--{}: expected an integer, got '{}'", f.flag, text));
      v = *n;
      break;
    }
    case FieldType::real: {
      const auto x = parse_double(text);
      if (!x) throw Error(fmt::format("--{}: expected a number, got '{}'", f.flag, text));
      v = *x;
      break;
    }
    case FieldType::boolean:
      if (text == "1" || text == "true" || text == "yes" || text == "on") {
        v = true;
      } else if (text == "0" || text == "false" || text == "no" || text == "off") {
        v = false;
      } else {
        throw Error(fmt::format("--{}: expected true or false, got '{}'", f.flag, text));
      }
      break;
    case FieldType::params: {
      Params p;
      parse_param_assignment(text, p);
      v = p;
      break;
    }
    default:
      v = text;
  }
  const std::string problem = field_problem(f, v, '\'');
  if (!problem.empty()) throw Error(fmt::format("--{}: {}, got {}", f.flag, problem, shown_cli(v)));
  return v;
}

const std::vector<std::string>& train_option_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const FieldSpec& f : config_fields()) {
      if (!f.flag.empty()) out.push_back(f.flag);
    }
    return out;
  }();
  return names;
}

const std::vector<std::string>& train_flag_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const FieldSpec& f : config_fields()) {
      if (!f.flag.empty() && f.is_switch()) out.push_back(f.flag);
    }
    return out;
  }();
  return names;
}

TrainConfig train_config_from_options(const std::vector<std::pair<std::string, std::string>>& options) {
  std::map<std::string, const FieldSpec*> by_flag;
  for (const FieldSpec& f : config_fields()) {
    if (!f.flag.empty()) by_flag[f.flag] = &f;
  }
  TrainConfig c;
  bool pattern_given = false;
  for (const auto& [name, text] : options) {
    auto it = by_flag.find(name);
    if (it == by_flag.end()) throw Error(fmt::format("unknown option --{}; see --help", name));
    const FieldSpec& f = *it->second;
    if (f.type == FieldType::params) {
      parse_param_assignment(text, c.model.pattern_params);  // its messages name --set
      continue;
    }
    json v = parse_cli_value(f, text);
    if (f.negated) v = !v.get<bool>();
    f.set(c, v);
    pattern_given = pattern_given || f.key == "pattern";
  }
  if (is_dense_attention(c.model.attention) && pattern_given && c.model.pattern != "dense") {
    throw Error(fmt::format("--attention {} is a dense baseline; it takes no --pattern (got '{}')", c.model.attention,
                            c.model.pattern));
  }
  if (c.out_dir.empty()) throw Error("--out: expected a directory, got an empty string");
  if (c.allow_changes && !c.resume) throw Error("--allow-changes applies only with --resume");
  if (c.overwrite && c.resume) throw Error("--overwrite and --resume exclude each other");
  validate_model_config(c.model);
  return c;
}

std::vector<std::pair<std::string, std::string>> train_config_options(const TrainConfig& cfg) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const FieldSpec& f : config_fields()) {
    if (f.flag.empty()) continue;
    const json v = f.get(cfg);
    switch (f.type) {
      case FieldType::params:
        for (const auto& [k, x] : v.items()) out.emplace_back(f.flag, fmt::format("{}={}", k, x.get<int64_t>()));
        break;
      case FieldType::boolean:
        if (v.get<bool>() != f.negated) out.emplace_back(f.flag, "true");
        break;
      case FieldType::text:
      case FieldType::choice: {
        const std::string text = v.get<std::string>();
        // The dense baseline takes no pattern; an unset path keeps its default.
        if (text.empty() || (f.key == "pattern" && is_dense_attention(cfg.model.attention))) break;
        out.emplace_back(f.flag, text);
        break;
      }
      case FieldType::real:
        out.emplace_back(f.flag, fmt::format("{}", v.get<double>()));
        break;
      default:
        out.emplace_back(f.flag, v.dump());
    }
  }
  return out;
}

std::string train_options_help() {
  std::string out;
  for (const bool model : {true, false}) {
    out += model ? "model:\n" : "training:\n";
    for (const FieldSpec& f : config_fields()) {
      if (f.model != model || f.flag.empty()) continue;
      std::string left = "--" + f.flag;
      if (!f.is_switch()) left += " " + value_name(f);
      std::string detail;
      if (f.type == FieldType::integer || f.type == FieldType::real) {
        detail = fmt::format(" (default {}; {})", f.cli_default.dump(), field_range_text(f));
      } else if (f.type == FieldType::text || f.type == FieldType::choice) {
        const std::string d = f.cli_default.get<std::string>();
        if (!d.empty()) detail = fmt::format(" (default {})", d);
      }
      const std::string line = fmt::format("  {:<22}{}{}\n", left, f.help, detail);
      out += left.size() >= 22 ? fmt::format("  {}\n  {:<22}{}{}\n", left, "", f.help, detail) : line;
    }
  }
  return out;
}

void validate_model_config(const ModelConfig& cfg) {
  TrainConfig holder;
  holder.model = cfg;
  for (const FieldSpec& f : config_fields()) {
    if (!f.model) continue;
    const json v = f.get(holder);
    const std::string problem = field_problem(f, v, '\'');
    if (!problem.empty()) throw Error(fmt::format("{}: {}, got {}", f.key, problem, shown_cli(v)));
  }
  if (cfg.dim % cfg.heads != 0) {
    throw Error(fmt::format("dim: {} is not divisible by heads ({})", cfg.dim, cfg.heads));
  }
}

void validate_train_config(const TrainConfig& cfg) {
  validate_model_config(cfg.model);
  for (const FieldSpec& f : config_fields()) {
    if (f.model) continue;
    const json v = f.get(cfg);
    if (f.type == FieldType::text && v.get<std::string>().empty()) continue;  // unset paths are checked where used
    const std::string problem = field_problem(f, v, '\'');
    if (!problem.empty()) throw Error(fmt::format("{}: {}, got {}", f.key, problem, shown_cli(v)));
  }
}

json model_config_json(const ModelConfig& cfg) {
  TrainConfig holder;
  holder.model = cfg;
  json out = json::object();
  for (const FieldSpec& f : config_fields()) {
    if (f.model && f.recorded) out[f.key] = f.get(holder);
  }
  if (is_dense_attention(cfg.attention)) out["pattern"] = cfg.attention + " (baseline)";
  return out;
}

namespace {
std::atomic<int64_t> g_config_serialisations{0};
}  // namespace

int64_t train_config_serialisations() { return g_config_serialisations.load(std::memory_order_relaxed); }

json train_config_json(const TrainConfig& cfg) {
  g_config_serialisations.fetch_add(1, std::memory_order_relaxed);
  json out = {{"model", model_config_json(cfg.model)}};
  for (const FieldSpec& f : config_fields()) {
    if (!f.model && f.recorded) out[f.key] = f.get(cfg);
  }
  return out;
}

json train_settings_json(const TrainConfig& cfg) {
  json out = json::object();
  for (const FieldSpec& f : config_fields()) {
    if (!f.recorded) out[f.key] = f.get(cfg);
  }
  return out;
}

TrainConfig train_config_from_json(const json& config, const json& settings, const std::string& where,
                                   bool check_ranges) {
  if (!config.is_object() || !config.contains("model") || !config["model"].is_object()) {
    throw Error(fmt::format("{}: /config: expected the recorded config, an object with /model", where));
  }
  if (!settings.is_object()) throw Error(fmt::format("{}: /settings: expected an object", where));
  TrainConfig cfg;
  for (const FieldSpec& f : config_fields()) {
    const json& from = !f.recorded ? settings : f.model ? config["model"] : config;
    const std::string at = fmt::format("/{}{}/{}", f.recorded ? "config" : "settings", f.model ? "/model" : "", f.key);
    if (!from.contains(f.key)) throw Error(fmt::format("{}: {}: missing", where, at));
    // An empty text is the unset value (no data file, the default distances), which the recorded config keeps.
    const bool unset_text = f.type == FieldType::text && from[f.key] == "";
    const std::string problem = unset_text ? std::string() : field_problem(f, from[f.key], '"');
    if (!problem.empty() && check_ranges) throw Error(fmt::format("{}: {}: {}", where, at, problem));
    try {
      f.set(cfg, from[f.key]);
    } catch (const nlohmann::json::exception&) {
      throw Error(fmt::format("{}: {}: {}", where, at, problem.empty() ? "wrong type" : problem));
    }
  }
  // The dense baselines record "<attention> (baseline)" for a pattern they do not use (model_config_json).
  if (is_dense_attention(cfg.model.attention) && cfg.model.pattern == cfg.model.attention + " (baseline)") {
    cfg.model.pattern = "dense";
  }
  return cfg;
}

}  // namespace sb
