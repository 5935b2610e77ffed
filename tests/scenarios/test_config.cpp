// The config field table: every field a scenario takes round-trips CLI -> recorded JSON -> scenario --set -> the
// expanded point's typed config; ranges reject absurd values; scenarios/schema.json is the generated schema.
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <set>

#include "common/error.h"
#include "harness/lm/config.h"
#include "harness/scenario/scenario.h"
#include "tests/scenarios/error_of.h"

using namespace sb;

namespace {

// A value of `f` inside its range that differs from both its defaults; for a switch, the value its flag sets.
json other_value(const FieldSpec& f) {
  switch (f.type) {
    case FieldType::boolean: return !f.negated;
    case FieldType::choice: return f.choices.back();
    case FieldType::text: return "corpus.bin";
    case FieldType::real: return f.hi >= 1.0 ? f.lo + 0.5 : (f.lo + f.hi) / 2;
    default: {
      if (f.key == "dim") return 24;   // divisible by every default head count
      if (f.key == "heads") return 2;  // divides every default width
      int64_t v = static_cast<int64_t>(f.lo) + 3;
      while (json(v) == f.cli_default || json(v) == f.scenario_default) ++v;
      return v;
    }
  }
}

// Every field at a value other than its default survives the recorded form and its settings (how a sweep hands a
// point to a child process and `train --nproc` hands the config to its ranks); a missing or bad field is named.
TEST(ConfigFields, RecordedConfigReadsBack) {
  TrainConfig c;
  for (const FieldSpec& f : config_fields()) {
    if (f.type != FieldType::params) f.set(c, other_value(f));
  }
  c.model.pattern_params = {{"k", 3}};
  c.model.attention = "graph";  // the dense baselines record no pattern (below)
  const TrainConfig back = train_config_from_json(train_config_json(c), train_settings_json(c), "handoff.json");
  for (const FieldSpec& f : config_fields()) EXPECT_EQ(f.get(back), f.get(c)) << f.key;
  // Unset texts (no data file, the default task distances) stay unset.
  const TrainConfig plain;
  const TrainConfig plain_back = train_config_from_json(train_config_json(plain), train_settings_json(plain), "p.json");
  EXPECT_EQ(plain_back.data, "");
  EXPECT_EQ(plain_back.task_distances, "");
  TrainConfig dense;
  dense.model.attention = "dense_naive";
  const TrainConfig dense_back = train_config_from_json(train_config_json(dense), train_settings_json(dense), "d.json");
  EXPECT_EQ(dense_back.model.attention, "dense_naive");
  EXPECT_EQ(dense_back.model.pattern, "dense");
  EXPECT_EQ(train_config_json(dense_back), train_config_json(dense));

  json recorded = train_config_json(c);
  recorded["model"].erase("dim");
  EXPECT_EQ(sb::test::error_of([&] { train_config_from_json(recorded, train_settings_json(c), "h.json"); }),
            "h.json: /config/model/dim: missing");
  recorded = train_config_json(c);
  recorded["batch"] = 0;
  EXPECT_EQ(sb::test::error_of([&] { train_config_from_json(recorded, train_settings_json(c), "h.json"); }),
            "h.json: /config/batch: expected an integer in [1, 65536]");
  json settings = train_settings_json(c);
  settings["quiet"] = "yes";
  EXPECT_NE(sb::test::error_of([&] { train_config_from_json(train_config_json(c), settings, "h.json"); })
                .find("h.json: /settings/quiet: "),
            std::string::npos);
}

// A point handed to a child process is the point the sweep expanded: identity, axis values and config.
TEST(ConfigFields, PointHandoffRoundTrips) {
  const json doc = json::parse(R"({"kind": "train", "train": {"data": "enwik8", "steps": 7},
                                   "axes": {"patterns": [{"name": "bpt", "degree": 12}], "lengths": [128],
                                            "seeds": [4, 5], "threads": 1}})");
  const std::vector<Point> points = expand_scenario(scenario_from_json(doc, "handoff.json"));
  ASSERT_EQ(points.size(), 2u);
  const Point& p = points[1];
  const Point q = point_from_handoff(json::parse(point_handoff_json(p).dump()), "p.json");
  EXPECT_EQ(q.index, p.index);
  EXPECT_EQ(q.id, p.id);
  EXPECT_EQ(q.config_id, p.config_id);
  EXPECT_EQ(q.label, p.label);
  EXPECT_EQ(q.mode, p.mode);
  EXPECT_EQ(q.params(), p.params());  // the solved k, not searched again
  EXPECT_EQ(q.seed(), 5);
  EXPECT_EQ(train_config_json(q.config), train_config_json(p.config));
  EXPECT_EQ(sb::test::error_of([] { point_from_handoff(json::object(), "p.json"); }),
            "p.json: /index: missing or of the wrong type");
}

TEST(ConfigFields, RoundTripCliRecordScenario) {
  int checked = 0;
  for (const FieldSpec& f : config_fields()) {
    if (!f.in_scenario || f.flag.empty()) continue;
    const json v = other_value(f);
    ASSERT_EQ(field_problem(f, v, '"'), "") << f.key << " " << v.dump();
    // CLI: --flag (a switch) or --flag VALUE.
    const std::string text = f.is_switch() ? "1" : v.is_string() ? v.get<std::string>() : v.dump();
    const TrainConfig cli = train_config_from_options({{f.flag, text}});
    EXPECT_EQ(f.get(cli), v) << f.key;
    // The recorded config names it by its key.
    const json record = train_config_json(cli);
    const json recorded = f.model ? record["model"][f.key] : record[f.key];
    EXPECT_EQ(recorded, v) << f.key;
    // A scenario takes the recorded value back through --set at the field's place.
    json doc = json::parse(R"({"kind": "train", "train": {"data": "enwik8"},
                               "axes": {"patterns": [{"name": "bpt", "k": 2}], "lengths": [64]}})");
    apply_override(doc, (f.section.empty() ? "" : f.section + "/") + f.key + "=" + recorded.dump());
    const Scenario s = scenario_from_json(doc, "roundtrip.json");
    EXPECT_EQ(f.get(s.train), v) << f.key;
    const std::vector<Point> points = expand_scenario(s);
    ASSERT_EQ(points.size(), 1u);
    EXPECT_EQ(points[0].skip_reason, "") << f.key;
    EXPECT_EQ(f.get(points[0].config), v) << f.key;
    ++checked;
  }
  EXPECT_GE(checked, 20);
}

TEST(ConfigFields, PointsCarryTheirTypedConfig) {
  const Scenario s = scenario_from_json(json::parse(R"({"kind": "train", "device": "cuda", "seed": 7,
      "model": {"layers": 3, "dim": 64, "heads": 4}, "train": {"data": "enwik8", "lr": 0.002},
      "axes": {"patterns": [{"name": "window", "w": [4, 8]}], "lengths": [32], "tokens": 256, "threads": 1}})"),
                                        "typed.json");
  const std::vector<Point> points = expand_scenario(s);
  ASSERT_EQ(points.size(), 2u);
  for (const Point& p : points) {
    EXPECT_EQ(p.config.device, "cuda");
    EXPECT_EQ(p.config.seed, 7);
    EXPECT_EQ(p.config.model.layers, 3);
    EXPECT_EQ(p.config.model.ffn, 2048);  // the scenario default, not the CLI's 512
    EXPECT_EQ(p.config.model.pattern, "window");
    EXPECT_EQ(p.config.model.context, 32);
    EXPECT_TRUE(p.config.model.causal);
    EXPECT_EQ(p.config.batch, 8);  // 256 tokens over a context of 32
    EXPECT_EQ(p.config.threads, 1);
    EXPECT_DOUBLE_EQ(p.config.lr, 0.002);
    EXPECT_EQ(p.config.data, "enwik8");
  }
  EXPECT_EQ(points[0].config.model.pattern_params.at("w"), 4);
  EXPECT_EQ(points[1].config.model.pattern_params.at("w"), 8);
  // Without /train/batch or /axes/tokens, the scenario default batch.
  const Scenario d = scenario_from_json(json::parse(R"({"kind": "train", "train": {"data": "x"},
      "axes": {"patterns": [{"name": "bpt"}], "lengths": [64]}})"), "default.json");
  EXPECT_EQ(expand_scenario(d)[0].config.batch, find_config_field("batch")->scenario_default.get<int64_t>());
}

TEST(ConfigFields, AbsurdValuesAreRefusedWithTheirName) {
  auto cli_error = [](const std::string& flag, const std::string& value) {
    try {
      train_config_from_options({{flag, value}});
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(cli_error("threads", "100000"), "--threads: expected an integer in [0, 1024], got 100000");
  EXPECT_EQ(cli_error("batch", "99999999999"), "--batch: expected an integer in [1, 65536], got 99999999999");
  EXPECT_EQ(cli_error("context", "99999999999"), "--context: expected an integer in [2, 1048576], got 99999999999");
  EXPECT_EQ(cli_error("layers", "0"), "--layers: expected an integer in [1, 1024], got 0");
  EXPECT_EQ(cli_error("device", "tpu"), "--device: expected 'cpu' or 'cuda', got 'tpu'");
  EXPECT_EQ(cli_error("steps", "12x"), "--steps: expected an integer, got '12x'");
  EXPECT_EQ(cli_error("attention", "flash"),
            "--attention: expected one of 'graph', 'dense', 'dense_naive', got 'flash'");
  for (const char* dense : {"dense", "dense_naive"}) {
    try {
      train_config_from_options({{"attention", dense}, {"pattern", "bpt"}});
      ADD_FAILURE() << dense << " with a pattern was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()),
                fmt::format("--attention {} is a dense baseline; it takes no --pattern (got 'bpt')", dense));
    }
  }
  auto scenario_error = [](const std::string& text) {
    try {
      scenario_from_json(json::parse(text), "absurd.json");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(scenario_error(R"({"kind": "train", "train": {"batch": 100000000},
                               "axes": {"patterns": [{"name": "bpt"}], "lengths": [64]}})"),
            "absurd.json: /train/batch: expected an integer in [1, 65536], got 100000000");
  EXPECT_EQ(scenario_error(R"({"kind": "model", "model": {"dim": 1048576},
                               "axes": {"patterns": [{"name": "bpt"}], "lengths": [64]}})"),
            "absurd.json: /model/dim: expected an integer in [1, 65536], got 1048576");
  EXPECT_EQ(scenario_error(R"({"kind": "attention", "axes": {"patterns": [{"name": "bpt"}], "lengths": [64],
                               "threads": [1, 5000]}})"),
            "absurd.json: /axes/threads/1: expected an integer in [0, 1024], got 5000");
  EXPECT_EQ(scenario_error(R"({"kind": "model", "model": {"positions": "rotary"},
                               "axes": {"patterns": [{"name": "bpt"}], "lengths": [64]}})"),
            "absurd.json: /model/positions: expected one of \"relative\", \"absolute\", got \"rotary\"");
}

TEST(ConfigFields, HelpListsEveryOptionWithItsRange) {
  const std::string help = train_options_help();
  for (const std::string& flag : train_option_names()) EXPECT_NE(help.find("--" + flag), std::string::npos) << flag;
  EXPECT_NE(help.find("--threads N"), std::string::npos);
  EXPECT_NE(help.find("(default 0; in [0, 1024])"), std::string::npos) << help;
  const std::set<std::string> names(train_option_names().begin(), train_option_names().end());
  EXPECT_EQ(names.size(), train_option_names().size());  // no option twice
}

// scenarios/schema.json is what `sparsebench schema` prints from the tables.
TEST(ShippedScenarios, SchemaIsGeneratedFromTheFieldTables) {
  const json committed = read_scenario_file(std::string(SB_SOURCE_DIR) + "/scenarios/schema.json");
  EXPECT_EQ(committed, scenario_schema()) << "regenerate it: sparsebench schema > scenarios/schema.json";
}

}  // namespace
