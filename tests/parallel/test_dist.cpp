// Data-parallel building blocks: rank layout from the environment, window and dropout sharding, option round trip,
// and the bucketed gradient mean over two in-process Gloo ranks.
#include <fstream>
#include <functional>
#include <map>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "harness/parallel/launch.h"
#include "harness/parallel/process_group.h"
#include "harness/lm/config.h"
#include "harness/lm/data.h"
#include "harness/lm/fast_dropout.h"
#include "tests/scenarios/temp_dir.h"

namespace {

using Env = std::map<std::string, std::string>;

void expect_error(const std::function<void()>& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "expected an error mentioning '" << needle << "'";
  } catch (const sb::Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(RankLayout, SingleProcessWithoutLauncherVariables) {
  const sb::RankLayout l = sb::rank_layout_from_environment({{"PATH", "/bin"}, {"SLURM_NTASKS", "4"}});
  EXPECT_FALSE(l.distributed());
  EXPECT_EQ(l.rank, 0);
  EXPECT_EQ(l.world_size, 1);
}

TEST(RankLayout, TorchrunVariables) {
  const sb::RankLayout l = sb::rank_layout_from_environment(
      {{"RANK", "3"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "2"},
       {"MASTER_ADDR", "node7"}, {"MASTER_PORT", "29500"}});
  EXPECT_TRUE(l.distributed());
  EXPECT_EQ(l.rank, 3);
  EXPECT_EQ(l.world_size, 4);
  EXPECT_EQ(l.local_rank, 1);
  EXPECT_EQ(l.local_world_size, 2);
  EXPECT_EQ(l.master_addr, "node7");
  EXPECT_EQ(l.master_port, 29500);
  EXPECT_EQ(l.source, "torchrun environment");
  EXPECT_EQ(l.agent_store_prefix, "");
  const sb::RankLayout agent = sb::rank_layout_from_environment(
      {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "29500"},
       {"TORCHELASTIC_USE_AGENT_STORE", "True"}, {"TORCHELASTIC_RESTART_COUNT", "2"}});
  EXPECT_EQ(agent.agent_store_prefix, "/worker/attempt_2");
  EXPECT_EQ(agent.local_world_size, 2);  // unknown: all ranks counted as local
}

TEST(RankLayout, SrunVariablesWithExportedMaster) {
  const sb::RankLayout l = sb::rank_layout_from_environment(
      {{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "8"}, {"SLURM_LOCALID", "1"}, {"SLURM_NTASKS_PER_NODE", "4"},
       {"MASTER_ADDR", "n1"}, {"MASTER_PORT", "1234"}});
  EXPECT_EQ(l.rank, 5);
  EXPECT_EQ(l.world_size, 8);
  EXPECT_EQ(l.local_rank, 1);
  EXPECT_EQ(l.local_world_size, 4);
  EXPECT_EQ(l.source, "Slurm environment");
}

TEST(RankLayout, BadVariablesAreNamed) {
  expect_error([] { sb::rank_layout_from_environment({{"RANK", "0"}}); }, "WORLD_SIZE is not set");
  expect_error([] { sb::rank_layout_from_environment({{"RANK", "2"}, {"WORLD_SIZE", "2"}}); },
               "RANK: expected an integer in [0, 1], got '2'");
  expect_error([] { sb::rank_layout_from_environment({{"RANK", "0"}, {"WORLD_SIZE", "two"}}); },
               "WORLD_SIZE: expected an integer");
  expect_error([] { sb::rank_layout_from_environment({{"RANK", "0"}, {"WORLD_SIZE", "2"}}); },
               "MASTER_ADDR is not set");
  expect_error([] {
    sb::rank_layout_from_environment({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "a"}, {"MASTER_PORT", "0"}});
  }, "MASTER_PORT: expected an integer in [1, 65535], got '0'");
}

TEST(TrainOptions, RoundTripThroughTheCommandLine) {
  sb::TrainConfig c;
  c.model.pattern = "window";
  c.model.pattern_params = {{"w", 8}};
  c.model.layers = 3;
  c.model.dropout = 0.25;
  c.lr = 1.5e-3;
  c.final_eval = false;
  c.resume = true;
  c.nproc = 2;
  c.dtype = "float64";
  c.data = "some/file.bin";
  const sb::TrainConfig back = sb::train_config_from_options(sb::train_config_options(c));
  EXPECT_EQ(sb::train_config_json(back), sb::train_config_json(c));
  EXPECT_TRUE(back.resume);
  EXPECT_FALSE(back.final_eval);
}

TEST(WindowSharding, RanksTakeTheirRowsOfTheGlobalBatch) {
  const auto dir = std::filesystem::temp_directory_path() / "sb_test_dist_windows";
  sb::test::remove_tree(dir);
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "bytes.bin").string();
  {
    std::string text;
    for (int i = 0; i < 5000; ++i) text += static_cast<char>('a' + (i * 7919) % 26);
    std::ofstream(path, std::ios::binary) << text;
  }
  const sb::Enwik8 data(path, 100);
  std::mt19937_64 one(9), r0(9), r1(9);
  for (int step = 0; step < 3; ++step) {
    const torch::Tensor all = sb::sample_windows(data, data.train(), 6, 17, one);
    const torch::Tensor a = sb::sample_windows(data, data.train(), 6, 17, r0, 0, 3);
    const torch::Tensor b = sb::sample_windows(data, data.train(), 6, 17, r1, 3, 3);
    EXPECT_TRUE(torch::equal(torch::cat({a, b}), all)) << "step " << step;
  }
  const uint64_t next = one();  // every rank's stream advanced alike
  EXPECT_EQ(r0(), next);
  EXPECT_EQ(r1(), next);
  EXPECT_THROW(sb::sample_windows(data, data.train(), 6, 17, one, 4, 3), sb::Error);
  sb::test::remove_tree(dir);
}

TEST(DropoutSharding, RankSlicesDropWhatTheGlobalBatchDrops) {
  const torch::Tensor x = torch::randn({4, 33, 8}, torch::kFloat64);
  torch::manual_seed(3);
  const torch::Tensor all = sb::fast_dropout(x, 0.5, true);
  std::vector<torch::Tensor> parts;
  for (int64_t r = 0; r < 2; ++r) {
    torch::manual_seed(3);  // every rank draws the same seed
    sb::set_dropout_shard(r);
    parts.push_back(sb::fast_dropout(x.slice(0, 2 * r, 2 * r + 2), 0.5, true));
  }
  sb::set_dropout_shard(0);
  EXPECT_TRUE(torch::equal(torch::cat(parts), all));
  EXPECT_FALSE(torch::equal(parts[0] == 0, parts[1] == 0));  // rank 1 does not reuse rank 0's mask
}

// Two ranks as threads of this process, over Gloo on loopback.
TEST(GradientBuckets, MeanOverTwoRanksInSeveralBuckets) {
  std::string why;
  if (!sb::process_group_available("cpu", &why)) GTEST_SKIP() << why;
  const int port = sb::free_local_port();
  // At 100 bytes per bucket: [3 + 5 doubles], [40 alone: larger than a bucket], [2 + 4x2 + 1].
  const std::vector<std::vector<int64_t>> shapes = {{3}, {5}, {40}, {2}, {4, 2}, {1}};
  const size_t no_grad = 3;
  std::vector<std::vector<torch::Tensor>> params(2);
  std::vector<int64_t> bucket_counts(2, 0);
  std::vector<std::string> errors(2);
  auto rank_main = [&](int rank) {
    try {
      sb::RankLayout layout;
      layout.rank = rank;
      layout.world_size = 2;
      layout.local_world_size = 2;
      layout.master_addr = "127.0.0.1";
      layout.master_port = port;
      sb::ProcessGroup pg(layout, torch::Device(torch::kCPU), std::chrono::seconds(30));
      for (size_t i = 0; i < shapes.size(); ++i) {
        auto p = torch::zeros(shapes[i], torch::kFloat64).requires_grad_(true);
        if (i != no_grad) p.mutable_grad() = torch::full(shapes[i], (rank + 1.0) * (i + 1.0), torch::kFloat64);
        params[rank].push_back(p);
      }
      sb::GradientBuckets buckets(params[rank], 100);
      bucket_counts[rank] = buckets.count();
      auto extra = torch::tensor({rank + 0.5}, torch::kFloat64);
      buckets.average(pg, {extra});
      EXPECT_DOUBLE_EQ(extra.item<double>(), 2.0);
    } catch (const std::exception& e) {
      errors[rank] = e.what();
    }
  };
  std::thread t0(rank_main, 0), t1(rank_main, 1);
  t0.join();
  t1.join();
  ASSERT_EQ(errors[0], "");
  ASSERT_EQ(errors[1], "");
  EXPECT_EQ(bucket_counts[0], 3);
  EXPECT_EQ(bucket_counts[1], 3);
  for (int rank = 0; rank < 2; ++rank) {
    for (size_t i = 0; i < shapes.size(); ++i) {
      const torch::Tensor g = params[rank][i].grad();
      ASSERT_TRUE(g.defined()) << "parameter " << i;
      const double want = i == no_grad ? 0.0 : 1.5 * (i + 1.0);  // mean of 1x and 2x; no gradient counts as zeros
      EXPECT_TRUE(torch::equal(g, torch::full(shapes[i], want, torch::kFloat64))) << "rank " << rank << ", parameter " << i;
    }
  }
}

}  // namespace
