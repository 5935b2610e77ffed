// Records: append/read round trip, crash safety (truncated last line), CSV, SHA-256, and the sweep loop's resume.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "common/sha256.h"
#include "harness/scenario/records.h"
#include "harness/scenario/sweep.h"
#include "common/error.h"
#include "tests/scenarios/temp_dir.h"

using namespace sb;
namespace fs = std::filesystem;
using sb::test::TempDir;

namespace {

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

Scenario small_scenario(const std::string& extra = "") {
  return scenario_from_json(json::parse(R"({"kind": "attention", "name": "unit", )" + extra +
                                        R"("axes": {"patterns": [{"name": "window", "w": [2, 3]}, {"name": "dense"}],
      "lengths": [8, 16], "causal": [false, true]}})"),
                            "unit.json");
}

}  // namespace

TEST(Records, RoundTrip) {
  TempDir dir("roundtrip");
  const std::vector<json> in = {{{"point", "a"}, {"x", 1.5}, {"samples_s", {0.1, 0.2}}},
                                {{"point", "b"}, {"text", "comma, \"quote\"\nline"}},
                                {{"point", "c"}, {"graph", {{"n_edges", 10}}}}};
  {
    RecordWriter w(dir.file("r.jsonl"));
    for (const json& r : in) w.append(r);
  }
  const RecordFile out = read_records(dir.file("r.jsonl"));
  EXPECT_TRUE(out.problems.empty());
  EXPECT_EQ(out.records, in);
  // One line per record, each ending in a newline.
  const std::string text = slurp(dir.file("r.jsonl"));
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 3);
  EXPECT_EQ(text.back(), '\n');
}

TEST(Records, TruncatedLastLineIsIgnoredReportedAndCutOnAppend) {
  TempDir dir("trunc");
  const std::string path = dir.file("r.jsonl");
  {
    RecordWriter w(path);
    w.append({{"point", "a"}});
    w.append({{"point", "b"}});
  }
  // A crash in the middle of a write leaves a partial line without its newline.
  std::ofstream(path, std::ios::app) << R"({"point": "c", "samp)";
  RecordFile r = read_records(path);
  ASSERT_EQ(r.records.size(), 2u);
  ASSERT_EQ(r.problems.size(), 1u);
  EXPECT_NE(r.problems[0].find("line 3: truncated last line ignored"), std::string::npos) << r.problems[0];
  {
    RecordWriter w(path);  // cuts the partial line
    w.append({{"point", "c"}});
  }
  r = read_records(path);
  EXPECT_TRUE(r.problems.empty());
  ASSERT_EQ(r.records.size(), 3u);
  EXPECT_EQ(r.records[2]["point"], "c");
}

TEST(Records, BrokenMiddleLineIsReported) {
  TempDir dir("broken");
  std::ofstream(dir.file("r.jsonl")) << "{\"point\": \"a\"}\nnot json\n{\"point\": \"b\"}\n";
  const RecordFile r = read_records(dir.file("r.jsonl"));
  EXPECT_EQ(r.records.size(), 2u);
  ASSERT_EQ(r.problems.size(), 1u);
  EXPECT_NE(r.problems[0].find("line 2: not a JSON record"), std::string::npos);
}

TEST(Records, MissingFileHasNoRecords) {
  const RecordFile r = read_records("/nonexistent/records.jsonl");
  EXPECT_TRUE(r.records.empty());
  EXPECT_TRUE(r.problems.empty());
}

TEST(Records, CsvFlattensAndQuotes) {
  TempDir dir("csv");
  write_records_csv({{{"point", "a"}, {"graph", {{"n_edges", 10}}}, {"samples_s", {0.5, 0.25}}},
                     {{"point", "b,c"}, {"reason", "say \"no\""}, {"degree_target", nullptr}}},
                    dir.file("r.csv"));
  EXPECT_EQ(slurp(dir.file("r.csv")),
            "graph.n_edges,point,samples_s,degree_target,reason\n"
            "10,a,0.5;0.25,,\n"
            ",\"b,c\",,,\"say \"\"no\"\"\"\n");
}

TEST(Records, Sha256KnownVectors) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex(std::string(1000, 'a')),
            "41edece42d63e8d9bf515a9ba6932e1c20cbc9f5a5d134645adb5db1b9737ea3");
}

TEST(Records, MedianOfOddAndEven) {
  EXPECT_DOUBLE_EQ(median_of({3, 1, 2}), 2.0);
  EXPECT_DOUBLE_EQ(median_of({4, 1, 3, 2}), 2.5);
}

// The sweep loop with a measuring function that counts calls and fails one point on purpose.
TEST(Sweep, RecordsEveryPointAndSurvivesAFailingOne) {
  TempDir dir("sweep");
  const Scenario s = small_scenario();
  const std::vector<Point> pts = expand_scenario(s);
  ASSERT_EQ(pts.size(), 12u);
  int calls = 0;
  auto measure = [&](const Scenario&, const Point& p, const std::string&, json& r) {
    ++calls;
    if (p.label == "window(w=3)" && p.length() == 16 && p.causal()) throw Error("simulated out of memory");
    r["tokens_per_s"] = 1000.0 * p.length();
  };
  SweepOptions opt;
  opt.run_dir = dir.file("run");
  opt.environment = {{"commit", "abc"}};
  const SweepSummary sum = run_sweep(s, pts, opt, measure);
  EXPECT_EQ(calls, 12);
  EXPECT_EQ(sum.ok, 11);
  EXPECT_EQ(sum.failed, 1);
  const RecordFile r = read_records(dir.file("run/records.jsonl"));
  ASSERT_EQ(r.records.size(), 12u);
  int failed = 0;
  for (const json& rec : r.records) {
    if (rec["status"] == "failed") {
      ++failed;
      EXPECT_EQ(rec["reason"], "simulated out of memory");
    } else {
      EXPECT_EQ(rec["status"], "ok");
      EXPECT_EQ(rec["tokens_per_s"], 1000.0 * rec["length"].get<double>());
    }
    EXPECT_TRUE(rec["graph"].contains("fingerprint"));
  }
  EXPECT_EQ(failed, 1);
  const json run = json::parse(slurp(dir.file("run/run.json")));
  EXPECT_EQ(run["commit"], "abc");
  EXPECT_EQ(run["scenario_sha256"], sha256_hex(s.doc.dump()));
  EXPECT_EQ(run["points"], 12);
  EXPECT_TRUE(fs::exists(dir.file("run/records.csv")));
  EXPECT_TRUE(fs::exists(dir.file("run/graphs/window-w2-causal.json")));
  const json g = json::parse(slurp(dir.file("run/graphs/window-w2-causal.json")));
  EXPECT_EQ(g["n"], 64);
  EXPECT_EQ(g["edges"].size(), static_cast<size_t>(build_pattern("window", 64, true, {{"w", 2}}).n_edges()));
  // A second run into the same directory without --resume is refused.
  EXPECT_THROW(run_sweep(s, pts, opt, measure), Error);
}

TEST(Sweep, ResumeSkipsRecordedPointsAfterACrash) {
  TempDir dir("resume");
  const Scenario s = small_scenario();
  const std::vector<Point> pts = expand_scenario(s);
  std::map<std::string, int> calls;
  auto measure = [&](const Scenario&, const Point& p, const std::string&, json& r) {
    ++calls[p.id];
    r["tokens_per_s"] = 1.0;
  };
  SweepOptions opt;
  opt.run_dir = dir.file("run");
  opt.export_graphs = false;
  // First run over the first 5 points only, then a crash that leaves half of a sixth line.
  run_sweep(s, std::vector<Point>(pts.begin(), pts.begin() + 5), opt, measure);
  const std::string path = dir.file("run/records.jsonl");
  std::ofstream(path, std::ios::app) << "{\"point\": \"" << pts[5].id << "\", \"sta";
  opt.resume = true;
  opt.environment = {{"cpu", "CPU B (AVX2)"}, {"simd_target", "AVX2"}, {"commit", "c2"}, {"blas", "unused"}};
  const SweepSummary sum = run_sweep(s, pts, opt, measure);
  EXPECT_EQ(sum.already, 5);
  EXPECT_EQ(sum.ok, 7);
  for (const Point& p : pts) EXPECT_EQ(calls[p.id], 1) << p.id;  // nothing measured twice
  const RecordFile r = read_records(path);
  EXPECT_TRUE(r.problems.empty());
  ASSERT_EQ(r.records.size(), pts.size());
  std::set<std::string> ids;
  for (const json& rec : r.records) ids.insert(rec["point"].get<std::string>());
  EXPECT_EQ(ids.size(), pts.size());
  const json resumed = json::parse(slurp(dir.file("run/run.json")))["resumed"];
  ASSERT_EQ(resumed.size(), 1u);
  // The resumed part names the machine and build that ran it, which may differ from the first part's.
  EXPECT_EQ(resumed[0]["cpu"], "CPU B (AVX2)");
  EXPECT_EQ(resumed[0]["simd_target"], "AVX2");
  EXPECT_EQ(resumed[0]["commit"], "c2");
  EXPECT_FALSE(resumed[0].contains("blas"));
}

TEST(Sweep, OverBudgetPointsAreRecordedSkippedNotMeasured) {
  TempDir dir("budget");
  const Scenario s = scenario_from_json(json::parse(R"({"kind": "attention", "memory_budget_mb": 0.05,
      "attention": {"heads": 1, "head_dim": 8},
      "axes": {"patterns": [{"name": "dense", "attention": "dense"}], "lengths": [8, 128]}})"), "b.json");
  int calls = 0;
  SweepOptions opt;
  opt.run_dir = dir.file("run");
  const SweepSummary sum = run_sweep(s, expand_scenario(s), opt, [&](const Scenario&, const Point& p, const std::string&, json&) {
    ++calls;
    EXPECT_EQ(p.length(), 8);
  });
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(sum.skipped, 1);
  const RecordFile r = read_records(dir.file("run/records.jsonl"));
  ASSERT_EQ(r.records.size(), 2u);
  EXPECT_EQ(r.records[1]["status"], "skipped");
  EXPECT_EQ(r.records[1]["reason"].get<std::string>().rfind("analytic memory ", 0), 0u);
  EXPECT_FALSE(r.records[1].contains("samples_s"));
}

TEST(Sweep, LatestRunDirPicksNewestTimestamp) {
  TempDir dir("latest");
  for (const char* run : {"20260101-000000-aaaa", "20260102-000000-bbbb"}) {
    fs::create_directories(dir.path / "quick" / run);
    std::ofstream(dir.path / "quick" / run / "run.json") << "{}\n";
  }
  // Directories that are not runs (the shards-<hash> directory of a sharded sweep) are passed over.
  fs::create_directories(dir.path / "quick" / "shards-0123456789ab" / "shard-0-of-2");
  fs::create_directories(dir.path / "quick" / "20260103-000000-cccc");
  EXPECT_EQ(latest_run_dir(dir.path.string(), "quick"), (dir.path / "quick" / "20260102-000000-bbbb").string());
  EXPECT_EQ(latest_run_dir(dir.path.string(), "other"), "");
}
