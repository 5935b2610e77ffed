// scenarios/schema.json generated from the field tables (config fields, scenario fields) plus the axes and
// pattern-entry structure, so the schema, the validator and the CLI cannot drift apart.
#include <fmt/format.h>

#include "common/limits.h"
#include "harness/scenario/scenario.h"

namespace sb {

namespace {

json number_bounds(const FieldSpec& f, json p) {
  const bool integer = f.type == FieldType::integer;
  auto num = [&](double x) { return integer ? json(static_cast<int64_t>(x)) : json(x); };
  p[f.lo_open ? "exclusiveMinimum" : "minimum"] = num(f.lo);
  p[f.hi_open ? "exclusiveMaximum" : "maximum"] = num(f.hi);
  return p;
}

json field_schema(const FieldSpec& f) {
  json p;
  switch (f.type) {
    case FieldType::integer: p = number_bounds(f, {{"type", "integer"}}); break;
    case FieldType::real: p = number_bounds(f, {{"type", "number"}}); break;
    case FieldType::boolean: p = {{"type", "boolean"}}; break;
    case FieldType::choice: p = {{"enum", f.choices}}; break;
    default: p = {{"type", "string"}, {"minLength", 1}}; break;
  }
  if (!f.scenario_default.is_null()) p["default"] = f.scenario_default;
  if (!f.help.empty()) p["description"] = f.help;
  return p;
}

json section_schema(const std::string& section) {
  json props = json::object();
  for (const FieldSpec& f : scenario_fields()) {
    if (f.section == section) props[f.key] = field_schema(f);
  }
  for (const FieldSpec& f : config_fields()) {
    if (f.in_scenario && f.section == section) props[f.key] = field_schema(f);
  }
  return props;
}

// An axis: one value of `item` or a non-empty list of them.
json axis(const json& item) { return {{"oneOf", json::array({item, {{"type", "array"}, {"minItems", 1}, {"items", item}}})}}; }

}  // namespace

json scenario_schema() {
  json top = section_schema("");
  top["name"]["pattern"] = "^[A-Za-z0-9_.-]+$";
  top["name"]["maxLength"] = kMaxNameBytes;
  top["name"]["not"] = {{"enum", {".", ".."}}};  // would leave the results directory
  top["description"].erase("minLength");
  const FieldSpec& threads = *find_config_field("threads");
  json attention = {{"type", "object"}, {"additionalProperties", false}, {"description", "Only for kind attention."},
                    {"properties", section_schema("attention")}};
  json model = {{"type", "object"}, {"additionalProperties", false}, {"description", "For kinds model and train."},
                {"properties", section_schema("model")}};
  json train = {{"type", "object"}, {"additionalProperties", false},
                {"description", "Only for kind train: the trainer's options (`sparsebench train --help`)."},
                {"properties", section_schema("train")}};
  json threads_item = {{"type", "integer"}, {"minimum", static_cast<int64_t>(threads.lo)},
                       {"maximum", static_cast<int64_t>(threads.hi)}};
  json modes_item = {{"enum", {"forward", "forward_backward"}}};
  json axes = {
      {"type", "object"},
      {"additionalProperties", false},
      {"required", {"patterns", "lengths"}},
      {"properties",
       {{"patterns", {{"type", "array"}, {"minItems", 1}, {"items", {{"$ref", "#/$defs/pattern_entry"}}}}},
        {"lengths", {{"type", "array"}, {"minItems", 1},
                     {"items", {{"type", "integer"}, {"minimum", 1}, {"maximum", int64_t{1} << 24}}},
                     {"description", "Tokens per sequence (train: the context)."}}},
        {"tokens", {{"$ref", "#/$defs/int_axis_1"},
                    {"description", "Tokens per batch: batch = max(1, tokens / length). Not with batch; for train "
                                    "not with /train/batch (equal tokens per step at every context)."}}},
        {"batch", axis({{"type", "integer"}, {"minimum", 1}, {"maximum", int64_t{1} << 20}})},
        {"causal", axis({{"type", "boolean"}})},
        {"threads", axis(threads_item)},
        {"modes", axis(modes_item)},
        {"seeds", axis({{"type", "integer"}, {"minimum", 0}, {"maximum", int64_t{1} << 62}})},
        {"dtypes", axis(field_schema(*find_config_field("dtype")))}}}};
  axes["properties"]["batch"]["description"] = "Sequences per batch (default 1). Not with tokens; not for train.";
  axes["properties"]["causal"]["description"] = "Default false (train: true, and only true).";
  axes["properties"]["threads"]["description"] = threads.help + " (default 0).";
  axes["properties"]["modes"]["description"] = "Default forward; not for train.";
  axes["properties"]["dtypes"]["description"] =
      "Compute precision per point, innermost (default float32; train: /train/dtype, not with both): attention: q, "
      "k, v and o in it; model and train: as /train/dtype.";
  axes["properties"]["seeds"]["description"] =
      "Only for train: every point runs once per seed (seeds outermost); a seed fixes the data order and the shared "
      "initial weights, so patterns compare on paired runs. Not with /seed.";
  json pattern_entry = {
      {"type", "object"},
      {"required", {"name"}},
      {"description", "Any other key is a parameter of the named pattern (`sparsebench patterns` lists them): an "
                      "integer in its range or a non-empty list of them (a list is an axis)."},
      {"additionalProperties", {{"$ref", "#/$defs/int_axis_1"}}},
      {"properties",
       {{"name", {{"type", "string"}, {"description", "A registered pattern."}}},
        {"label", {{"type", "string"}, {"minLength", 1}, {"description", "Series name in plots."}}},
        {"attention", {{"enum", {"graph", "dense", "dense_naive"}}, {"default", "graph"},
                       {"description", "dense: the best dense LibTorch op (scaled_dot_product_attention on "
                                       "LibTorch >= 2, materialised on 1.13); dense_naive: materialised scores, "
                                       "the paper's baseline (pattern dense only)."}}},
        {"degree", axis({{"type", "number"}, {"exclusiveMinimum", 0}, {"exclusiveMaximum", kMaxLength}})},
        {"solve", {{"type", "string"},
                   {"description", "The parameter solved for degree; default the first parameter not given."}}},
        {"max_length", {{"type", "integer"}, {"minimum", 1},
                        {"description", "Longer lengths are recorded as skipped for this entry."}}}}}};
  pattern_entry["properties"]["degree"]["description"] =
      "Target mean token in-degree: the solved parameter is chosen per length to come closest.";
  top["axes"] = axes;
  top["attention"] = attention;
  top["model"] = model;
  top["train"] = train;
  return {{"$schema", "https://json-schema.org/draft/2020-12/schema"},
          {"$id", "sparsebench/scenarios/schema.json"},
          {"title", "sparsebench scenario"},
          {"description", "A sweep run by `sparsebench run FILE`, generated by `sparsebench schema` from the field "
                          "tables (harness/lm/config.h, harness/scenario/scenario.cpp). The C++ validator also checks "
                          "what a schema cannot say: pattern names and parameter ranges come from the pattern "
                          "registry, /model/heads must divide /model/dim, sections must match the kind. See "
                          "scenarios/README.md."},
          {"type", "object"},
          {"additionalProperties", false},
          {"required", {"kind", "axes"}},
          {"properties", top},
          {"$defs", {{"int_axis_1", axis({{"type", "integer"}, {"minimum", 1}})}, {"pattern_entry", pattern_entry}}}};
}

}  // namespace sb
