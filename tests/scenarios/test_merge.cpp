// merge: shards of a sweep give back the whole run; other scenarios are refused; missing points, conflicts, failures.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "common/error.h"
#include "harness/scenario/merge.h"
#include "harness/scenario/records.h"
#include "harness/scenario/shard.h"
#include "harness/scenario/sweep.h"
#include "tests/scenarios/error_of.h"
#include "tests/scenarios/temp_dir.h"

using namespace sb;
using sb::test::error_of;
namespace fs = std::filesystem;
using sb::test::TempDir;

namespace {

Scenario scenario(const std::string& lengths = "[8, 16]") {
  return scenario_from_json(json::parse(R"({"kind": "attention", "name": "merging",
      "axes": {"patterns": [{"name": "window", "w": [2, 3]}, {"name": "star"}], "lengths": )" + lengths + R"(,
               "causal": [false, true]}})"),
                            "merging.json");
}

// A deterministic stand-in for a measurement: a function of the point only.
void fake_measure(const Scenario&, const Point& p, const std::string&, json& r) {
  r["tokens_per_s"] = 100.0 * static_cast<double>(p.length()) + static_cast<double>(p.stats.n_edges);
}

// Runs the points of shard `index` of `count` into dir (all points when count is 0).
void run_part(const Scenario& s, const std::string& dir, int64_t index, int64_t count,
              const MeasureFn& measure = fake_measure) {
  const std::vector<Point> all = expand_scenario(s);
  std::vector<Point> part;
  SweepOptions opt;
  opt.run_dir = dir;
  opt.environment = {{"commit", "abc"}, {"host", "node-" + std::to_string(index)}};
  for (const Point& p : all) opt.scenario_point_ids.push_back(p.id);
  if (count > 0) {
    const std::vector<int64_t> of = assign_shards(s, all, count);
    for (size_t i = 0; i < all.size(); ++i) {
      if (of[i] == index) part.push_back(all[i]);
    }
    opt.shard = {{"index", index}, {"count", count}, {"source", "test"}};
  } else {
    part = all;
  }
  run_sweep(s, part, opt, measure);
}

// A record without the fields that say when and where it was made.
json stripped(json r) {
  for (const std::string& k : provenance_fields()) r.erase(k);
  return r;
}

}  // namespace

TEST(Merge, ShardsGiveTheWholeRun) {
  TempDir d("merge_whole");
  const Scenario s = scenario();
  run_part(s, d.file("whole"), 0, 0);
  run_part(s, d.file("s0"), 0, 3);
  run_part(s, d.file("s1"), 1, 3);
  run_part(s, d.file("s2"), 2, 3);
  const MergeReport rep = merge_runs({{d.file("s0"), d.file("s1"), d.file("s2")}, d.file("merged"), false});
  EXPECT_TRUE(rep.complete());
  EXPECT_TRUE(rep.missing.empty());
  EXPECT_TRUE(rep.conflicts.empty());
  EXPECT_EQ(rep.points, 12);
  EXPECT_EQ(rep.ok, 10);
  EXPECT_EQ(rep.skipped, 2);  // star is not causal
  const RecordFile whole = read_records(d.file("whole/records.jsonl"));
  const RecordFile merged = read_records(d.file("merged/records.jsonl"));
  ASSERT_EQ(merged.records.size(), whole.records.size());
  for (size_t i = 0; i < whole.records.size(); ++i) {
    EXPECT_EQ(stripped(merged.records[i]), stripped(whole.records[i])) << i;  // scenario order, same content
    EXPECT_EQ(merged.records[i]["shard"]["count"], 3);
  }
  const json run = json::parse(std::ifstream(d.file("merged/run.json")));
  EXPECT_EQ(run["scenario_sha256"], json::parse(std::ifstream(d.file("s0/run.json")))["scenario_sha256"]);
  EXPECT_TRUE(run["merged"]["complete"].get<bool>());
  EXPECT_EQ(run["merged"]["from"].size(), 3u);
  EXPECT_EQ(run["commit"], "abc");                      // shared by every shard
  EXPECT_EQ(run["host"], "mixed (see merged.from)");     // differs between them
  EXPECT_EQ(run["merged"]["from"][2]["host"], "node-2");
  EXPECT_TRUE(fs::exists(d.file("merged/records.csv")));
  for (const auto& e : fs::directory_iterator(d.file("whole/graphs"))) {
    EXPECT_TRUE(fs::exists(fs::path(d.file("merged/graphs")) / e.path().filename())) << e.path();
  }
  // Merging again into the same place needs --overwrite.
  EXPECT_NE(error_of([&] { merge_runs({{d.file("s0"), d.file("s1")}, d.file("merged"), false}); })
                .find("already holds records; pass --overwrite"),
            std::string::npos);
}

TEST(Merge, DifferentScenariosAreRefusedNamingBothDirectories) {
  TempDir d("merge_refuse");
  run_part(scenario(), d.file("a"), 0, 2);
  run_part(scenario("[8, 32]"), d.file("b"), 1, 2);
  const std::string msg = error_of([&] { merge_runs({{d.file("a"), d.file("b")}, d.file("m"), false}); });
  EXPECT_EQ(msg.rfind("merge: " + d.file("a") + " and " + d.file("b") + " hold runs of different scenarios", 0), 0u)
      << msg;
  EXPECT_FALSE(fs::exists(d.file("m/records.jsonl")));
  EXPECT_EQ(error_of([&] { merge_runs({{d.file("a"), d.file("nothing")}, d.file("m"), false}); }),
            "merge: " + d.file("nothing") + ": not a directory");
  EXPECT_EQ(error_of([&] { merge_runs({{d.file("a"), d.file("a")}, d.file("m"), false}); }),
            "merge: " + d.file("a") + " is given twice");
  EXPECT_NE(error_of([&] { merge_runs({{d.file("a")}, d.file("a"), false}); }).find("is one of the run directories"),
            std::string::npos);
}

TEST(Merge, MissingPointsOfAFailedShardAreReported) {
  TempDir d("merge_missing");
  const Scenario s = scenario();
  run_part(s, d.file("s0"), 0, 2);
  // Shard 1 dies after three points: its records so far stay whole and count.
  int calls = 0;
  struct Died {};
  try {
    run_part(s, d.file("s1"), 1, 2, [&](const Scenario& sc, const Point& p, const std::string& dir, json& r) {
      if (++calls == 4) throw Died{};
      fake_measure(sc, p, dir, r);
    });
  } catch (const Died&) {
  }
  const RecordFile s1 = read_records(d.file("s1/records.jsonl"));
  EXPECT_TRUE(s1.problems.empty());
  const MergeReport rep = merge_runs({{d.file("s0"), d.file("s1")}, d.file("m"), false});
  EXPECT_FALSE(rep.complete());
  // Exactly the shard-1 points not recorded are missing.
  const std::vector<Point> all = expand_scenario(s);
  const std::vector<int64_t> of = assign_shards(s, all, 2);
  std::set<std::string> recorded;
  for (const json& r : s1.records) recorded.insert(r["point"].get<std::string>());
  std::vector<std::string> expected;
  for (size_t i = 0; i < all.size(); ++i) {
    if (of[i] == 1 && !recorded.count(all[i].id)) expected.push_back(all[i].id);
  }
  EXPECT_FALSE(expected.empty());
  EXPECT_EQ(rep.missing, expected);
  const json run = json::parse(std::ifstream(d.file("m/run.json")));
  EXPECT_FALSE(run["merged"]["complete"].get<bool>());
  EXPECT_EQ(run["merged"]["missing"].get<std::vector<std::string>>(), expected);
  // Resuming the shard completes the merge.
  SweepOptions opt;
  opt.run_dir = d.file("s1");
  opt.resume = true;
  opt.shard = {{"index", 1}, {"count", 2}, {"source", "test"}};
  std::vector<Point> part;
  for (size_t i = 0; i < all.size(); ++i) {
    if (of[i] == 1) part.push_back(all[i]);
  }
  run_sweep(s, part, opt, fake_measure);
  EXPECT_TRUE(merge_runs({{d.file("s0"), d.file("s1")}, d.file("m"), true}).complete());
}

TEST(Merge, ConflictsDuplicatesAndRerunsOfFailedPoints) {
  TempDir d("merge_conflict");
  const Scenario s = scenario();
  run_part(s, d.file("a"), 0, 0);
  run_part(s, d.file("same"), 0, 0);  // equal results: duplicates, no conflict
  MergeReport rep = merge_runs({{d.file("a"), d.file("same")}, d.file("m1"), false});
  EXPECT_TRUE(rep.complete());
  EXPECT_EQ(rep.duplicates, 12);
  // Different results for the same points: conflicts naming the point, both directories and the field.
  run_part(s, d.file("other"), 0, 0, [](const Scenario& sc, const Point& p, const std::string& dir, json& r) {
    fake_measure(sc, p, dir, r);
    if (p.length() == 16) r["tokens_per_s"] = 1.0;
  });
  rep = merge_runs({{d.file("a"), d.file("other")}, d.file("m2"), false});
  EXPECT_FALSE(rep.complete());
  ASSERT_EQ(rep.conflicts.size(), 5u);  // n=16: window w=2, w=3 x causal, star bidirectional
  EXPECT_NE(rep.conflicts[0].find(d.file("a") + " and " + d.file("other") + " differ in tokens_per_s; kept " +
                                  d.file("a") + "'s"),
            std::string::npos)
      << rep.conflicts[0];
  // A point that failed in one run and succeeded in another keeps the success, without a conflict.
  run_part(s, d.file("failing"), 0, 0, [](const Scenario& sc, const Point& p, const std::string& dir, json& r) {
    if (p.length() == 8) throw Error("simulated crash");
    fake_measure(sc, p, dir, r);
  });
  rep = merge_runs({{d.file("failing"), d.file("a")}, d.file("m3"), false});
  EXPECT_TRUE(rep.complete()) << (rep.conflicts.empty() ? "" : rep.conflicts[0]);
  EXPECT_EQ(rep.replaced_failures, 5);  // n=8: window w=2, w=3 x causal, star bidirectional
  rep = merge_runs({{d.file("failing")}, d.file("m4"), false});
  EXPECT_EQ(rep.failed, 5);
  EXPECT_FALSE(rep.complete());
}

TEST(Merge, CorruptLinesAreNamedAndRefusedUnlessSkipped) {
  TempDir d("merge_corrupt");
  const Scenario s = scenario();
  run_part(s, d.file("s0"), 0, 2);
  run_part(s, d.file("s1"), 1, 2);
  const std::string path = d.file("s1/records.jsonl");
  std::ofstream(path, std::ios::app) << "{\"point\": 1, \"x\": tru\n" << std::string(100, '[') << std::string(100, ']')
                                     << "\n{\"point\": \"cut";
  const RecordFile rf = read_records(path);
  ASSERT_EQ(rf.bad_lines.size(), 3u);
  const size_t good = rf.records.size();
  EXPECT_EQ(rf.bad_lines[0].rfind(path + ":" + std::to_string(good + 1) + ": not a JSON record (malformed JSON: ", 0),
            0u)
      << rf.bad_lines[0];
  EXPECT_NE(rf.bad_lines[1].find(":" + std::to_string(good + 2) + ": not a JSON record (JSON nested deeper than 64"),
            std::string::npos)
      << rf.bad_lines[1];
  EXPECT_NE(rf.bad_lines[2].find(":" + std::to_string(good + 3) + ": truncated last line"), std::string::npos);

  MergeOptions opt{{d.file("s0"), d.file("s1")}, d.file("m"), false};
  const std::string msg = error_of([&] { merge_runs(opt); });
  EXPECT_EQ(msg.rfind("merge: 3 corrupt or truncated lines in the records of the run directories:\n  " + path + ":", 0),
            0u)
      << msg;
  EXPECT_FALSE(fs::exists(d.file("m")));  // refused before anything was written
  opt.skip_corrupt = true;
  const MergeReport rep = merge_runs(opt);
  EXPECT_TRUE(rep.complete());
  EXPECT_EQ(rep.skipped_lines, rf.bad_lines);
  std::ifstream in(d.file("m/run.json"));
  const json run = json::parse(in);
  EXPECT_EQ(run["merged"]["skipped_lines"], json(rf.bad_lines));
}

TEST(Merge, SourceWithoutRecordsIsNamed) {
  TempDir d("merge_norecords");
  const Scenario s = scenario();
  run_part(s, d.file("s0"), 0, 2);
  run_part(s, d.file("s1"), 1, 2);
  fs::remove(d.file("s1/records.jsonl"));
  const MergeReport rep = merge_runs({{d.file("s0"), d.file("s1")}, d.file("m"), false});
  EXPECT_FALSE(rep.complete());
  ASSERT_EQ(rep.notes.size(), 1u);
  EXPECT_EQ(rep.notes[0].rfind(d.file("s1") + ": no records.jsonl", 0), 0u) << rep.notes[0];
}
