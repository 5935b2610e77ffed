// `sparsebench train`: train a byte-level language model on enwik8 over a causal attention pattern.
#include <cstdio>

#include <fmt/format.h>

#include "harness/cli/cli.h"
#include "harness/parallel/launch.h"
#include "harness/parallel/process_group.h"
#include "harness/lm/trainer.h"
#include "common/error.h"

namespace sb {

namespace {

std::string dist_backends_text() {
  const auto one = [](const char* device, const char* backend) {
    return fmt::format("{} {}", device, process_group_available(device, nullptr) ? backend : "none in this build");
  };
  return one("cpu", "Gloo") + ", " + one("cuda", "NCCL");
}

void print_train_help() {
  fmt::print(
      "usage: sparsebench train --data PATH [options]\n"
      "       sparsebench train --task mqar|recall_distance|khop|selective_copy [options]\n\n"
      "Trains a character-level (byte) language model on enwik8 (90/5/5 split) and reports valid/test bits per\n"
      "byte. Get the data with scripts/fetch_enwik8.sh, or use the 4 MB prefix shared/data/enwik8-head.bin.\n"
      "With --task it trains on generated sequences instead (no data file) and reports accuracy on the answer\n"
      "positions, per key-to-query distance where the task has distances, beside the graph's reach.\n\n"
      "Data-parallel: --nproc N starts N local ranks; under torchrun (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR,\n"
      "MASTER_PORT) or srun (SLURM_PROCID, SLURM_NTASKS with MASTER_ADDR/MASTER_PORT exported) this process is one\n"
      "rank. Each rank trains --batch windows of every step; rank 0 writes the run. Process groups: {}.\n"
      "--config-json FILE takes the whole configuration from FILE (how --nproc hands it to its ranks).\n\n"
      "{}",
      dist_backends_text(), train_options_help());
}

}  // namespace

int cmd_train(const std::vector<std::string>& args) {
  std::set<std::string> flags(train_flag_names().begin(), train_flag_names().end());
  flags.insert("help");
  const Args a(args, flags);
  if (a.flag("help")) {
    print_train_help();
    return 0;
  }
  std::set<std::string> known(train_option_names().begin(), train_option_names().end());
  known.insert("config-json");
  a.check_known(known);
  if (!a.positional().empty()) throw Error(fmt::format("train: unexpected argument '{}'", a.positional().front()));
  // Pattern parameters ("set") accumulate; every other option takes its last value.
  std::vector<std::pair<std::string, std::string>> options;
  for (const std::string& name : train_option_names()) {
    if (!a.has(name)) continue;
    if (name == "set") {
      for (const std::string& v : a.all(name)) options.emplace_back(name, v);
    } else {
      options.emplace_back(name, *a.maybe(name));
    }
  }
  if (a.has("config-json") && !options.empty()) {
    throw Error(fmt::format("--config-json takes the whole configuration; drop --{}", options.front().first));
  }
  const TrainConfig cfg =
      a.has("config-json") ? read_rank_config(*a.maybe("config-json")) : train_config_from_options(options);
  const RankLayout layout = rank_layout_from_environment(environment_map());
  if (!layout.distributed() && cfg.nproc > 1) {
    // The launcher: the ranks are this command again, told their place by torchrun's variables and handed the
    // recorded config (not flags to parse back).
    std::string why;
    if (!process_group_available(cfg.device, &why)) throw Error(fmt::format("--nproc {}: {}", cfg.nproc, why));
    return run_ranks_with_config(cfg, train_config_json(cfg));
  }
  nlohmann::json result;
  try {
    result = train(cfg, layout);
  } catch (const RankFailure& e) {
    fmt::print(stderr, "sparsebench train: error: {}\n", e.what());
    return 1;
  }
  const std::string status = result.value("status", "");
  const int rc = status == "ok" || status == "stopped" ? 0 : 1;
  if (layout.rank != 0) return rc;  // rank 0 reports for the run
  fmt::print("train: log {0}/metrics.jsonl, checkpoint {0}/checkpoint.pt, result {0}/result.json\n", cfg.out_dir);
  fmt::print("{}\n", result.dump());
  std::fflush(stdout);
  return rc;
}

}  // namespace sb
