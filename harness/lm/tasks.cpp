// Generated long-range tasks: sequence generators, answer masks, masked loss, evaluation by distance and the graph's
// reach prediction for each distance bucket.
#include "harness/lm/tasks.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/error.h"
#include "common/hash.h"
#include "common/text.h"
#include "harness/parallel/process_group.h"
#include "patterns/pattern.h"
#include "patterns/reach.h"

namespace sb {

namespace {

using json = nlohmann::json;

// A row's random stream: SplitMix64 over a counter, plain modulo draws (the same on every standard library).
struct RowRng {
  uint64_t state;
  RowRng(uint64_t seed, TaskSplit split, int64_t step, int64_t row)
      : state(splitmix64(splitmix64(splitmix64(seed ^ 0x7461736bull) + static_cast<uint64_t>(split)) +
                         splitmix64(static_cast<uint64_t>(step) * 0x100000001b3ull + static_cast<uint64_t>(row)))) {}
  uint64_t next() { return splitmix64(state += 0x9e3779b97f4a7c15ull); }
  int64_t below(int64_t n) { return static_cast<int64_t>(next() % static_cast<uint64_t>(n)); }
};

// Token ranges of the tasks over a vocabulary of V symbols: filler (noise) [0, V/4), keys [V/4, V/2), values
// (answers) [V/2, V). khop uses [1, V) for its chain and 0 as separator.
int64_t quarter(const TaskSpec& s) { return s.vocab / 4; }

// Distinct keys, drawn without replacement from the key range.
std::vector<int64_t> draw_keys(const TaskSpec& s, RowRng& rng, int64_t count) {
  std::vector<int64_t> keys;
  for (int64_t k = quarter(s); k < 2 * quarter(s); ++k) keys.push_back(k);
  for (int64_t i = 0; i < count; ++i) std::swap(keys[static_cast<size_t>(i)], keys[static_cast<size_t>(i + rng.below(static_cast<int64_t>(keys.size()) - i))]);
  keys.resize(static_cast<size_t>(count));
  return keys;
}

int64_t bucket_of(const TaskSpec& s, int64_t d) {
  for (size_t b = 0; b < s.buckets.size(); ++b) {
    if (d >= s.buckets[b].first && d <= s.buckets[b].second) return static_cast<int64_t>(b);
  }
  return -1;
}

// One sequence: seq [T = context + 1], answer / bucket [context] (position t scores target seq[t + 1]).
void generate(const TaskSpec& s, TaskSplit split, RowRng& rng, int64_t* seq, float* answer, int64_t* bucket) {
  const int64_t T = s.context + 1, F = quarter(s), values = s.vocab - 2 * F;
  std::fill(answer, answer + s.context, 0.0f);
  std::fill(bucket, bucket + s.context, int64_t{-1});
  std::vector<char> used(static_cast<size_t>(T), 0);
  // mqar draws a sequence's values without replacement, as Zoology does: with repeats a model scores well above
  // chance from which values recur and where a query stands, without matching keys (results/recall_quick/diagnostics).
  // (task_spec keeps pairs <= keys <= values, so the pool never runs out.)
  const bool distinct_values = s.name == "mqar";
  std::vector<int64_t> unused_values;
  for (int64_t v = 0; distinct_values && v < values; ++v) unused_values.push_back(2 * F + v);
  auto draw_value = [&]() {
    if (!distinct_values) return 2 * F + rng.below(values);
    const auto j = static_cast<size_t>(rng.below(static_cast<int64_t>(unused_values.size())));
    const int64_t value = unused_values[j];
    unused_values[j] = unused_values.back();
    unused_values.pop_back();
    return value;
  };
  // A key at `pk` with its value after it, queried at `q` (the value follows the query: the scored target).
  auto plant = [&](int64_t pk, int64_t q, int64_t key) {
    const int64_t value = draw_value();
    seq[pk] = seq[q] = key;
    seq[pk + 1] = seq[q + 1] = value;
    for (const int64_t p : {pk, pk + 1, q, q + 1}) used[static_cast<size_t>(p)] = 1;
    answer[q] = 1.0f;
    bucket[q] = bucket_of(s, q - pk);
  };
  auto free_at = [&](std::initializer_list<int64_t> ps) {
    for (const int64_t p : ps) {
      if (used[static_cast<size_t>(p)]) return false;
    }
    return true;
  };
  if (s.name == "recall_distance" || s.name == "mqar") {
    for (int64_t t = 0; t < T; ++t) seq[t] = rng.below(F);  // filler
    // mqar with pairs_min: training sequences hold between pairs_min and pairs pairs (easier ones among the hard);
    // valid and test always hold pairs, so the scores are the task's.
    const int64_t pairs = s.name == "mqar" && s.pairs_min > 0 && split == TaskSplit::train
                              ? s.pairs_min + rng.below(s.pairs - s.pairs_min + 1)
                              : s.pairs;
    const std::vector<int64_t> keys = draw_keys(s, rng, pairs);
    // mqar: query slots (2 tokens each) after the pairs, slot g (0-based) drawn with weight 1/(g + 1) as Zoology draws
    // its gaps (power law x^(a-1), a = 0.01): most queries close to the pairs, a tail to the end. Integer weights,
    // so every standard library draws the same slots.
    std::vector<uint64_t> cum;
    if (s.name == "mqar") {
      const int64_t slots = (T - 1 - 2 * pairs) / 2;
      cum.resize(static_cast<size_t>(slots));
      uint64_t total = 0;
      for (int64_t g = 0; g < slots; ++g) cum[static_cast<size_t>(g)] = total += (uint64_t{1} << 40) / static_cast<uint64_t>(g + 1);
    }
    for (int64_t i = 0; i < pairs; ++i) {
      // recall_distance: the distance is chosen and the pair placed anywhere it fits; mqar (Zoology's layout): every
      // pair up front, each key queried once later.
      const int64_t d = s.name == "recall_distance" ? s.distances[static_cast<size_t>(rng.below(static_cast<int64_t>(s.distances.size())))] : 0;
      for (int attempt = 0; attempt < 64; ++attempt) {
        int64_t pk, q;
        if (d > 0) {
          q = d + rng.below(T - 1 - d);
          pk = q - d;
        } else {
          pk = 2 * i;
          const uint64_t r = rng.next() % cum.back();
          q = 2 * pairs + 2 * static_cast<int64_t>(std::upper_bound(cum.begin(), cum.end(), r) - cum.begin());
        }
        if (d > 0 ? !free_at({pk, pk + 1, q, q + 1}) : !free_at({q, q + 1})) continue;
        plant(pk, q, keys[static_cast<size_t>(i)]);
        break;
      }
      if (d == 0 && !used[static_cast<size_t>(2 * i)]) {  // no free query slot: the pair still stands up front
        seq[2 * i] = keys[static_cast<size_t>(i)];
        seq[2 * i + 1] = draw_value();
        used[static_cast<size_t>(2 * i)] = used[static_cast<size_t>(2 * i + 1)] = 1;
      }
    }
  } else if (s.name == "khop") {
    // A chain c0 -> c1 -> ... of distinct symbols, its links listed in random order, then queries "0 x y" with
    // y the symbol `hops` links after x.
    const int64_t m = std::min(s.vocab - 1, std::max(s.hops + 2, s.context / 4));
    std::vector<int64_t> chain;
    for (int64_t v = 1; v < s.vocab; ++v) chain.push_back(v);
    for (int64_t i = 0; i < m; ++i) std::swap(chain[static_cast<size_t>(i)], chain[static_cast<size_t>(i + rng.below(static_cast<int64_t>(chain.size()) - i))]);
    std::vector<int64_t> links;
    for (int64_t j = 0; j + 1 < m; ++j) links.push_back(j);
    for (int64_t i = static_cast<int64_t>(links.size()) - 1; i > 0; --i) std::swap(links[static_cast<size_t>(i)], links[static_cast<size_t>(rng.below(i + 1))]);
    int64_t t = 0;
    for (const int64_t j : links) seq[t++] = chain[static_cast<size_t>(j)], seq[t++] = chain[static_cast<size_t>(j + 1)];
    while (t + 3 <= T) {
      const int64_t j = rng.below(m - s.hops);
      seq[t] = 0;
      seq[t + 1] = chain[static_cast<size_t>(j)];
      seq[t + 2] = chain[static_cast<size_t>(j + s.hops)];
      answer[t + 1] = 1.0f;
      t += 3;
    }
    for (; t < T; ++t) seq[t] = 0;
  } else {  // selective_copy: N content tokens among noise, a separator, then the N in order
    const int64_t n = s.pairs, region = T - 1 - n;
    for (int64_t t = 0; t < region; ++t) seq[t] = rng.below(F);
    std::vector<int64_t> pos;
    for (int64_t t = 0; t < region; ++t) pos.push_back(t);
    for (int64_t i = 0; i < n; ++i) std::swap(pos[static_cast<size_t>(i)], pos[static_cast<size_t>(i + rng.below(region - i))]);
    pos.resize(static_cast<size_t>(n));
    std::sort(pos.begin(), pos.end());
    seq[region] = F;  // the separator (a key-range symbol, never noise or content)
    for (int64_t i = 0; i < n; ++i) {
      const int64_t v = 2 * F + rng.below(values);
      seq[pos[static_cast<size_t>(i)]] = v;
      seq[region + 1 + i] = v;
      answer[region + i] = 1.0f;
    }
  }
}

std::vector<int64_t> parse_distances(const std::string& text) {
  std::vector<int64_t> out;
  size_t from = 0;
  while (from <= text.size()) {
    const size_t comma = std::min(text.find(',', from), text.size());
    const auto d = parse_int64(text.substr(from, comma - from));
    if (!d) throw Error(fmt::format("task_distances: expected comma-separated integers, got '{}'", text));
    out.push_back(*d);
    from = comma + 1;
  }
  return out;
}

}  // namespace

const char* task_split_name(TaskSplit split) {
  return split == TaskSplit::train ? "train" : split == TaskSplit::valid ? "valid" : "test";
}

TaskSpec task_spec(const TrainConfig& cfg) {
  TaskSpec s;
  s.name = cfg.task;
  s.context = cfg.model.context;
  if (!s.active()) return s;
  if (!cfg.data.empty()) {
    throw Error(fmt::format("task: '{}' generates its data; it takes no data file (--data / /train/data '{}')",
                            cfg.task, cfg.data));
  }
  s.vocab = cfg.task_vocab;
  s.pairs = cfg.task_pairs;
  s.hops = cfg.task_hops;
  s.pairs_min = cfg.task_pairs_min;
  s.hidden = cfg.task_answers == "hidden";
  if (s.hidden && s.name != "mqar" && s.name != "recall_distance") {
    throw Error(fmt::format("task_answers: only mqar and recall_distance hide answers (task '{}')", s.name));
  }
  if (s.pairs_min != 0 && s.name != "mqar") {
    throw Error(fmt::format("task_pairs_min: only mqar takes it (task '{}')", s.name));
  }
  if (s.pairs_min > s.pairs) {
    throw Error(fmt::format("task_pairs_min: {} is more than task_pairs {}", s.pairs_min, s.pairs));
  }
  const int64_t F = s.vocab / 4, T = s.context + 1;
  if (s.name == "mqar" || s.name == "recall_distance") {
    if (s.pairs > F) {
      throw Error(fmt::format("task_pairs: {} pairs need {} distinct keys, but task_vocab {} has {} (a quarter of it)",
                              s.pairs, s.pairs, s.vocab, F));
    }
    if (4 * s.pairs > s.context) {
      throw Error(fmt::format("task_pairs: {} pairs take {} tokens (key, value, query, answer each), more than the "
                              "context {}", s.pairs, 4 * s.pairs, s.context));
    }
  }
  if (s.name == "recall_distance") {
    if (cfg.task_distances.empty()) {
      for (int64_t d = 2; d < s.context; d *= 2) s.distances.push_back(d);
    } else {
      s.distances = parse_distances(cfg.task_distances);
    }
    for (const int64_t d : s.distances) {
      if (d < 2 || d >= s.context) {
        throw Error(fmt::format("task_distances: distance {} is outside [2, context - 1 = {}] (the key's value "
                                "comes between key and query; the query is an input)", d, s.context - 1));
      }
    }
    std::sort(s.distances.begin(), s.distances.end());
    s.distances.erase(std::unique(s.distances.begin(), s.distances.end()), s.distances.end());
    for (const int64_t d : s.distances) s.buckets.emplace_back(d, d);
  } else if (!cfg.task_distances.empty()) {
    throw Error(fmt::format("task_distances: only recall_distance takes distances (task '{}')", s.name));
  }
  if (s.name == "mqar") {
    for (int64_t lo = 2; lo < s.context; lo *= 2) s.buckets.emplace_back(lo, std::min(2 * lo - 1, s.context - 1));
  }
  if (s.name == "khop") {
    if (s.hops > s.vocab - 2) {
      throw Error(fmt::format("task_hops: {} hops need a chain of {} distinct symbols; task_vocab {} has {}", s.hops,
                              s.hops + 1, s.vocab, s.vocab - 1));
    }
    const int64_t m = std::min(s.vocab - 1, std::max(s.hops + 2, s.context / 4));
    if (2 * (m - 1) + 3 > T) {
      throw Error(fmt::format("task_hops: a chain of {} links and one query do not fit in the context {}", m - 1,
                              s.context));
    }
  }
  if (s.name == "selective_copy" && 2 * s.pairs > s.context) {
    throw Error(fmt::format("task_pairs: {} tokens to copy need a context of at least {}, got {}", s.pairs,
                            2 * s.pairs, s.context));
  }
  return s;
}

TaskBatch task_batch(const TaskSpec& spec, uint64_t seed, TaskSplit split, int64_t step, int64_t batch,
                     int64_t first_row, int64_t rows) {
  if (first_row < 0 || rows < 0 || first_row + rows > batch) {
    throw Error(fmt::format("task_batch: rows [{}, {}) are not inside a batch of {}", first_row, first_row + rows,
                            batch));
  }
  TaskBatch b;
  const int64_t n = spec.context;
  b.tokens = torch::empty({rows, n + 1}, torch::kInt64);
  b.answer = torch::empty({rows, n}, torch::kFloat32);
  b.bucket = torch::empty({rows, n}, torch::kInt64);
  // Revealed answers: the inputs are a view of the tokens. Hidden ones get their own copy, changed below.
  b.inputs = spec.hidden ? torch::empty({rows, n}, torch::kInt64) : b.tokens.slice(1, 0, n);
  for (int64_t r = 0; r < rows; ++r) {
    RowRng rng(seed, split, step, first_row + r);
    int64_t* seq = b.tokens.data_ptr<int64_t>() + r * (n + 1);
    float* answer = b.answer.data_ptr<float>() + r * n;
    generate(spec, split, rng, seq, answer, b.bucket.data_ptr<int64_t>() + r * n);
    if (!spec.hidden) continue;
    // Hidden answers (Zoology's layout): the target after a query stays, the input there becomes filler, so no
    // position sees any query's answer. Drawn after the sequence, so both modes lay out the same pairs and queries.
    int64_t* in = b.inputs.data_ptr<int64_t>() + r * n;
    std::copy(seq, seq + n, in);
    for (int64_t q = 0; q + 1 < n; ++q) {
      if (answer[q] > 0) in[q + 1] = rng.below(quarter(spec));
    }
  }
  return b;
}

double task_chance(const TaskSpec& s) {
  if (s.name == "khop") return 1.0 / static_cast<double>(s.vocab - 1);
  return 1.0 / static_cast<double>(s.vocab - 2 * quarter(s));
}

torch::Tensor task_loss(const torch::Tensor& logits, const torch::Tensor& targets, const torch::Tensor& answer) {
  const auto nll = torch::nn::functional::cross_entropy(
      logits.reshape({-1, logits.size(-1)}).to(torch::kFloat32), targets.reshape({-1}),
      torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone));
  const auto mask = answer.reshape({-1}).to(nll.device(), torch::kFloat32);
  return (nll * mask).sum() / mask.sum().clamp_min(1.0);
}

namespace {
std::atomic<int64_t> g_task_evaluations{0};
}  // namespace

int64_t task_evaluations() { return g_task_evaluations.load(std::memory_order_relaxed); }

json task_evaluate(LanguageModel& model, const TaskSpec& spec, uint64_t seed, TaskSplit split, int64_t sequences,
                   int64_t eval_batch, ProcessGroup* pg) {
  g_task_evaluations.fetch_add(1, std::memory_order_relaxed);
  torch::NoGradGuard no_grad;
  const bool was_training = model->is_training();
  model->eval();
  const auto device = model->parameters().front().device();
  const int64_t nb = static_cast<int64_t>(spec.buckets.size());
  // sums: [answers, correct, nats, then per bucket answers and correct]
  auto sums = torch::zeros({3 + 2 * nb}, torch::kFloat64);
  auto* s = sums.data_ptr<double>();
  const int64_t ranks = pg ? pg->size() : 1, me = pg ? pg->rank() : 0;
  int64_t batch_index = 0;
  for (int64_t first = 0; first < sequences; first += eval_batch, ++batch_index) {
    if (batch_index % ranks != me) continue;
    const int64_t rows = std::min(eval_batch, sequences - first);
    // Evaluation batch i is "step" i of the held-out split: the same sequences at every evaluation.
    const TaskBatch b = task_batch(spec, seed, split, batch_index, rows, 0, rows);
    const auto inputs = b.inputs.to(device);
    const auto targets = b.tokens.slice(1, 1, spec.context + 1);
    const auto logits = model->forward(inputs).to(torch::kFloat32);  // [rows, context, 256]
    const auto nll = torch::nn::functional::cross_entropy(
                         logits.reshape({-1, logits.size(-1)}), targets.reshape({-1}).to(device),
                         torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone))
                         .cpu()
                         .to(torch::kFloat64);
    const auto correct = (logits.argmax(-1).cpu() == targets).reshape({-1}).to(torch::kFloat64);
    const auto answer = b.answer.reshape({-1}).to(torch::kFloat64);
    s[0] += answer.sum().item<double>();
    s[1] += (correct * answer).sum().item<double>();
    s[2] += (nll * answer).sum().item<double>();
    const auto bucket = b.bucket.reshape({-1});
    for (int64_t k = 0; k < nb; ++k) {
      const auto in = (bucket == k).to(torch::kFloat64) * answer;
      s[3 + 2 * k] += in.sum().item<double>();
      s[4 + 2 * k] += (correct * in).sum().item<double>();
    }
  }
  if (pg) pg->all_reduce_sum(sums, "the task evaluation sums");
  if (was_training) model->train();
  auto ratio = [](double a, double b) { return b > 0 ? json(a / b) : json(nullptr); };
  json by = json::array();
  for (int64_t k = 0; k < nb; ++k) {
    by.push_back({{"lo", spec.buckets[static_cast<size_t>(k)].first},
                  {"hi", spec.buckets[static_cast<size_t>(k)].second},
                  {"answers", std::llround(s[3 + 2 * k])},
                  {"accuracy", ratio(s[4 + 2 * k], s[3 + 2 * k])}});
  }
  return {{"split", task_split_name(split)}, {"sequences", sequences},   {"answers", std::llround(s[0])},
          {"accuracy", ratio(s[1], s[0])},   {"loss", ratio(s[2], s[0])}, {"by_distance", by}};
}

json task_json(const TaskSpec& spec) {
  json params = {{"vocab", spec.vocab}, {"context", spec.context}};
  if (spec.name == "mqar" || spec.name == "recall_distance" || spec.name == "selective_copy") params["pairs"] = spec.pairs;
  // Records before this field drew mqar's values with replacement (repeats within a sequence).
  if (spec.name == "mqar") params["values"] = "distinct within a sequence";
  // Records before this field revealed every answer as the input after its query.
  if (spec.name == "mqar" || spec.name == "recall_distance") params["answers"] = spec.hidden ? "hidden" : "revealed";
  if (spec.pairs_min > 0) params["train_pairs_min"] = spec.pairs_min;
  if (spec.name == "khop") params["hops"] = spec.hops;
  if (spec.name == "recall_distance") params["distances"] = spec.distances;
  json buckets = json::array();
  for (const auto& [lo, hi] : spec.buckets) buckets.push_back({lo, hi});
  return {{"name", spec.name},
          {"params", params},
          {"chance", task_chance(spec)},
          {"buckets", buckets},
          {"scored", "answer positions only (loss and accuracy); no BPC"}};
}

json task_reach(const TrainConfig& cfg, const TaskSpec& spec) {
  if (spec.buckets.empty()) return nullptr;
  const int64_t n = spec.context, layers = cfg.model.layers;
  const bool dense = is_dense_attention(cfg.model.attention);
  // The graph the model trains on: built once in this process, shared with the model.
  std::shared_ptr<const Graph> g;
  if (!dense) g = shared_pattern_graph(cfg.model.pattern, n, true, cfg.model.pattern_params);
  const std::vector<int64_t> queries = reach_query_positions(n, 128);
  std::vector<std::vector<int32_t>> hops;  // per sampled query
  for (const int64_t q : queries) {
    if (dense) {
      std::vector<int32_t> h(static_cast<size_t>(n), -1);
      for (int64_t t = 0; t <= q; ++t) h[static_cast<size_t>(t)] = t == q ? 0 : 1;
      hops.push_back(std::move(h));
    } else {
      hops.push_back(hops_to(*g, q));
    }
  }
  json out = json::array();
  for (const auto& [lo, hi] : spec.buckets) {
    int64_t pairs = 0, reachable = 0;
    int32_t min_h = std::numeric_limits<int32_t>::max(), max_h = -1;
    bool some_unreachable = false;
    const int64_t step = std::max<int64_t>(1, (hi - lo + 1) / 16);  // up to 16 distances of a wide bucket
    for (int64_t d = lo; d <= hi; d += step) {
      for (size_t i = 0; i < queries.size(); ++i) {
        const int64_t q = queries[i];
        if (q < d) continue;
        // Both the key (q - d) and its value (q - d + 1) must reach the query.
        const int32_t a = hops[i][static_cast<size_t>(q - d)], b = hops[i][static_cast<size_t>(q - d + 1)];
        ++pairs;
        if (a < 0 || b < 0) {
          some_unreachable = true;
          continue;
        }
        const int32_t h = std::max(a, b);
        reachable += h <= layers;
        min_h = std::min(min_h, h);
        max_h = std::max(max_h, h);
      }
    }
    out.push_back({{"lo", lo},
                   {"hi", hi},
                   {"pairs", pairs},
                   {"fraction_reachable", pairs ? static_cast<double>(reachable) / static_cast<double>(pairs) : 0.0},
                   {"min_hops", max_h < 0 ? json(nullptr) : json(min_h)},
                   {"max_hops", some_unreachable || max_h < 0 ? json(nullptr) : json(max_h)}});
  }
  return {{"layers", layers}, {"query_positions", static_cast<int64_t>(queries.size())}, {"buckets", out}};
}

}  // namespace sb
