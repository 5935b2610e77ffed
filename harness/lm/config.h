// Model and training configuration: every field described once (JSON key, CLI option, type, range, default, help,
// where scenario files take it). CLI parsing, --help, scenario validation, scenarios/schema.json and the config
// recorded in result.json and records all come from these rows. Plain C++, no LibTorch.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/limits.h"
#include "patterns/pattern.h"

namespace sb {

// One row per field: F(member, C++ type, default, spec). The spec (built in config.cpp) gives the JSON key, range
// and help; the CLI option is the key with '-' for '_' unless .flag() renames it; .scenario(section, default)
// lets scenario files set it under /section (top level for "") with its own default there. Adding an option is
// adding a row: the struct member, the CLI option, --help, the scenario key, the schema and the recorded config
// follow from it.
#define SB_MODEL_FIELDS(F)                                                                                          \
  F(pattern, std::string, "bpt", text("pattern", "causal attention pattern from the registry"))                      \
  F(pattern_params, Params, {}, params("pattern_params", "pattern parameter K=V, repeatable (e.g. --set k=4)")      \
                                    .flag("set"))                                                                   \
  F(attention, std::string, "graph",                                                                                \
    choice("attention", {"graph", "dense", "dense_naive"},                                                          \
           "graph (pattern graph attention) | dense (best dense LibTorch op: SDPA on LibTorch >= 2) | "                \
           "dense_naive (materialised scores, the paper's baseline)"))                                                \
  F(causal, bool, true, boolean("causal", "left-to-right attention (language models are causal)").no_flag())        \
  F(context, int64_t, 512, integer("context", 2, int64_t{1} << 20, "bytes per training window"))                   \
  F(layers, int64_t, 2, integer("layers", 1, 1024, "Transformer blocks").scenario("model", 6))                       \
  F(dim, int64_t, 128, integer("dim", 1, 65536, "model width").scenario("model", 512))                              \
  F(heads, int64_t, 4, integer("heads", 1, 4096, "attention heads; divides dim").scenario("model", 8))              \
  F(ffn, int64_t, 512, integer("ffn", 1, int64_t{1} << 20, "feed-forward width").scenario("model", 2048))          \
  F(dropout, double, 0.1, real("dropout", 0.0, 0.99, "dropout probability").scenario("model", 0.0))                 \
  F(post_norm, bool, false, boolean("post_norm", "post-norm blocks as in the paper (default pre-norm)")            \
                                .scenario("model", false))                                                          \
  F(positions, std::string, "relative",                                                                             \
    choice("positions", {"relative", "absolute"}, "relative (per-layer relation embeddings) | absolute")           \
        .scenario("model", "relative"))

#define SB_TRAIN_FIELDS(F)                                                                                          \
  F(device, std::string, "cpu", choice("device", {"cpu", "cuda"}, "where tensors live").scenario("", "cpu"))         \
  F(data, std::string, "", text("data", "enwik8 or a prefix of it (required to train on enwik8)").scenario("train", nullptr))  \
  F(task, std::string, "enwik8",                                                                                    \
    choice("task", {"enwik8", "mqar", "recall_distance", "khop", "selective_copy"},                                 \
           "training data: enwik8 (--data) | a generated task scored on its answers: mqar (associative recall), "   \
           "recall_distance (one key-value per distance), khop (follow k links), selective_copy")                 \
        .scenario("train", "enwik8"))                                                                               \
  F(task_vocab, int64_t, 64, integer("task_vocab", 16, 256, "task symbols: filler/noise a quarter, keys a quarter, " \
                                                         "values (answers) half").scenario("train", 64))           \
  F(task_pairs, int64_t, 8, integer("task_pairs", 1, int64_t{1} << 20, "mqar: key-value pairs; recall_distance: "  \
                                                                       "pairs planted per sequence; selective_copy: tokens to copy") \
                                .scenario("train", 8))                                                              \
  F(task_pairs_min, int64_t, 0, integer("task_pairs_min", 0, int64_t{1} << 20, "mqar: training sequences hold "     \
                                                                             "task_pairs_min to task_pairs pairs "  \
                                                                             "(valid and test task_pairs); 0: off") \
                                    .scenario("train", 0))                                                          \
  F(task_answers, std::string, "revealed",                                                                         \
    choice("task_answers", {"revealed", "hidden"},                                                                  \
           "mqar, recall_distance: revealed (the answer is the input after its query, as in a text) | hidden "      \
           "(Zoology's MQAR: answers are targets only; the input after a query is filler)")                         \
        .scenario("train", "revealed"))                                                                             \
  F(task_hops, int64_t, 2, integer("task_hops", 1, 254, "khop: links from the query to its answer").scenario("train", 2)) \
  F(task_distances, std::string, "", text("task_distances", "recall_distance: key-to-query distances, comma-separated " \
                                                            "(default 2, 4, 8, ... below the context)")            \
                                         .scenario("train", nullptr))                                               \
  F(task_eval, int64_t, 256, integer("task_eval", 1, int64_t{1} << 30, "task: held-out sequences scored per "       \
                                                                     "evaluation (valid; test at the end)")        \
                                 .scenario("train", 256))                                                           \
  F(out_dir, std::string, "results/train",                                                                          \
    text("out_dir", "where metrics.jsonl, checkpoint.pt and result.json go").flag("out"))                          \
  F(steps, int64_t, 20000, integer("steps", 1, int64_t{1} << 40, "optimizer steps, the schedule's length")          \
                               .scenario("train", 20000))                                                           \
  F(minutes, double, 0.0, real("minutes", 0.0, 1e7, "training-time budget; 0 = none").scenario("train", 0.0))       \
  F(batch, int64_t, 4, integer("batch", 1, 65536, "windows per step").scenario("train", 8))                         \
  F(lr, double, 3e-3, real("lr", 0.0, 10.0, "peak learning rate").open_below().scenario("train", 3e-3))             \
  F(min_lr_ratio, double, 0.1, real("min_lr_ratio", 0.0, 1.0, "cosine decays to lr * min_lr_ratio")                \
                                   .scenario("train", 0.1))                                                         \
  F(warmup, int64_t, 100, integer("warmup", 0, int64_t{1} << 40, "learning-rate warm-up steps")                     \
                              .scenario("train", 100))                                                              \
  F(weight_decay, double, 0.01, real("weight_decay", 0.0, 10.0, "AdamW weight decay (matrices only)")              \
                                    .scenario("train", 0.01))                                                       \
  F(beta1, double, 0.9, real("beta1", 0.0, 0.999999, "AdamW beta1").scenario("train", 0.9))                         \
  F(beta2, double, 0.99, real("beta2", 0.0, 0.999999, "AdamW beta2").scenario("train", 0.99))                       \
  F(clip, double, 1.0, real("clip", 0.0, 1e9, "gradient-norm clip; 0 = off").scenario("train", 1.0))                \
  F(seed, int64_t, 1, integer("seed", 0, int64_t{1} << 62, "seeds weights, dropout and data").scenario("", 0))       \
  F(eval_every, int64_t, 200, integer("eval_every", 0, int64_t{1} << 40, "valid evaluation every N steps, 0 = end only") \
                                  .scenario("train", 200))                                                          \
  F(eval_bytes, int64_t, 65536, integer("eval_bytes", 0, int64_t{1} << 40, "valid bytes scored at those evaluations, 0 = all") \
                                    .scenario("train", 65536))                                                      \
  F(eval_batch, int64_t, 8, integer("eval_batch", 1, 65536, "windows per evaluation pass").scenario("train", 8))    \
  F(lens_bytes, int64_t, 65536, integer("lens_bytes", 0, int64_t{1} << 40, "valid bytes scored again at the end seeing only their last 16, 64, 256 and context bytes (BPC by available context), 0 = off") \
                                    .scenario("train", 65536))                                                      \
  F(checkpoint_every, int64_t, 500, integer("checkpoint_every", 0, int64_t{1} << 40, "checkpoint every N steps (also at the end)") \
                                        .scenario("train", 500))                                                    \
  F(log_every, int64_t, 50, integer("log_every", 1, int64_t{1} << 40, "progress line every N steps")                \
                                .scenario("train", 50))                                                             \
  F(threads, int64_t, 0, integer("threads", 0, kMaxThreads, "CPU threads per rank, 0 = the cores this process may use (affinity, cgroup quota) split between ranks")) \
  F(nproc, int64_t, 1, integer("nproc", 1, 1024, "data-parallel ranks started here (each with --batch windows); under torchrun or srun the world size") \
                           .scenario("train", 1))                                                                  \
  F(dtype, std::string, "float32", choice("dtype", {"float32", "float64", "bfloat16", "float16"}, "compute precision: float32 | float64 everywhere; bfloat16 | float16 mixed (matmuls and attention in it; weights, norms, softmax statistics and the optimizer in float32; float16 with dynamic loss scaling)")  \
                                       .scenario("train", "float32"))                                              \
  F(dist_timeout, double, 45.0, real("dist_timeout", 1.0, 86400.0, "seconds a rank waits for the others (rendezvous, collectives) before it stops") \
                                    .not_recorded())                                                        \
  F(profile, bool, false, boolean("profile", "split a step's time: graph attention, matmuls, norms, GELU, dropout, other, optimizer") \
                              .scenario("train", false))                                                            \
  F(final_eval, bool, true, boolean("final_eval", "full valid/test evaluation at the end (--no-final-eval skips it)")                \
                                .flag("no-final-eval").negated().scenario("train", true))                           \
  F(resume, bool, false, boolean("resume", "continue from DIR/checkpoint.pt (refused when settings differ from the checkpoint's)") \
                              .not_recorded())                                                              \
  F(allow_changes, bool, false, boolean("allow_changes", "with --resume: continue with changed settings; result.json records old and new") \
                                    .not_recorded())                                                        \
  F(overwrite, bool, false, boolean("overwrite", "replace an earlier run in --out DIR (without it, train refuses to)") \
                                .not_recorded())                                                            \
  F(quiet, bool, false, boolean("quiet", "no progress lines (the final JSON line is still printed)").not_recorded()) \
  F(stop_after, int64_t, 0, integer("stop_after", 0, int64_t{1} << 40, "stop after N steps of this process as if interrupted (for resume checks)") \
                                .not_recorded())

#define SB_DECLARE_FIELD(member, type, default_value, spec) type member = default_value;

struct ModelConfig {
  SB_MODEL_FIELDS(SB_DECLARE_FIELD)
};

struct TrainConfig {
  ModelConfig model;
  SB_TRAIN_FIELDS(SB_DECLARE_FIELD)
};

#undef SB_DECLARE_FIELD

// The dense baselines (no pattern graph): "dense" (the best dense LibTorch op) and "dense_naive".
inline bool is_dense_attention(const std::string& attention) {
  return attention == "dense" || attention == "dense_naive";
}
// Whether a dense baseline stores all T x T scores: dense_naive always; dense unless LibTorch runs it through
// scaled_dot_product_attention's fused kernels (LibTorch >= 2.0: SB_DENSE_FUSED).
inline bool dense_materialises(const std::string& attention) {
#ifdef SB_DENSE_FUSED
  return attention == "dense_naive";
#else
  return is_dense_attention(attention);
#endif
}

enum class FieldType { integer, real, boolean, text, choice, params };

// The description of one field; the rows above make one each.
struct FieldSpec {
  std::string key;                   // JSON key in records, result.json and scenario files
  std::string flag;                  // CLI option without "--" ("" = not on the CLI)
  FieldType type = FieldType::text;
  double lo = 0.0, hi = 0.0;         // integer / real range, inclusive
  bool lo_open = false, hi_open = false;  // real: lo / hi themselves excluded
  std::vector<std::string> choices;  // choice
  std::string help;
  bool model = false;                // lives in ModelConfig (result.json: config.model)
  bool negated = false;              // boolean whose CLI flag sets it false (--no-final-eval)
  bool recorded = true;              // written into the recorded config
  bool in_scenario = false;          // scenario files set it under /section
  std::string section;               // "" top level, "model", "train"
  nlohmann::json scenario_default;   // its default in scenario files (null: none, e.g. data)
  nlohmann::json cli_default;        // the struct's default
  std::function<nlohmann::json(const TrainConfig&)> get;
  std::function<void(TrainConfig&, const nlohmann::json&)> set;

  bool is_switch() const { return type == FieldType::boolean; }  // on the CLI a boolean is a flag without value
};

// Every model and training field, model first, in row order.
const std::vector<FieldSpec>& config_fields();
// The field with JSON key `key` (nullptr when none).
const FieldSpec* find_config_field(const std::string& key);

// What is wrong with `v` for field `f` ("expected an integer in [1, 1024]"), "" when it fits. `quote` is how
// choices are shown: '\'' on the command line, '"' in JSON documents.
std::string field_problem(const FieldSpec& f, const nlohmann::json& v, char quote);
// The range of a number field in words: "in [1, 1024]", ">= 0", "> 0 and <= 10".
std::string field_range_text(const FieldSpec& f);

// Parses a CLI value of `f` ("--batch 8"); throws sb::Error "--batch: expected an integer in [1, 65536], got 0".
nlohmann::json parse_cli_value(const FieldSpec& f, const std::string& text);

// Fills a TrainConfig from CLI option names (without "--") and their values; "set" holds K=V and accumulates,
// every other option takes its last value; switches take true/false words. Throws sb::Error naming the option.
TrainConfig train_config_from_options(const std::vector<std::pair<std::string, std::string>>& options);

// Every CLI option of `sparsebench train`, and those that take no value.
const std::vector<std::string>& train_option_names();
const std::vector<std::string>& train_flag_names();
// The options part of `sparsebench train --help`, with defaults and ranges.
std::string train_options_help();

// Checks every field's range and what ties fields together (heads divides dim); throws sb::Error "FIELD: ...".
void validate_model_config(const ModelConfig& cfg);
void validate_train_config(const TrainConfig& cfg);  // the model's fields and the training fields

// The command-line options that give `cfg` back through train_config_from_options (every field with an option,
// at its value): how `train --nproc N` hands a configuration to its ranks.
std::vector<std::pair<std::string, std::string>> train_config_options(const TrainConfig& cfg);

// The recorded configuration: {"model": {...}, "data": ..., ...} (result.json, checkpoints, training records).
nlohmann::json train_config_json(const TrainConfig& cfg);
// The fields a run takes but does not record (resume, overwrite, quiet, stop_after, ...), by JSON key.
nlohmann::json train_settings_json(const TrainConfig& cfg);
// A config back from its recorded form and its settings (how a sweep hands a point to a child process and `train
// --nproc` its config to the ranks); throws sb::Error "WHERE: /config/KEY: ..." naming a missing or bad field.
// Without check_ranges only the types are checked (a timing point's config may hold values the trainer refuses).
TrainConfig train_config_from_json(const nlohmann::json& config, const nlohmann::json& settings,
                                   const std::string& where, bool check_ranges = true);
// Times this process has serialised a training config (the runner's records show how many times a point did).
int64_t train_config_serialisations();
nlohmann::json model_config_json(const ModelConfig& cfg);

}  // namespace sb
