// `sparsebench train`: train a byte-level language model on enwik8 over a causal attention pattern.
#include <cstdio>

#include <fmt/format.h>

#include "harness/cli/cli.h"
#include "harness/lm/trainer.h"
#include "common/error.h"

namespace sb {

namespace {

void print_train_help() {
  fmt::print(
      "usage: sparsebench train --data PATH [options]\n\n"
      "Trains a character-level (byte) language model on enwik8 (90/5/5 split) and reports valid/test bits per\n"
      "byte. Get the data with scripts/fetch_enwik8.sh, or use the 4 MB prefix shared/data/enwik8-head.bin.\n\n"
      "{}",
      train_options_help());
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
  const TrainConfig cfg = train_config_from_options(options);
  const nlohmann::json result = train(cfg);
  fmt::print("train: log {0}/metrics.jsonl, checkpoint {0}/checkpoint.pt, result {0}/result.json\n", cfg.out_dir);
  fmt::print("{}\n", result.dump());
  std::fflush(stdout);
  const std::string status = result.value("status", "");
  return status == "ok" || status == "stopped" ? 0 : 1;
}

}  // namespace sb
