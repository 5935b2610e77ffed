// Generated long-range tasks as training data (mqar, recall_distance, khop, selective_copy): token sequences that
// are a deterministic function of (seed, split, step, row), their answer positions, scoring and reach.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "harness/lm/config.h"
#include "harness/lm/model.h"

namespace sb {

class ProcessGroup;

// A task's settings after checking (from the task_* fields of TrainConfig).
struct TaskSpec {
  std::string name = "enwik8";       // "enwik8": the byte corpus, no generated task
  int64_t context = 0;               // inputs per sequence (the model's context)
  int64_t vocab = 0;                 // symbols used, <= 256
  int64_t pairs = 0;                 // mqar: key-value pairs; recall_distance: planted pairs; selective_copy: tokens
  int64_t pairs_min = 0;             // mqar: training sequences draw their pair count from [pairs_min, pairs]; 0: off
  bool hidden = false;               // mqar, recall_distance: answers are targets only, never inputs
  int64_t hops = 0;                  // khop: chain steps from query to answer
  std::vector<int64_t> distances;    // recall_distance: planted distances
  std::vector<std::pair<int64_t, int64_t>> buckets;  // distance buckets [lo, hi] accuracy is reported by
  bool active() const { return name != "enwik8"; }
};

// Checks the task fields of `cfg` against each other, the context and the vocabulary; throws sb::Error naming the
// field (task_pairs, task_distances, ...) or /train/data when a task is given with a data file.
TaskSpec task_spec(const TrainConfig& cfg);

enum class TaskSplit { train = 0, valid = 1, test = 2 };
const char* task_split_name(TaskSplit split);

// Rows [first_row, first_row + rows) of the `batch` sequences of one step (every rank can draw its own rows: a
// row depends on (seed, split, step, row index) only). tokens [rows, context + 1] int64 (targets are the last
// context); inputs [rows, context] int64: the first context, with filler after each query when answers are hidden;
// answer [rows, context] float 0/1: targets that are scored; bucket [rows, context] int64: the distance bucket of
// each scored target, -1 when none.
struct TaskBatch {
  torch::Tensor tokens, inputs, answer, bucket;
};
TaskBatch task_batch(const TaskSpec& spec, uint64_t seed, TaskSplit split, int64_t step, int64_t batch,
                     int64_t first_row, int64_t rows);

// The accuracy of always guessing among the task's possible answers (1 / number of answer symbols).
double task_chance(const TaskSpec& spec);

// Mean cross-entropy over answer positions only: logits [B, T, V], targets [B, T], answer [B, T].
torch::Tensor task_loss(const torch::Tensor& logits, const torch::Tensor& targets, const torch::Tensor& answer);

// Accuracy (argmax) and loss on `sequences` generated sequences of `split`, overall and per distance bucket; with a
// process group the batches are shared out and the sums exchanged.
nlohmann::json task_evaluate(LanguageModel& model, const TaskSpec& spec, uint64_t seed, TaskSplit split,
                             int64_t sequences, int64_t eval_batch, ProcessGroup* pg);
// task_evaluate calls made by this process (a test counts that a run evaluates each split once per step).
int64_t task_evaluations();

// What the record says of the task: name, parameters, chance, buckets.
nlohmann::json task_json(const TaskSpec& spec);

// The graph's prediction per distance bucket for this model: for sampled query positions, the fewest hops from a
// planted key and its value to the query (both must arrive), against cfg.model.layers. Null for tasks without
// buckets. The dense baselines reach every earlier token in one hop.
nlohmann::json task_reach(const TrainConfig& cfg, const TaskSpec& spec);

}  // namespace sb
