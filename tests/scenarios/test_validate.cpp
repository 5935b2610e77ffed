// Scenario validation: one test per kind of error, each asserting the exact "FILE: /pointer: message" text.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "harness/scenario/scenario.h"
#include "common/error.h"

using namespace sb;

namespace {

// The error message validate_scenario gives for `text` (named `file`), or "" when it passes.
std::string error_of(const std::string& text, const std::string& file = "fig7.json") {
  try {
    scenario_from_json(parse_scenario_text(text, file), file);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

const char* kBase = R"({"kind": "attention", "axes": {"patterns": [{"name": "dense"}, {"name": "window", "w": 8},
  {"name": "bpt", "k": 4}], "lengths": [64]}})";

json base() { return json::parse(kBase); }

std::string error_of_doc(const json& doc, const std::string& file = "fig7.json") { return error_of(doc.dump(), file); }

}  // namespace

TEST(Validate, BaseScenarioPasses) { EXPECT_EQ(error_of(kBase), ""); }

TEST(Validate, ParameterOutOfRangeNamesPointer) {
  json d = base();
  d["axes"]["patterns"][2]["k"] = 0;
  EXPECT_EQ(error_of_doc(d), "fig7.json: /axes/patterns/2/k: expected an integer >= 1, got 0");
}

TEST(Validate, ParameterListElementOutOfRange) {
  json d = base();
  d["axes"]["patterns"][1]["w"] = json::array({4, 16, -3});
  EXPECT_EQ(error_of_doc(d), "fig7.json: /axes/patterns/1/w/2: expected an integer >= 1, got -3");
}

TEST(Validate, BoundedParameterShowsRange) {
  json d = base();
  d["axes"]["patterns"][2]["clip"] = 31;
  EXPECT_EQ(error_of_doc(d), "fig7.json: /axes/patterns/2/clip: expected an integer in [1, 30], got 31");
}

TEST(Validate, MalformedJsonGivesLineAndColumn) {
  const std::string text = "{\n  \"kind\": \"attention\",\n  \"axes\": {,}\n}";
  const std::string msg = error_of(text, "bad.json");
  EXPECT_EQ(msg.rfind("bad.json:3:12: malformed JSON: ", 0), 0u) << msg;
}

TEST(Validate, TruncatedJsonGivesLineAndColumn) {
  const std::string msg = error_of("{\"kind\": \"model\",\n\"axes\": [1, 2", "cut.json");
  EXPECT_EQ(msg.rfind("cut.json:2:", 0), 0u) << msg;
  EXPECT_NE(msg.find("malformed JSON"), std::string::npos) << msg;
}

TEST(Validate, NumberOverflowIsMalformedJsonWithPosition) {
  const std::string msg = error_of("{\"kind\": \"attention\",\n \"repeats\": 2e99999}", "big.json");
  EXPECT_EQ(msg, "big.json:2:13: malformed JSON: number overflow parsing '2e99999' (at /repeats)");
  const std::string deep = error_of("{\"kind\": \"attention\", \"axes\": {\"patterns\": [{\"name\": \"window\"}],\n"
                                    " \"lengths\": [16, 1e400]}}", "deep.json");
  EXPECT_EQ(deep, "deep.json:2:18: malformed JSON: number overflow parsing '1e400' (at /axes/lengths/1)");
}

TEST(Validate, UnreadableFileNamesIt) {
  try {
    load_scenario("/nonexistent/dir/fig9.json", {});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "/nonexistent/dir/fig9.json: cannot open scenario file");
  }
}

TEST(Validate, UnknownTopLevelKey) {
  json d = base();
  d["repeat"] = 3;
  EXPECT_EQ(error_of_doc(d).rfind("fig7.json: /repeat: unknown key; expected one of: name, description, kind", 0), 0u)
      << error_of_doc(d);
}

TEST(Validate, UnknownNestedKey) {
  json d = base();
  d["axes"]["length"] = json::array({1});
  EXPECT_EQ(error_of_doc(d).rfind("fig7.json: /axes/length: unknown key; expected one of: patterns, lengths", 0), 0u)
      << error_of_doc(d);
}

TEST(Validate, WrongTypeShowsValue) {
  json d = base();
  d["repeats"] = "3";
  EXPECT_EQ(error_of_doc(d), "fig7.json: /repeats: expected an integer in [1, 100000], got \"3\"");
  d = base();
  d["axes"]["lengths"] = json::array({64, 12.5});
  EXPECT_EQ(error_of_doc(d), "fig7.json: /axes/lengths/1: expected an integer in [1, 16777216], got 12.5");
  d = base();
  d["attention"] = {{"relations", 1}};
  EXPECT_EQ(error_of_doc(d), "fig7.json: /attention/relations: expected true or false, got 1");
}

TEST(Validate, MissingRequiredKey) {
  json d = base();
  d["axes"].erase("lengths");
  EXPECT_EQ(error_of_doc(d), "fig7.json: /axes/lengths: required key is missing");
  d = base();
  d.erase("kind");
  EXPECT_EQ(error_of_doc(d), "fig7.json: /kind: required key is missing");
}

TEST(Validate, UnknownEnumValue) {
  json d = base();
  d["kind"] = "benchmark";
  EXPECT_EQ(error_of_doc(d), "fig7.json: /kind: expected one of \"attention\", \"model\", \"train\", got \"benchmark\"");
  d = base();
  d["axes"]["modes"] = json::array({"forward", "backward"});
  EXPECT_EQ(error_of_doc(d),
            "fig7.json: /axes/modes/1: expected one of \"forward\", \"forward_backward\", got \"backward\"");
}

TEST(Validate, UnknownPattern) {
  json d = base();
  d["axes"]["patterns"][0]["name"] = "bptt";
  EXPECT_EQ(error_of_doc(d).rfind("fig7.json: /axes/patterns/0/name: unknown pattern 'bptt'; valid patterns: dense", 0), 0u)
      << error_of_doc(d);
}

TEST(Validate, UnknownPatternParameter) {
  json d = base();
  d["axes"]["patterns"][2]["w"] = 4;
  EXPECT_EQ(error_of_doc(d).rfind("fig7.json: /axes/patterns/2/w: unknown parameter of pattern bpt; its parameters: k, clip", 0),
            0u)
      << error_of_doc(d);
}

TEST(Validate, EmptyAxis) {
  json d = base();
  d["axes"]["lengths"] = json::array();
  EXPECT_EQ(error_of_doc(d), "fig7.json: /axes/lengths: expected a non-empty array");
  d = base();
  d["axes"]["patterns"] = json::array();
  EXPECT_EQ(error_of_doc(d), "fig7.json: /axes/patterns: expected a non-empty array of pattern entries, got []");
}

TEST(Validate, ImpossibleValues) {
  json d = base();
  d["kind"] = "model";
  d["model"] = {{"dim", 512}, {"heads", 7}};
  EXPECT_EQ(error_of_doc(d), "fig7.json: /model/heads: expected a divisor of /model/dim (512), got 7");
  d = base();
  d["memory_budget_mb"] = 0;
  EXPECT_EQ(error_of_doc(d), "fig7.json: /memory_budget_mb: expected a number > 0 and < 1000000000, got 0");
  d = base();
  d["axes"]["tokens"] = 8192;
  d["axes"]["batch"] = 2;
  EXPECT_EQ(error_of_doc(d), "fig7.json: /axes/batch: give either /axes/tokens or /axes/batch, not both");
  d = base();
  d["kind"] = "train";
  d["axes"]["causal"] = false;
  EXPECT_EQ(error_of_doc(d), "fig7.json: /axes/causal: language-model training is causal: expected true, got false");
  d = base();
  d["axes"]["patterns"][1]["attention"] = "dense";
  EXPECT_EQ(error_of_doc(d).rfind("fig7.json: /axes/patterns/1/attention: the dense op computes dense attention only", 0), 0u)
      << error_of_doc(d);
  d["axes"]["patterns"][1]["attention"] = "dense_naive";
  EXPECT_EQ(error_of_doc(d).rfind("fig7.json: /axes/patterns/1/attention: the dense op computes dense attention only", 0), 0u)
      << error_of_doc(d);
  d["axes"]["patterns"][1]["attention"] = "flash";
  EXPECT_EQ(error_of_doc(d).rfind("fig7.json: /axes/patterns/1/attention: expected one of", 0), 0u) << error_of_doc(d);
}

// Training sizes its batch from /train/batch or from tokens per step over the context, never both.
TEST(Validate, TrainBatchFromOneSource) {
  json d = base();
  d["kind"] = "train";
  d["axes"].erase("modes");
  d["axes"]["causal"] = true;
  d["axes"]["batch"] = 2;
  EXPECT_EQ(error_of_doc(d), "fig7.json: /axes/batch: not used by kind \"train\"; set /train/batch or /axes/tokens");
  d["axes"].erase("batch");
  d["axes"]["tokens"] = 4096;
  d["train"] = {{"batch", 2}};
  EXPECT_EQ(error_of_doc(d),
            "fig7.json: /axes/tokens: give either /axes/tokens (batch = tokens / context) or /train/batch, not both");
  d["train"].erase("batch");
  EXPECT_EQ(error_of_doc(d), "");
}

TEST(Validate, SectionForOtherKind) {
  json d = base();
  d["train"] = {{"steps", 10}};
  EXPECT_EQ(error_of_doc(d), "fig7.json: /train: only used by kind \"train\", this is \"attention\"");
}

TEST(Validate, DegreeEntries) {
  json d = base();
  d["axes"]["patterns"][0]["degree"] = 16;
  EXPECT_EQ(error_of_doc(d), "fig7.json: /axes/patterns/0/degree: pattern dense has no parameter to solve for a degree");
  d = base();
  d["axes"]["patterns"][2]["degree"] = json::array({24, 0});
  EXPECT_EQ(error_of_doc(d), "fig7.json: /axes/patterns/2/degree/1: expected a number > 0 and < 16777216, got 0");
  d = base();
  d["axes"]["patterns"][2]["degree"] = 24;
  d["axes"]["patterns"][2]["solve"] = "k";
  EXPECT_EQ(error_of_doc(d), "fig7.json: /axes/patterns/2/k: is solved from \"degree\"; do not give it as well");
  d = base();
  d["axes"]["patterns"][1].erase("w");
  d["axes"]["patterns"][1]["degree"] = 24;
  d["axes"]["patterns"][1]["solve"] = "k";
  EXPECT_EQ(error_of_doc(d), "fig7.json: /axes/patterns/1/solve: pattern window has no parameter 'k'; its parameters: w");
}

TEST(Validate, SeedsAxis) {
  const std::string train = R"({"kind": "train", "axes": {"patterns": [{"name": "bpt"}], "lengths": [64], "seeds": )";
  EXPECT_EQ(error_of(train + "[1, 2]}}"), "");
  EXPECT_EQ(error_of(train + "[1, 2, 1]}}"), "fig7.json: /axes/seeds/2: seed 1 appears twice");
  EXPECT_EQ(error_of(train + "[]}}"), "fig7.json: /axes/seeds: expected a non-empty array");
  EXPECT_EQ(error_of(train + "[-1]}}"), "fig7.json: /axes/seeds/0: expected an integer >= 0, got -1");
  EXPECT_EQ(error_of(R"({"kind": "train", "seed": 4, "axes": {"patterns": [{"name": "bpt"}], "lengths": [64],
      "seeds": [1]}})"), "fig7.json: /axes/seeds: give either /seed or /axes/seeds, not both");
  EXPECT_EQ(error_of(R"({"kind": "attention", "axes": {"patterns": [{"name": "bpt"}], "lengths": [64], "seeds": [1]}})"),
            "fig7.json: /axes/seeds: only used by kind \"train\" (timing kinds repeat instead), this is \"attention\"");
}

TEST(Validate, DtypesAxis) {
  const std::string attn = R"({"kind": "attention", "axes": {"patterns": [{"name": "bpt"}], "lengths": [64], "dtypes": )";
  EXPECT_EQ(error_of(attn + R"(["float32", "bfloat16", "float16", "float64"]}})"), "");
  EXPECT_EQ(error_of(attn + R"("bfloat16"}})"), "");
  EXPECT_EQ(error_of(attn + R"(["bfloat16", "bfloat16"]}})"), "fig7.json: /axes/dtypes/1: dtype bfloat16 appears twice");
  EXPECT_EQ(error_of(attn + R"(["fp8"]}})"),
            "fig7.json: /axes/dtypes/0: expected one of \"float32\", \"float64\", \"bfloat16\", \"float16\", got \"fp8\"");
  EXPECT_EQ(error_of(R"({"kind": "train", "train": {"dtype": "float16"}, "axes": {"patterns": [{"name": "bpt"}],
      "lengths": [64], "dtypes": ["bfloat16"]}})"),
            "fig7.json: /axes/dtypes: give either /train/dtype or /axes/dtypes, not both");
}

TEST(Validate, NameMustBeADirectoryName) {
  json d = base();
  d["name"] = "../up";
  EXPECT_EQ(error_of_doc(d).rfind("fig7.json: /name: expected letters, digits", 0), 0u) << error_of_doc(d);
}

TEST(Override, SetsNestedValuesAndLists) {
  json d = base();
  apply_override(d, "axes/lengths=[128,256]");
  apply_override(d, "/repeats=2");
  apply_override(d, "axes/patterns/1/w=[4,8]");
  apply_override(d, "model/layers=2");  // creates the object
  apply_override(d, "description=plain words");
  EXPECT_EQ(d["axes"]["lengths"], json::parse("[128,256]"));
  EXPECT_EQ(d["repeats"], 2);
  EXPECT_EQ(d["axes"]["patterns"][1]["w"], json::parse("[4,8]"));
  EXPECT_EQ(d["model"]["layers"], 2);
  EXPECT_EQ(d["description"], "plain words");
}

TEST(Override, BadPathsAreErrors) {
  json d = base();
  try {
    apply_override(d, "kind/x=1");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "--set kind/x: /kind is not an object or array");
  }
  try {
    apply_override(d, "axes/patterns/9/k=1");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "--set axes/patterns/9/k: /axes/patterns has no element '9'");
  }
  EXPECT_THROW(apply_override(d, "novalue"), Error);
}

TEST(Override, ValidationRunsAfterOverrides) {
  const std::string path = (std::filesystem::temp_directory_path() / "sb_override_fig7.json").string();
  std::ofstream(path) << kBase;
  EXPECT_NO_THROW(load_scenario(path, {"repeats=2"}));
  try {
    load_scenario(path, {"axes/patterns/2/k=0"});
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), path + ": /axes/patterns/2/k: expected an integer >= 1, got 0");
  }
  std::filesystem::remove(path);
}

// Every shipped scenario file validates.
TEST(ShippedScenarios, AllValidate) {
  const std::filesystem::path dir = std::filesystem::path(SB_SOURCE_DIR) / "scenarios";
  int checked = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (entry.path().extension() != ".json" || name == "schema.json") continue;
    EXPECT_NO_THROW(load_scenario(entry.path().string(), {})) << name;
    ++checked;
  }
  EXPECT_GE(checked, 6);
}

