// Scenario files: loading, --set overrides, validation and axis expansion (plain C++, no LibTorch).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/lm/config.h"
#include "patterns/graph.h"
#include "patterns/pattern.h"

namespace sb {

using json = nlohmann::json;

// Keys the validator accepts at each level (scenarios/schema.json is generated from the same tables).
const std::vector<std::string>& scenario_top_keys();
const std::vector<std::string>& scenario_axes_keys();
const std::vector<std::string>& scenario_attention_keys();
const std::vector<std::string>& scenario_model_keys();
const std::vector<std::string>& scenario_train_keys();
// Keys of a pattern entry besides the pattern's own parameters.
const std::vector<std::string>& scenario_pattern_entry_keys();

// Parses JSON text; a malformed document throws sb::Error "FILE:LINE:COL: malformed JSON: ...".
json parse_scenario_text(const std::string& text, const std::string& file);
// Reads and parses a scenario file; unreadable -> sb::Error naming the file.
json read_scenario_file(const std::string& path);

// Applies "--set path=value": path is slash-separated (a leading '/' is optional), value is JSON
// (text that is not valid JSON is taken as a string). Missing objects on the way are created.
void apply_override(json& doc, const std::string& assignment);

// Checks the whole document; throws sb::Error "FILE: /json/pointer: message" at the first problem.
void validate_scenario(const json& doc, const std::string& file);

// Points a scenario may expand to unless its /max_points says otherwise.
constexpr int64_t kDefaultMaxPoints = 100000;
// Longest /name: it names a directory (NAME_MAX of common file systems).
constexpr size_t kMaxNameBytes = 255;

// The kinds of scenario; each is measured by one row of the runner's table (harness/scenario/measure.cpp).
enum class ScenarioKind { attention, model, train };
const char* kind_name(ScenarioKind kind);

struct AttentionSettings {
  int64_t heads = 8;
  int64_t head_dim = 64;
  bool relations = true;
};

// A validated scenario with defaults filled in.
struct Scenario {
  std::string file;
  std::string name;
  std::string description;
  ScenarioKind kind = ScenarioKind::attention;
  std::string device;  // cpu | cuda
  int64_t repeats = 5;
  int64_t warmup = 1;
  int64_t seed = 0;
  int64_t memory_budget_bytes = 0;  // 0: no budget
  int64_t max_points = kDefaultMaxPoints;  // expansion refuses more (/max_points)
  AttentionSettings attention;
  // Kinds model and train: /model, /train, /device and /seed over the scenario defaults of the config fields
  // (harness/lm/config.h); each point's config adds its axis values.
  TrainConfig train;
  json doc;  // the document after overrides (recorded in run.json)
  // Run directories whose finished training runs of identical settings are copied instead of trained again
  // (`run --reuse-from`; not part of the document).
  std::vector<std::string> reuse_runs;
};

// Validates and converts; `file` names the source in messages.
Scenario scenario_from_json(const json& doc, const std::string& file);
// read_scenario_file + overrides + scenario_from_json.
Scenario load_scenario(const std::string& path, const std::vector<std::string>& overrides);

// One expanded configuration: its axis values and one typed config. The values the config holds (pattern,
// parameters, context, causality, batch, threads, dtype, seed, attention op) are read from it, never kept twice.
struct Point {
  int64_t index = 0;
  std::string id;         // stable key of the axis values, used by --resume
  std::string config_id;  // the id without the seed: the same for every seed of one configuration
  std::string label;      // display name: "bpt(k=4)", "dense [dense op]"
  std::optional<double> degree_target;
  std::string solved_param;  // parameter chosen to meet degree_target
  int64_t tokens = 0;        // tokens per batch (0 when batch is given directly)
  std::string mode;  // attention/model: forward | forward_backward; train: train
  GraphStats stats;
  std::string fingerprint;
  int64_t analytic_bytes = 0;
  std::string skip_reason;  // non-empty: recorded as skipped, not run
  // Model and training configuration of this point, device included (the timing kinds use its model fields,
  // batch, threads, dtype and seed too).
  TrainConfig config;

  const std::string& pattern() const { return config.model.pattern; }
  const Params& params() const { return config.model.pattern_params; }  // resolved (solved parameter included)
  const std::string& attention() const { return config.model.attention; }  // graph | dense | dense_naive
  int64_t length() const { return config.model.context; }  // tokens per sequence (train: context)
  bool causal() const { return config.model.causal; }
  int64_t batch() const { return config.batch; }
  int64_t threads() const { return config.threads; }
  const std::string& dtype() const { return config.dtype; }  // compute precision (/axes/dtypes; train: /train/dtype)
  int64_t seed() const { return config.seed; }  // train: /axes/seeds or /seed; timing kinds: /seed
};

// Solves the integer value of `param` in [lo, hi] whose graph's mean token in-degree is closest
// to `target` (binary search: the degree is taken as monotone in the parameter).
struct DegreeSolution {
  int64_t value = 0;
  double achieved = 0.0;
  int64_t builds = 0;  // graphs built during the search
};
DegreeSolution solve_degree(const std::string& pattern, int64_t n, bool causal, Params fixed,
                            const std::string& param, double target);

// Analytic memory of a point in bytes (formula in scenarios/README.md). `stats` must be filled.
int64_t analytic_memory_bytes(const Scenario& s, const Point& p);

// Why the point is skipped for the scenario's memory budget ("analytic memory … exceeds the budget …"), or "" when
// it fits or there is none. p.analytic_bytes must be filled.
std::string memory_budget_skip(const Scenario& s, const Point& p);

// Statistics of the dense op's implicit graph, computed without building it.
GraphStats dense_op_stats(int64_t n, bool causal);

// The number of points the axes make, counted from the axis sizes alone (nothing expanded or built), and the
// axes that make it: "1000000 = lengths 1000000 (/axes/lengths)". `total` saturates at UINT64_MAX.
struct PointCount {
  uint64_t total = 0;
  std::string detail;
};
PointCount count_points(const Scenario& s);

// Throws sb::Error "FILE: the axes make N points (DETAIL), more than /max_points M; ..." when the count exceeds
// s.max_points.
void check_point_count(const Scenario& s);

// Expands the axes into points (refused first by check_point_count): graph statistics, analytic memory, skip decisions and each point's typed config.
// Without build_graphs, graph points are left without statistics, fingerprint and analytic memory (and so without
// the memory-budget skip): for a caller that builds each graph when it runs the point (`bench kernels`, whose
// filters would otherwise wait for every graph of the scenario).
std::vector<Point> expand_scenario(const Scenario& s, bool build_graphs = true);

// The record fields that describe a point (axis values, graph statistics, analytic memory).
json point_to_json(const Scenario& s, const Point& p);

// A point as a sweep hands it to a child process (`run-point`): its identity and its config as recorded, so the
// child needs no expansion (no degree search, no graph built for statistics) and no second serialisation.
json point_handoff_json(const Point& p);
// Reads it back; throws sb::Error naming `file` and the field.
Point point_from_handoff(const json& handoff, const std::string& file);

// Graph export in the format of `sparsebench pattern --export` (see PATTERNS.md).
json graph_export_json(const std::string& name, const Params& params, const Graph& g);

// The fields a scenario file takes besides the config fields: top-level run settings and /attention.
const std::vector<FieldSpec>& scenario_fields();

// scenarios/schema.json, generated from the field tables (`sparsebench schema` prints it; a test checks the
// committed file against it).
json scenario_schema();

}  // namespace sb
