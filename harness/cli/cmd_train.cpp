// `sparsebench train`: train a byte-level language model on enwik8 over a causal attention pattern.
#include <cstdio>

#include <fmt/format.h>

#include "harness/cli/cli.h"
#include "harness/lm/trainer.h"
#include "common/error.h"

namespace sb {

namespace {

void print_train_help() {
  const TrainConfig d;
  fmt::print(
      "usage: sparsebench train --data PATH [options]\n\n"
      "Trains a character-level (byte) language model on enwik8 (90/5/5 split) and reports valid/test bits per\n"
      "byte. Get the data with scripts/fetch_enwik8.sh, or use the 4 MB prefix shared/data/enwik8-head.bin.\n\n"
      "model:\n"
      "  --pattern NAME        causal attention pattern from the registry (default {})\n"
      "  --set K=V             pattern parameter, repeatable (e.g. --set k=4)\n"
      "  --attention MODE      graph (pattern graph attention) | dense (plain LibTorch baseline) (default {})\n"
      "  --context N           bytes per training window (default {})\n"
      "  --layers N --dim N --heads N --ffn N   (defaults {} / {} / {} / {})\n"
      "  --dropout P           (default {})\n"
      "  --post-norm           post-norm blocks as in the paper (default pre-norm)\n"
      "  --positions MODE      relative (per-layer relation embeddings) | absolute (default {})\n"
      "training:\n"
      "  --data PATH           enwik8 or a prefix of it (required)\n"
      "  --out DIR             where metrics.jsonl, checkpoint.pt and result.json go (default {})\n"
      "  --steps N             optimizer steps, the schedule's length (default {})\n"
      "  --minutes M           training-time budget; 0 = none (default 0)\n"
      "  --batch N --lr X --warmup N --min-lr-ratio X   (defaults {} / {} / {} / {})\n"
      "  --weight-decay X --beta1 X --beta2 X --clip X  (defaults {} / {} / {} / {}; clip 0 = off)\n"
      "  --seed N              (default {})\n"
      "  --eval-every N        valid evaluation every N steps, 0 = end only (default {})\n"
      "  --eval-bytes N        valid bytes scored at those evaluations, 0 = all (default {})\n"
      "  --eval-batch N        windows per evaluation pass (default {})\n"
      "  --checkpoint-every N  (default {}; also at the end)\n"
      "  --log-every N         progress line every N steps (default {})\n"
      "  --threads N           CPU threads, 0 = all cores, at most 1024 (default 0)\n"
      "  --resume              continue from DIR/checkpoint.pt (refused when settings differ from the checkpoint's)\n"
      "  --allow-changes       with --resume: continue with changed settings; result.json records old and new\n"
      "  --overwrite           replace an earlier run in --out DIR (without it, train refuses to)\n"
      "  --profile             split a step's time: graph attention, matmuls, norms, GELU, dropout, other, optimizer\n"
      "  --no-final-eval       skip the full valid/test evaluation at the end\n"
      "  --quiet               no progress lines (the final JSON line is still printed)\n"
      "  --stop-after N        stop after N steps of this process as if interrupted (for resume checks)\n",
      d.model.pattern, d.model.attention, d.model.context, d.model.layers, d.model.dim, d.model.heads, d.model.ffn,
      d.model.dropout, d.model.positions, d.out_dir, d.steps, d.batch, d.lr, d.warmup, d.min_lr_ratio,
      d.weight_decay, d.beta1, d.beta2, d.clip, d.seed, d.eval_every, d.eval_bytes, d.eval_batch,
      d.checkpoint_every, d.log_every);
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
