// `sparsebench run` end to end with LibTorch: attention, model and train kinds on tiny sizes, resume, dry run.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "harness/cli/cli.h"
#include "harness/lm/config.h"
#include "harness/lm/data.h"
#include "harness/measure/contention.h"
#include "harness/measure/device.h"
#include "harness/scenario/records.h"
#include "kernels/torch/graph_attention_op.h"
#include "patterns/pattern.h"
#include "common/error.h"
#include "common/files.h"
#include "tests/scenarios/temp_dir.h"

using namespace sb;
namespace fs = std::filesystem;
using sb::test::TempDir;

namespace {

std::string write(const TempDir& d, const std::string& name, const std::string& text) {
  std::ofstream(d.file(name)) << text;
  return d.file(name);
}

// d/text.bin: enough enwik8-like bytes to train tiny models on.
void write_text_data(const TempDir& d) {
  std::ofstream data(d.file("text.bin"), std::ios::binary);
  for (int i = 0; i < 4000; ++i) data << "<page><title>Item " << i % 97 << "</title> some text. </page>\n";
}

// A timed point's contention fields: consistent figures over `samples` snapshots of `threads` threads, and a verdict
// that follows the rule it names.
void expect_contention(const json& rec, int64_t threads, int64_t samples) {
  ASSERT_TRUE(rec.contains("contention")) << rec.dump();
  const json& c = rec["contention"];
  EXPECT_TRUE(rec["busy_machine"].is_boolean());
  EXPECT_EQ(rec["busy_machine"].get<bool>(), !rec["busy_reasons"].empty()) << rec.dump();
  EXPECT_EQ(c["rule"], kBusyRule);
  EXPECT_EQ(c["threads"], threads);
  EXPECT_EQ(c["usable_cpus"], cpu_allowance().usable);
  EXPECT_GE(c["samples"].get<int64_t>(), samples);
  EXPECT_GT(c["wall_s"].get<double>(), 0.0);
  EXPECT_GT(c["cpu_s"].get<double>(), 0.0);
  EXPECT_NEAR(rec["cpu_share"].get<double>(),
              c["cpu_s"].get<double>() / (c["wall_s"].get<double>() * static_cast<double>(threads)), 1e-9);
  EXPECT_LE(c["runnable_others"].get<double>(), c["runnable_others_max"].get<double>());
  // More others than the free cores, with threads that lost CPU time, is busy by rule (1).
  const int64_t free_cores = std::max<int64_t>(0, cpu_allowance().usable - threads);
  if (c["runnable_others"].get<double>() > static_cast<double>(free_cores) && rec["cpu_share"].get<double>() < 0.9) {
    EXPECT_TRUE(rec["busy_machine"].get<bool>()) << rec.dump();
  }
  EXPECT_FALSE(rec["omp_wait_policy"].get<std::string>().empty());
}


}  // namespace

TEST(Run, AttentionKindMeasuresEveryPoint) {
  TempDir d("attn");
  const std::string file = write(d, "attn.json", R"({"kind": "attention", "repeats": 3, "warmup": 1,
    "attention": {"heads": 2, "head_dim": 8},
    "axes": {"patterns": [{"name": "window", "w": 5}, {"name": "dense", "attention": "dense"}, {"name": "star"}],
             "lengths": [32], "tokens": 64, "causal": [false, true], "threads": 1,
             "modes": ["forward", "forward_backward"]}})");
  ASSERT_EQ(cmd_run({file, "--out", d.file("run"), "--no-plot"}), 0);
  const RecordFile r = read_records(d.file("run/records.jsonl"));
  EXPECT_TRUE(r.problems.empty());
  ASSERT_EQ(r.records.size(), 12u);
  int ok = 0, skipped = 0;
  for (const json& rec : r.records) {
    if (rec["status"] == "skipped") {
      ++skipped;
      EXPECT_EQ(rec["pattern"], "star");
      EXPECT_TRUE(rec["causal"].get<bool>());
      continue;
    }
    ASSERT_EQ(rec["status"], "ok") << rec.dump();
    ++ok;
    EXPECT_EQ(rec["samples_s"].size(), 3u);
    EXPECT_EQ(rec["batch"], 2);
    const double med = rec["median_s"].get<double>();
    EXPECT_NEAR(rec["tokens_per_s"].get<double>(), 64.0 / med, 1e-6 * 64.0 / med);
    EXPECT_LE(rec["tokens_per_s_min"].get<double>(), rec["tokens_per_s"].get<double>());
    EXPECT_GE(rec["tokens_per_s_max"].get<double>(), rec["tokens_per_s"].get<double>());
    EXPECT_EQ(rec["peak_source"], "cpu_counting_allocator");
    // The op's output alone is [B, N, H, D] floats: the measured peak cannot be below it.
    const int64_t out_bytes = 2 * rec["graph"]["n_nodes"].get<int64_t>() * 2 * 8 * 4;
    EXPECT_GE(rec["peak_bytes"].get<int64_t>(), out_bytes) << rec.dump();
    EXPECT_GT(rec["gemm_fraction"].get<double>(), 0.0);
    EXPECT_EQ(rec["threads_used"], 1);
    expect_contention(rec, 1, 5);  // at the start, after each of 3 calls, at the end
    // The kernel that ran: the CPU backend for graphs; SDPA (LibTorch >= 2) or the materialised path for dense.
    const std::string backend = rec["attention_backend"].get<std::string>();
    if (rec["attention"] == "dense") {
      EXPECT_TRUE(backend == "materialised" || backend.rfind("sdpa:", 0) == 0) << backend;
    } else {
      EXPECT_EQ(backend, graph_attention_backend(torch::kCPU));
    }
  }
  EXPECT_EQ(ok, 10);
  EXPECT_EQ(skipped, 2);
  EXPECT_TRUE(fs::exists(d.file("run/records.csv")));
  // --resume finds everything recorded and measures nothing more.
  ASSERT_EQ(cmd_run({file, "--out", d.file("run"), "--no-plot", "--resume"}), 0);
  EXPECT_EQ(read_records(d.file("run/records.jsonl")).records.size(), 12u);
}

TEST(Run, ModelKindForwardAndTrainingStep) {
  TempDir d("model");
  const std::string file = write(d, "model.json", R"({"kind": "model", "repeats": 2, "warmup": 1,
    "model": {"layers": 1, "dim": 16, "ffn": 32, "heads": 2},
    "axes": {"patterns": [{"name": "bpt", "k": 2}, {"name": "dense", "attention": "dense"}], "lengths": [24],
             "batch": 2, "causal": true, "threads": 1, "modes": ["forward", "forward_backward"]}})");
  ASSERT_EQ(cmd_run({file, "--out", d.file("run"), "--no-plot"}), 0);
  const RecordFile r = read_records(d.file("run/records.jsonl"));
  ASSERT_EQ(r.records.size(), 4u);
  for (const json& rec : r.records) {
    ASSERT_EQ(rec["status"], "ok") << rec.dump();
    EXPECT_GT(rec["parameters"].get<int64_t>(), 0);
    EXPECT_EQ(rec["peak_source"], "cpu_counting_allocator");
    EXPECT_GT(rec["peak_bytes"].get<int64_t>(), 0);
    EXPECT_GE(rec["peak_total_bytes"].get<int64_t>(), rec["live_before_bytes"].get<int64_t>());
    EXPECT_EQ(rec["samples_s"].size(), 2u);
    expect_contention(rec, 1, 4);
    EXPECT_EQ(rec["mode"], &rec == &r.records[0] || &rec == &r.records[2] ? "forward" : "forward_backward");
    EXPECT_EQ(rec["attention_backend"], rec["attention"] == "graph" ? graph_attention_backend(torch::kCPU)
                                                                  : "materialised (relative-position bias)");
  }
}

TEST(Run, TrainKindRecordsBpc) {
  TempDir d("train");
  write_text_data(d);
  const std::string file = write(d, "train.json", R"({"kind": "train", "seed": 3,
    "model": {"layers": 1, "dim": 16, "ffn": 32, "heads": 2},
    "train": {"steps": 3, "batch": 2, "eval_every": 3, "eval_bytes": 2048, "data": ")" + d.file("text.bin") + R"("},
    "axes": {"patterns": [{"name": "bpt", "k": 2}], "lengths": [32], "threads": 1}})");
  ASSERT_EQ(cmd_run({file, "--out", d.file("run"), "--no-plot"}), 0);
  const RecordFile r = read_records(d.file("run/records.jsonl"));
  ASSERT_EQ(r.records.size(), 1u);
  const json& rec = r.records[0];
  ASSERT_EQ(rec["status"], "ok") << rec.dump();
  EXPECT_EQ(rec["steps"], 3);
  EXPECT_GT(rec["test_bpc"].get<double>(), 0.0);
  EXPECT_LT(rec["test_bpc"].get<double>(), 9.0);  // near 8 bits untrained, below it after a few steps
  EXPECT_TRUE(fs::exists(rec["train_dir"].get<std::string>()));
  expect_contention(rec, 1, 2);  // the whole run: at its start and end, and every 200 ms
}

TEST(Run, TrainPointsDeriveEachValueOnce) {
  TempDir d("derive");
  write_text_data(d);
  // Context 64, so the sweep's n = 64 pictures are the points' own graphs; no BPC-by-context lens (it builds graphs
  // at other lengths on purpose).
  const std::string file = write(d, "train.json", R"({"kind": "train", "seed": 5,
    "model": {"layers": 1, "dim": 16, "ffn": 32, "heads": 2},
    "train": {"steps": 2, "batch": 2, "eval_every": 2, "eval_bytes": 1024, "lens_bytes": 0,
              "data": ")" + d.file("text.bin") + R"("},
    "axes": {"patterns": [{"name": "bpt", "k": 3}, {"name": "window", "w": 7}], "lengths": [64], "threads": 1}})");
  const int64_t graphs = pattern_graph_builds(), configs = train_config_serialisations(), reads = enwik8_file_reads();
  ASSERT_EQ(cmd_run({file, "--out", d.file("run"), "--no-plot", "--jobs", "1"}), 0);
  const RecordFile r = read_records(d.file("run/records.jsonl"));
  ASSERT_EQ(r.records.size(), 2u);
  for (const json& rec : r.records) ASSERT_EQ(rec["status"], "ok") << rec.dump();
  // One build per point: the expansion's graph is the model's, the reach table's and the picture's.
  EXPECT_EQ(pattern_graph_builds() - graphs, 2);
  // One serialisation per point: the resume decision, the checkpoints and the result share it.
  EXPECT_EQ(train_config_serialisations() - configs, 2);
  // One read of the data file for the whole process (both points train on it).
  EXPECT_EQ(enwik8_file_reads() - reads, 1);
}

// A resumed scenario with a pattern inserted numbers its points anew: the new point runs under a number no recorded
// point holds, and the recorded point's training directory (its result, metrics and checkpoint) stays its own.
TEST(Run, ResumeWithAnInsertedPointKeepsEveryRecordedRunsDirectory) {
  TempDir d("insert");
  auto scenario = [&](const std::string& patterns) {
    return R"({"kind": "train", "seed": 2, "model": {"layers": 1, "dim": 16, "ffn": 32, "heads": 1},
      "train": {"task": "mqar", "task_vocab": 32, "task_pairs": 4, "task_eval": 8, "steps": 2, "eval_every": 2,
                "eval_batch": 8, "checkpoint_every": 2},
      "axes": {"patterns": [)" + patterns + R"(], "lengths": [32], "tokens": 64, "causal": true, "threads": 1}})";
  };
  const std::string before = write(d, "before.json", scenario(R"({"name": "bpt", "k": 2}, {"name": "dense", "attention": "dense"})"));
  const std::string after = write(d, "after.json", scenario(R"({"name": "bpt", "k": 2}, {"name": "window", "w": 5}, {"name": "dense", "attention": "dense"})"));
  ASSERT_EQ(cmd_run({before, "--out", d.file("run"), "--no-plot"}), 0);
  const std::string dense_result = d.file("run/train/0001/result.json");
  bool exists = false;
  const std::string dense_text = read_file(dense_result, &exists);
  ASSERT_TRUE(exists);
  // One process (the renumbering is the sweep's, before points are handed to --jobs processes).
  ASSERT_EQ(cmd_run({after, "--out", d.file("run"), "--resume", "--allow-changes", "--no-plot"}), 0);
  EXPECT_EQ(read_file(dense_result, &exists), dense_text);
  const RecordFile r = read_records(d.file("run/records.jsonl"));
  ASSERT_EQ(r.records.size(), 3u);
  std::map<std::string, int64_t> index_of;
  for (const json& rec : r.records) {
    ASSERT_EQ(rec["status"], "ok") << rec.dump();
    index_of[rec["pattern"].get<std::string>()] = rec["index"].get<int64_t>();
  }
  EXPECT_EQ(index_of["bpt"], 0);
  EXPECT_EQ(index_of["dense"], 1);
  EXPECT_EQ(index_of["window"], 3);  // after every number of the new expansion (0..2)
  const json window = json::parse(read_file(d.file("run/train/0003/result.json"), &exists));
  EXPECT_EQ(window["config"]["model"]["pattern"], "window");
}

TEST(Run, BadScenarioFailsBeforeRunningAnything) {
  TempDir d("bad");
  const std::string file = write(d, "fig7.json", R"({"kind": "attention", "axes": {"patterns": [{"name": "bpt", "k": 0}],
    "lengths": [32]}})");
  try {
    cmd_run({file, "--out", d.file("run"), "--no-plot"});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), file + ": /axes/patterns/0/k: expected an integer >= 1, got 0");
  }
  EXPECT_FALSE(fs::exists(d.file("run")));
}

TEST(Run, DryRunRunsNothing) {
  TempDir d("dry");
  const std::string file = write(d, "q.json", R"({"kind": "attention", "axes": {"patterns": [{"name": "window", "w": 3}],
    "lengths": [16, 32]}})");
  testing::internal::CaptureStdout();
  ASSERT_EQ(cmd_run({file, "--dry-run", "--out", d.file("run"), "--set", "axes/lengths=[16,32,64]"}), 0);
  const std::string out = testing::internal::GetCapturedStdout();
  EXPECT_NE(out.find("3 points, 3 to run, 0 skipped"), std::string::npos) << out;
  EXPECT_FALSE(fs::exists(d.file("run")));
}

// A train scenario asking for CUDA where this build or machine has none is refused before anything runs: no run
// directory, no records (it used to train on the CPU while recording "cuda").
TEST(Run, TrainScenarioAskingForCudaIsRefusedBeforeAnythingRuns) {
  if (build_has_cuda() && torch::cuda::is_available()) GTEST_SKIP() << "a CUDA device is present";
  TempDir d("cuda_refused");
  const std::string file = write(d, "train.json", R"({"kind": "train", "device": "cuda", "train": {"data": "x.bin",
    "steps": 2}, "model": {"layers": 1, "dim": 16, "heads": 2, "ffn": 32},
    "axes": {"patterns": [{"name": "window", "w": 4}], "lengths": [16], "threads": 1}})");
  try {
    cmd_run({file, "--out", d.file("run"), "--no-plot"});
    FAIL() << "a CUDA train scenario ran on a build or machine without CUDA";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_TRUE(msg == "device cuda requested but this build has no CUDA" ||
                msg == "device cuda requested but no CUDA device is available")
        << msg;
    EXPECT_EQ(msg.find("no CUDA device") != std::string::npos, build_has_cuda()) << msg;
  }
  EXPECT_FALSE(fs::exists(d.file("run")));
}
