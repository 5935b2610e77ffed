// Guards against hostile input and lost writes, without LibTorch: JSON depth and duplicate keys, value excerpts,
// durable appends to a full device, results-root confinement, resume comparisons, failure reasons in records.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <vector>
#include <string>

#include "common/durable_file.h"
#include "common/json_guard.h"
#include "harness/lm/checkpoint_format.h"
#include "common/config_changes.h"
#include "harness/scenario/paths.h"
#include "harness/scenario/records.h"
#include "harness/scenario/scenario.h"
#include "harness/scenario/sweep.h"
#include "common/error.h"
#include "tests/scenarios/error_of.h"
#include "tests/scenarios/temp_dir.h"

using namespace sb;
using sb::test::error_of;
using sb::test::TempDir;

namespace {

std::string nested(int depth, const std::string& inner = "1") {
  return std::string(depth, '[') + inner + std::string(depth, ']');
}

}  // namespace

TEST(JsonGuard, DepthIsBoundedWhereverTheValueSits) {
  EXPECT_EQ(error_of([] { check_json_text(nested(kMaxJsonDepth), "f.json"); }), "");
  EXPECT_EQ(error_of([] { check_json_text(nested(kMaxJsonDepth + 1), "f.json"); }),
            "f.json:1:65: JSON nested deeper than 64 levels");
  EXPECT_EQ(error_of([] { check_json_text("{\"a\":\n  " + nested(100000) + "}", "f.json"); }),
            "f.json:2:66: JSON nested deeper than 64 levels");
  // Brackets inside strings are text, not nesting.
  EXPECT_EQ(error_of([] { check_json_text("{\"a\": \"" + std::string(1000, '[') + "\\\"\"}", "f.json"); }), "");
  // Unbalanced or cut text is left for the parser.
  EXPECT_EQ(error_of([] { check_json_text("]]]}}{\"", "f.json"); }), "");
}

TEST(JsonGuard, DuplicateKeysNamedByPointer) {
  EXPECT_EQ(error_of([] { check_json_text(R"({"a": {"b": [1, {"c": 1, "c": 2}]}})", "f.json"); }),
            "f.json: /a/b/1/c: duplicate key \"c\" (line 1, column 26); each key may appear once");
  EXPECT_EQ(error_of([] { check_json_text(R"({"a": {"x": 1}, "b": {"x": 1}, "c": [{"x": 1}, {"x": 2}]})", "f"); }),
            "");
  EXPECT_EQ(error_of([] { check_json_text(R"({"a": 1, "a": 2})", "f", false); }), "");
  EXPECT_EQ(error_of([] { parse_json_guarded("{\"a\": }", "g.json"); }).rfind("g.json: malformed JSON:", 0), 0u);
}

TEST(JsonGuard, ExcerptIsShortForAnyValue) {
  // Built by nlohmann itself (its parser and destructor are not recursive); dump() would overflow the stack.
  const nlohmann::json deep = nlohmann::json::parse(nested(200000));
  const std::string e = json_excerpt(deep, 60);
  EXPECT_LE(e.size(), 60u);
  EXPECT_EQ(e.substr(0, 5), "[[[[[");
  EXPECT_EQ(json_excerpt(nlohmann::json(std::string(100000, 'x')), 20), "\"xxxxxxxxxxxxxxxx...");
  EXPECT_EQ(json_excerpt(nlohmann::json::parse(R"({"a": [1, 2], "b": "c"})")), R"({"a":[1,2],"b":"c"})");
  EXPECT_EQ(json_excerpt(nlohmann::json(1e300)), "1e+300");
}

TEST(DurableFile, AppendToAFullDeviceThrowsNamingTheFile) {
  EXPECT_EQ(error_of([] { append_line_durable("/dev/full", "{}"); }),
            "cannot append to '/dev/full': No space left on device");
  TempDir dir("durable");
  append_line_durable(dir.file("m.jsonl"), "{\"a\":1}");
  append_line_durable(dir.file("m.jsonl"), "{\"a\":2}");
  write_file_atomic(dir.file("w.json"), "x");
  EXPECT_EQ(read_records(dir.file("m.jsonl")).records.size(), 2u);
  EXPECT_NE(error_of([&] { write_file_atomic(dir.file("nodir/w.json"), "x"); }).find("nodir/w.json.tmp"),
            std::string::npos);
}

TEST(Paths, RunDirectoriesStayUnderTheRoot) {
  EXPECT_EQ(path_under_root("results", {"fig7", "20240101-abc"}, "scenario name"), "results/fig7/20240101-abc");
  for (const char* bad : {"..", ".", "", "a/../../b"}) {
    EXPECT_EQ(error_of([&] { path_under_root("results", {bad, "x"}, "scenario name"); }),
              fmt::format("scenario name '{}' would place the run outside the results directory 'results'", bad));
  }
  EXPECT_EQ(error_of([] { latest_run_dir("results", ".."); }).rfind("scenario name '..'", 0), 0u);
}

TEST(RunConfig, ChangesListedByKeyAndRefusedUnlessAllowed) {
  const nlohmann::json a = {{"lr", 0.003}, {"seed", 3}, {"model", {{"dim", 16}}}, {"out_dir", "x"}};
  nlohmann::json b = a;
  b["lr"] = 0.1;
  b["model"]["dim"] = 32;
  b["out_dir"] = "y";
  b["new"] = true;
  const auto c = config_changes(a, b, {"out_dir"});
  EXPECT_EQ(describe_changes(c), "lr 0.003 -> 0.1, model/dim 16 -> 32, new (unset) -> true");
  EXPECT_EQ(changes_json(c)["lr"], (nlohmann::json{{"before", 0.003}, {"after", 0.1}}));
  EXPECT_NE(error_of([&] { refuse_changes(c, false, "--resume", "ck.pt"); }).find("add --allow-changes"),
            std::string::npos);
  EXPECT_EQ(error_of([&] { refuse_changes(c, true, "--resume", "ck.pt"); }), "");
  EXPECT_TRUE(config_changes(a, a).empty());
}

// A failed point records the error's first lines, never a C++ stack trace.
TEST(Sweep, FailureReasonsCarryNoStackTrace) {
  TempDir dir("reason");
  const Scenario s = scenario_from_json(
      nlohmann::json::parse(R"({"kind": "attention", "axes": {"patterns": [{"name": "window", "w": 2}], "lengths": [8]}})"),
      "unit.json");
  SweepOptions opt;
  opt.run_dir = dir.file("run");
  opt.export_graphs = false;
  std::string trace = "shape mismatch in matmul\nException raised from check at aten/src/x.cpp:12\nframe #0: ";
  for (int i = 0; i < 40; ++i) trace += fmt::format("frame #{}: 0x{:x} in libtorch_cpu.so\n", i, 4096 * i);
  run_sweep(s, expand_scenario(s), opt, [&](const Scenario&, const Point&, const std::string&, json&) {
    throw std::runtime_error(trace);
  });
  const RecordFile r = read_records(dir.file("run/records.jsonl"));
  ASSERT_EQ(r.records.size(), 1u);
  EXPECT_EQ(r.records[0]["status"], "failed");
  EXPECT_EQ(r.records[0]["reason"], "shape mismatch in matmul");
}

namespace {

// A two-tensor checkpoint payload: "a" float32 [2, 3] and "b" int64 [4].
std::string sample_payload() {
  sb::CheckpointWriter w;
  const float a[6] = {1, 2, 3, 4, 5, 6};
  const int64_t b[4] = {7, 8, 9, 10};
  w.add("a", "float32", {2, 3}, a, sizeof a);
  w.add("b", "int64", {4}, b, sizeof b);
  return w.finish({{"step", 3}});
}

}  // namespace

TEST(CheckpointFormat, RoundTripKeepsEveryByte) {
  const sb::CheckpointBody body =
      sb::parse_checkpoint_body(sb::checkpoint_payload(sb::checkpoint_file_bytes(sample_payload()), "c.pt"), "c.pt");
  ASSERT_EQ(body.tensors.size(), 2u);
  EXPECT_EQ(body.meta.at("step"), 3);
  const sb::CheckpointTensor* b = body.find("b");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->shape, std::vector<int64_t>({4}));
  int64_t values[4];
  std::memcpy(values, body.bytes(*b), sizeof values);
  EXPECT_EQ(values[3], 10);
  EXPECT_EQ(body.find("c"), nullptr);
}

TEST(CheckpointFormat, ForgedTablesAreRefusedNamingTheField) {
  const std::string good = sample_payload();
  const uint64_t hlen = static_cast<unsigned char>(good[0]) | (static_cast<uint64_t>(static_cast<unsigned char>(good[1])) << 8);
  nlohmann::json header = nlohmann::json::parse(good.substr(8, hlen));
  const std::string data = good.substr(8 + hlen);
  auto with = [&](const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json h = header;
    edit(h);
    const std::string text = h.dump();
    std::string out(8, '\0');
    for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((uint64_t{text.size()} >> (8 * i)) & 0xff);
    return out + text + data;
  };
  auto refused = [](const std::string& payload, const std::string& says) {
    try {
      (void)sb::parse_checkpoint_body(payload, "f.pt");
    } catch (const sb::Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("'f.pt'"), std::string::npos) << what;
      EXPECT_NE(what.find(says), std::string::npos) << what;
      return;
    }
    ADD_FAILURE() << "accepted a payload that should say " << says;
  };
  refused(with([](nlohmann::json& h) { h["tensors"][1]["offset"] = 24 + 1; }), "outside");
  refused(with([](nlohmann::json& h) { h["tensors"][0]["nbytes"] = 20; }), "nbytes");
  refused(with([](nlohmann::json& h) { h["tensors"][0]["shape"] = {1u << 30, 1u << 30}; }), "2^44");
  refused(with([](nlohmann::json& h) { h["tensors"][0]["shape"] = {-2, -3}; }), "shape");
  refused(with([](nlohmann::json& h) { h["tensors"][0]["dtype"] = "bfloat16"; }), "dtype");
  refused(with([](nlohmann::json& h) { h["tensors"][1]["name"] = "a"; }), "appears twice");
  refused(with([](nlohmann::json& h) { h.erase("meta"); }), "'meta'");
  refused(good.substr(0, 5), "header length");
  refused(std::string(8, '\xff') + good.substr(8), "header length");
  std::string bad_json = good;
  bad_json[8] = '[';
  refused(bad_json, "malformed JSON");
  EXPECT_THROW((void)sb::checkpoint_payload("SBCKPT1\n" + std::string(65, '0'), "old.pt"), sb::Error);
}

TEST(Overrides, NumbersOutOfRangeAreRefusedNamingTheOption) {
  nlohmann::json doc = {{"axes", {{"lengths", {16}}}}};
  const std::string what = error_of([&] { apply_override(doc, "axes/lengths=[511e1024]"); });
  EXPECT_NE(what.find("--set axes/lengths"), std::string::npos) << what;
  EXPECT_NE(what.find("out of range"), std::string::npos) << what;
  EXPECT_EQ(doc["axes"]["lengths"][0], 16);
}
