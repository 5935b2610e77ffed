// Generated tasks: determinism, the layout each generator promises, bad input, task runs' records, and the reach
// prediction on a tiny case (a 2-layer window model cannot retrieve beyond its reach).
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "harness/lm/tasks.h"
#include "harness/lm/trainer.h"
#include "tests/scenarios/error_of.h"
#include "tests/scenarios/temp_dir.h"

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

sb::TrainConfig task_config(const std::vector<std::pair<std::string, std::string>>& extra) {
  std::vector<std::pair<std::string, std::string>> o = {
      {"pattern", "window"}, {"set", "w=8"}, {"context", "64"}, {"layers", "2"}, {"dim", "32"}, {"heads", "2"},
      {"ffn", "64"},        {"dropout", "0"}, {"threads", "1"}, {"quiet", "1"}};
  o.insert(o.end(), extra.begin(), extra.end());
  return sb::train_config_from_options(o);
}

std::string fresh_dir(const std::string& name) {
  const fs::path p = fs::temp_directory_path() / ("sb_test_tasks_" + name);
  sb::test::remove_tree(p);
  return p.string();
}

std::string error_of(const sb::TrainConfig& c) { return sb::test::error_of([&] { sb::train(c); }); }

TEST(Tasks, RowsDependOnSeedSplitStepAndRowOnly) {
  const sb::TaskSpec s = sb::task_spec(task_config({{"task", "mqar"}}));
  const auto whole = sb::task_batch(s, 7, sb::TaskSplit::train, 3, 4, 0, 4);
  const auto part = sb::task_batch(s, 7, sb::TaskSplit::train, 3, 4, 2, 2);  // a rank's rows
  EXPECT_TRUE(torch::equal(whole.tokens.slice(0, 2, 4), part.tokens));
  EXPECT_TRUE(torch::equal(whole.tokens, sb::task_batch(s, 7, sb::TaskSplit::train, 3, 4, 0, 4).tokens));
  EXPECT_FALSE(torch::equal(whole.tokens, sb::task_batch(s, 7, sb::TaskSplit::valid, 3, 4, 0, 4).tokens));
  EXPECT_FALSE(torch::equal(whole.tokens, sb::task_batch(s, 8, sb::TaskSplit::train, 3, 4, 0, 4).tokens));
  EXPECT_FALSE(torch::equal(whole.tokens, sb::task_batch(s, 7, sb::TaskSplit::train, 4, 4, 0, 4).tokens));
  EXPECT_LT(whole.tokens.max().item<int64_t>(), 64);
  EXPECT_GE(whole.tokens.min().item<int64_t>(), 0);
}

// Every scored target of recall_distance is the value planted after the same key d tokens before the query.
TEST(Tasks, RecallDistancePlantsKeyAndValueAtTheDistance) {
  const sb::TaskSpec s = sb::task_spec(task_config({{"task", "recall_distance"}, {"task-distances", "3,9,40"},
                                                    {"task-pairs", "4"}}));
  ASSERT_EQ(s.buckets.size(), 3u);
  const auto b = sb::task_batch(s, 1, sb::TaskSplit::train, 0, 32, 0, 32);
  auto tok = b.tokens.accessor<int64_t, 2>();
  auto ans = b.answer.accessor<float, 2>();
  auto bkt = b.bucket.accessor<int64_t, 2>();
  int64_t answers = 0;
  std::map<int64_t, int64_t> per_bucket;
  for (int64_t r = 0; r < 32; ++r) {
    for (int64_t q = 0; q < 64; ++q) {
      if (ans[r][q] == 0.0f) continue;
      ++answers;
      const int64_t d = s.distances[static_cast<size_t>(bkt[r][q])];
      ++per_bucket[d];
      EXPECT_EQ(tok[r][q - d], tok[r][q]);              // the key
      EXPECT_EQ(tok[r][q - d + 1], tok[r][q + 1]);      // its value is the target
      EXPECT_GE(tok[r][q], 16);                         // keys [16, 32)
      EXPECT_LT(tok[r][q], 32);
      EXPECT_GE(tok[r][q + 1], 32);                     // values [32, 64)
      for (int64_t t = 0; t < q; ++t) {                 // the key appears once before the query
        if (t != q - d) EXPECT_NE(tok[r][t], tok[r][q]);
      }
    }
  }
  EXPECT_GE(answers, 32 * 3);
  EXPECT_EQ(per_bucket.size(), 3u);
  EXPECT_DOUBLE_EQ(sb::task_chance(s), 1.0 / 32);
}

TEST(Tasks, MqarQueriesEveryPairOnce) {
  const sb::TaskSpec s = sb::task_spec(task_config({{"task", "mqar"}, {"task-pairs", "6"}}));
  const auto b = sb::task_batch(s, 2, sb::TaskSplit::test, 5, 8, 0, 8);
  auto tok = b.tokens.accessor<int64_t, 2>();
  auto ans = b.answer.accessor<float, 2>();
  for (int64_t r = 0; r < 8; ++r) {
    int64_t answers = 0;
    for (int64_t q = 12; q < 64; ++q) {
      if (ans[r][q] == 0.0f) continue;
      ++answers;
      bool found = false;
      for (int64_t i = 0; i < 6; ++i) found |= tok[r][2 * i] == tok[r][q] && tok[r][2 * i + 1] == tok[r][q + 1];
      EXPECT_TRUE(found) << r << " " << q;
    }
    EXPECT_EQ(answers, 6) << r;
  }
}

// MQAR draws a sequence's values without replacement (with repeats, models score above chance without matching
// keys), and the record says so; recall_distance keeps drawing with replacement.
TEST(Tasks, MqarValuesAreDistinctWithinASequence) {
  const sb::TaskSpec s = sb::task_spec(task_config({{"task", "mqar"}, {"task-pairs", "8"}, {"task-vocab", "32"}}));
  const auto b = sb::task_batch(s, 3, sb::TaskSplit::train, 7, 64, 0, 64);
  auto tok = b.tokens.accessor<int64_t, 2>();
  for (int64_t r = 0; r < 64; ++r) {
    std::map<int64_t, int> seen;
    for (int64_t i = 0; i < 8; ++i) {
      ASSERT_GE(tok[r][2 * i + 1], 16) << r;
      seen[tok[r][2 * i + 1]]++;
    }
    EXPECT_EQ(seen.size(), 8u) << "row " << r << " repeats a value";
  }
  EXPECT_EQ(sb::task_json(s)["params"]["values"], "distinct within a sequence");
  const sb::TaskSpec recall = sb::task_spec(task_config({{"task", "recall_distance"}, {"task-vocab", "32"}}));
  EXPECT_FALSE(sb::task_json(recall)["params"].contains("values"));
}

// Hidden answers (Zoology's MQAR): the same pairs, queries and targets as revealed ones, but the input after each
// query is filler, so no answer is ever an input in the query region; the record names the mode.
TEST(Tasks, HiddenAnswersAreTargetsOnly) {
  const auto cfg = [](const std::string& answers) {
    return sb::task_spec(task_config({{"task", "mqar"}, {"task-pairs", "8"}, {"task-vocab", "32"},
                                      {"task-answers", answers}}));
  };
  const sb::TaskSpec shown = cfg("revealed"), hidden = cfg("hidden");
  const auto a = sb::task_batch(shown, 4, sb::TaskSplit::valid, 2, 32, 0, 32);
  const auto b = sb::task_batch(hidden, 4, sb::TaskSplit::valid, 2, 32, 0, 32);
  EXPECT_TRUE(torch::equal(a.tokens, b.tokens));  // targets, scored positions and buckets agree
  EXPECT_TRUE(torch::equal(a.answer, b.answer));
  EXPECT_TRUE(torch::equal(a.bucket, b.bucket));
  EXPECT_TRUE(torch::equal(a.inputs, a.tokens.slice(1, 0, 64)));
  auto in = b.inputs.accessor<int64_t, 2>();
  auto tok = b.tokens.accessor<int64_t, 2>();
  auto ans = b.answer.accessor<float, 2>();
  int64_t hidden_inputs = 0;
  for (int64_t r = 0; r < 32; ++r) {
    for (int64_t t = 0; t < 64; ++t) {
      const bool after_query = t > 0 && ans[r][t - 1] > 0;
      if (after_query) {
        EXPECT_LT(in[r][t], 8) << "row " << r << " position " << t << ": not filler";  // filler is [0, 32/4)
        EXPECT_GE(tok[r][t], 16);  // the target there is still the value
        ++hidden_inputs;
      } else {
        EXPECT_EQ(in[r][t], tok[r][t]) << "row " << r << " position " << t;
      }
    }
    for (int64_t t = 16; t < 64; ++t) EXPECT_LT(in[r][t], 16) << "a value is an input after the pairs, row " << r;
  }
  EXPECT_EQ(hidden_inputs, 32 * 8);
  EXPECT_EQ(sb::task_json(hidden)["params"]["answers"], "hidden");
  EXPECT_EQ(sb::task_json(shown)["params"]["answers"], "revealed");
}

// MQAR with task_pairs_min: training sequences hold between task_pairs_min and task_pairs pairs (each queried once),
// every count turning up; valid and test sequences hold task_pairs, and the record names the range.
TEST(Tasks, MqarTrainingPairCountsSpanTheirRangeAndEvaluationsKeepTheTask) {
  const sb::TaskSpec s = sb::task_spec(
      task_config({{"task", "mqar"}, {"task-pairs", "8"}, {"task-vocab", "32"}, {"task-pairs-min", "2"}}));
  auto answers_per_row = [&](sb::TaskSplit split) {
    const auto b = sb::task_batch(s, 5, split, 3, 256, 0, 256);
    return b.answer.sum(1);
  };
  const auto train = answers_per_row(sb::TaskSplit::train);
  EXPECT_EQ(train.min().item<float>(), 2.0f);
  EXPECT_EQ(train.max().item<float>(), 8.0f);
  for (int64_t p = 2; p <= 8; ++p) EXPECT_GT((train == p).sum().item<int64_t>(), 0) << p << " pairs never drawn";
  for (const sb::TaskSplit split : {sb::TaskSplit::valid, sb::TaskSplit::test}) {
    const auto eval = answers_per_row(split);
    EXPECT_EQ(eval.min().item<float>(), 8.0f) << sb::task_split_name(split);
    EXPECT_EQ(eval.max().item<float>(), 8.0f) << sb::task_split_name(split);
  }
  EXPECT_EQ(sb::task_json(s)["params"]["train_pairs_min"], 2);
  const sb::TaskSpec plain = sb::task_spec(task_config({{"task", "mqar"}, {"task-vocab", "32"}}));
  EXPECT_FALSE(sb::task_json(plain)["params"].contains("train_pairs_min"));
}

// MQAR queries come after the pairs with Zoology's power-law gaps: most close to the pairs, a tail to the end, so
// every power-of-two distance bucket gets answers.
TEST(Tasks, MqarQueryGapsFollowAPowerLaw) {
  const sb::TaskSpec s = sb::task_spec(task_config({{"task", "mqar"}, {"task-pairs", "16"}, {"task-vocab", "256"},
                                                    {"context", "512"}}));
  const auto b = sb::task_batch(s, 5, sb::TaskSplit::train, 0, 64, 0, 64);
  auto ans = b.answer.accessor<float, 2>();
  auto bkt = b.bucket.accessor<int64_t, 2>();
  const int64_t slots = (512 - 2 * 16) / 2;
  int64_t queries = 0, near = 0, far = 0;
  std::map<int64_t, int64_t> per_bucket;
  for (int64_t r = 0; r < 64; ++r) {
    for (int64_t q = 0; q < 512; ++q) {
      if (ans[r][q] == 0.0f) continue;
      ++queries;
      ASSERT_EQ((q - 32) % 2, 0) << q;  // a query slot starts every 2 tokens after the 16 pairs
      const int64_t slot = (q - 32) / 2;
      near += slot < slots / 10;
      far += slot >= slots / 2;
      ++per_bucket[bkt[r][q]];
    }
  }
  EXPECT_EQ(queries, 64 * 16);
  EXPECT_GT(near, queries * 35 / 100);  // uniform slots would put 10% there
  EXPECT_GT(far, queries * 3 / 100);
  EXPECT_LT(far, queries * 30 / 100);  // uniform: 50%
  EXPECT_GE(per_bucket.size(), 7u);    // distances 2 .. 511: 8 buckets
}

// khop: following the listed links `hops` times from the query symbol gives the target.
TEST(Tasks, KhopAnswersFollowTheChain) {
  const sb::TaskSpec s = sb::task_spec(task_config({{"task", "khop"}, {"task-hops", "3"}, {"task-vocab", "32"}}));
  const auto b = sb::task_batch(s, 3, sb::TaskSplit::train, 0, 4, 0, 4);
  auto tok = b.tokens.accessor<int64_t, 2>();
  auto ans = b.answer.accessor<float, 2>();
  for (int64_t r = 0; r < 4; ++r) {
    std::map<int64_t, int64_t> next;
    const int64_t m = 16;  // min(vocab - 1, max(hops + 2, context / 4))
    for (int64_t t = 0; t + 1 < 2 * (m - 1); t += 2) next[tok[r][t]] = tok[r][t + 1];
    int64_t answers = 0;
    for (int64_t q = 0; q < 64; ++q) {
      if (ans[r][q] == 0.0f) continue;
      ++answers;
      EXPECT_EQ(tok[r][q - 1], 0);  // after the separator
      int64_t x = tok[r][q];
      for (int i = 0; i < 3; ++i) x = next.at(x);
      EXPECT_EQ(x, tok[r][q + 1]);
    }
    EXPECT_GE(answers, 10);
  }
}

TEST(Tasks, SelectiveCopyCopiesTheContentInOrder) {
  const sb::TaskSpec s = sb::task_spec(task_config({{"task", "selective_copy"}, {"task-pairs", "5"}}));
  const auto b = sb::task_batch(s, 4, sb::TaskSplit::train, 0, 4, 0, 4);
  auto tok = b.tokens.accessor<int64_t, 2>();
  auto ans = b.answer.accessor<float, 2>();
  for (int64_t r = 0; r < 4; ++r) {
    std::vector<int64_t> content, copied;
    for (int64_t t = 0; t < 64 - 5; ++t) {
      if (tok[r][t] >= 32) content.push_back(tok[r][t]);
    }
    for (int64_t q = 0; q < 64; ++q) {
      if (ans[r][q] != 0.0f) copied.push_back(tok[r][q + 1]);
    }
    EXPECT_EQ(content, copied);
    EXPECT_EQ(copied.size(), 5u);
  }
}

// Bad input names the field and writes nothing.
TEST(Tasks, BadInputNamesTheFieldAndWritesNothing) {
  const std::string out = fresh_dir("bad");
  auto with_out = [&](sb::TrainConfig c) {
    c.out_dir = out;
    return c;
  };
  try {
    task_config({{"task", "copy"}});
    FAIL() << "expected an error";
  } catch (const sb::Error& e) {
    EXPECT_NE(std::string(e.what()).find("--task"), std::string::npos) << e.what();
  }
  EXPECT_NE(error_of(with_out(task_config({{"task", "mqar"}, {"task-pairs", "17"}}))).find("task_pairs"),
            std::string::npos);  // 17 keys from a vocabulary of 64 (16 keys)
  EXPECT_NE(error_of(with_out(task_config({{"task", "mqar"}, {"task-pairs", "20"}, {"task-vocab", "256"}})))
                .find("task_pairs: 20 pairs take 80 tokens"),
            std::string::npos);  // 64 keys suffice, the context of 64 does not
  EXPECT_NE(error_of(with_out(task_config({{"task", "recall_distance"}, {"task-distances", "8,64"}})))
                .find("task_distances: distance 64"),
            std::string::npos);
  EXPECT_NE(error_of(with_out(task_config({{"task", "recall_distance"}, {"task-distances", "8,x"}})))
                .find("task_distances"),
            std::string::npos);
  EXPECT_NE(error_of(with_out(task_config({{"task", "mqar"}, {"data", "/etc/hostname"}}))).find("task"),
            std::string::npos);
  EXPECT_NE(error_of(with_out(task_config({{"task", "khop"}, {"task-distances", "4"}}))).find("task_distances"),
            std::string::npos);
  EXPECT_NE(error_of(with_out(task_config({{"task", "recall_distance"}, {"task-pairs-min", "2"}})))
                .find("task_pairs_min: only mqar"),
            std::string::npos);
  EXPECT_NE(error_of(with_out(task_config({{"task", "mqar"}, {"task-pairs", "4"}, {"task-pairs-min", "5"}})))
                .find("task_pairs_min: 5 is more than task_pairs 4"),
            std::string::npos);
  EXPECT_NE(error_of(with_out(task_config({{"task", "khop"}, {"task-answers", "hidden"}})))
                .find("task_answers: only mqar and recall_distance"),
            std::string::npos);
  EXPECT_NE(sb::test::error_of([] { task_config({{"task", "mqar"}, {"task-answers", "none"}}); })
                .find("--task-answers: expected 'revealed' or 'hidden'"),
            std::string::npos);
  EXPECT_FALSE(fs::exists(out));
}

// A task run records the task, its chance and accuracy by distance beside the graph's reach, and no BPC; with
// window w=8 and 2 layers (reach: distance 14), recall beyond the reach stays at chance.
TEST(Tasks, WindowCannotRetrieveBeyondItsReach) {
  const std::string out = fresh_dir("reach");
  auto c = task_config({{"task", "recall_distance"}, {"task-vocab", "16"}, {"task-pairs", "4"},
                        {"task-distances", "3,6,10,24,40"}, {"steps", "400"}, {"batch", "16"}, {"lr", "0.01"},
                        {"warmup", "20"}, {"eval-every", "0"}, {"task-eval", "512"}, {"eval-batch", "64"},
                        {"checkpoint-every", "0"}});
  c.out_dir = out;
  const json r = sb::train(c);
  EXPECT_FALSE(r.contains("valid_bpc"));
  EXPECT_FALSE(r.contains("test_bpc"));
  ASSERT_TRUE(r.contains("task"));
  EXPECT_EQ(r["task"]["name"], "recall_distance");
  const double chance = r["task"]["chance"].get<double>();
  EXPECT_DOUBLE_EQ(chance, 1.0 / 8);
  const json& reach = r["reach"]["buckets"];
  const json& acc = r["accuracy_by_distance"];
  ASSERT_EQ(acc.size(), 5u);
  ASSERT_EQ(reach.size(), 5u);
  double near = 0.0;
  for (size_t i = 0; i < acc.size(); ++i) {
    const int64_t d = acc[i]["lo"].get<int64_t>();
    const double a = acc[i]["accuracy"].get<double>(), n = acc[i]["answers"].get<double>();
    EXPECT_EQ(reach[i]["fraction_reachable"].get<double>() > 0.99, d <= 13) << d;  // key d and value d-1 <= 14
    if (d > 14) {
      // Beyond the reach: within 4 binomial standard errors of chance.
      EXPECT_LT(std::abs(a - chance), 4.0 * std::sqrt(chance * (1 - chance) / n) + 1e-9) << d << ": " << a;
    } else {
      near = std::max(near, a);
    }
  }
  // Within the reach the same model does retrieve (so chance beyond it is the graph, not a model that learnt nothing).
  EXPECT_GT(near, 0.5) << acc.dump();
  // Metrics never call the answer loss BPC.
  std::ifstream in(out + "/metrics.jsonl");
  std::string line;
  while (std::getline(in, line)) EXPECT_EQ(line.find("bpc"), std::string::npos) << line;
}

// A task run scores its last step's valid split once: the final evaluation is also the learning curve's last point,
// logged as an eval record at that step, and a resumed run with nothing left to train ends its curve the same way.
TEST(Tasks, LastStepValidSplitEvaluatedOnce) {
  const std::string out = fresh_dir("last_eval");
  auto c = task_config({{"task", "recall_distance"}, {"task-vocab", "16"}, {"task-pairs", "2"},
                        {"task-distances", "3,6"}, {"steps", "20"}, {"batch", "4"}, {"eval-every", "10"},
                        {"task-eval", "32"}, {"eval-batch", "16"}, {"checkpoint-every", "0"}});
  c.out_dir = out;
  const int64_t before = sb::task_evaluations();
  const json r = sb::train(c);
  EXPECT_EQ(sb::task_evaluations() - before, 3);  // valid at step 10; valid and test at step 20
  ASSERT_EQ(r["evals"].size(), 2u) << r["evals"].dump();
  EXPECT_EQ(r["evals"][0]["step"], 10);
  EXPECT_EQ(r["evals"][1]["step"], 20);
  EXPECT_EQ(r["evals"][1]["kind"], "eval");
  EXPECT_EQ(r["evals"][1]["accuracy"], r["valid_accuracy"]);
  EXPECT_FALSE(r["evals"][1].contains("by_distance"));
  std::ifstream in(out + "/metrics.jsonl");
  std::string line;
  int at_last = 0;
  while (std::getline(in, line)) {
    const json rec = json::parse(line);
    if (rec.value("kind", "") == "eval" && rec.value("step", 0) == 20) ++at_last;
  }
  EXPECT_EQ(at_last, 1);
  // Resumed with nothing left to train: the final evaluation runs again and ends the curve at step 20 once.
  c.resume = true;
  const json again = sb::train(c);
  ASSERT_EQ(again["evals"].size(), 2u) << again["evals"].dump();
  EXPECT_EQ(again["evals"][1]["step"], 20);
  EXPECT_EQ(again["valid_accuracy"], r["valid_accuracy"]);
}

}  // namespace
