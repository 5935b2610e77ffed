// The sweep loop of `sparsebench run`: every point of a scenario run and recorded, with progress and resume.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "harness/scenario/records.h"
#include "harness/scenario/scenario.h"

namespace sb {

// The measured part of one point: fills measurements (and status "failed" with a reason, or throws) into
// `record`; run_dir is where the point may keep files of its own.
using MeasureFn = std::function<void(const Scenario&, const Point&, const std::string& run_dir, json& record)>;

struct SweepOptions {
  std::string run_dir;  // records.jsonl, run.json, records.csv, graphs/ go here
  bool resume = false;
  bool overwrite = false;      // replace the records of an earlier run in run_dir
  bool allow_changes = false;  // resume although the scenario differs from run.json's (both recorded)
  bool export_graphs = true;  // graphs/<label>.json at n=64 for the pattern pictures
  json environment;           // provenance merged into run.json
  // Points run at once. Above 1 every point runs in a child process (`point_command` + the point's arguments, see
  // point_command_args), so a crashing point takes no other down and each sets its own thread count.
  int64_t jobs = 1;
  int64_t cpu_budget = 0;  // CPUs the jobs share (a point with threads 0 gets budget / jobs); 0: available_cpus()
  std::vector<std::string> point_command;  // e.g. {"/path/sparsebench", "run-point"}
  json shard;  // {"index", "count", "source"} when `points` are one shard of the scenario, else null
  std::vector<std::string> scenario_point_ids;  // every point id of the scenario, recorded for `merge`
};

struct SweepSummary {
  int64_t total = 0;
  int64_t already = 0;  // recorded before a resume
  int64_t ok = 0;
  int64_t skipped = 0;
  int64_t failed = 0;
  int64_t busy = 0;  // measured points whose record says busy_machine
  int stop_signal = 0;  // a parallel sweep stopped by this signal (SIGINT, SIGTERM, SIGHUP): unfinished points unrecorded
};

// Expands nothing: runs `points` of `s`, recording every one (ok/skipped/failed) in run_dir/records.jsonl,
// printing progress with an ETA; exceptions from `measure` are recorded as failed points.
SweepSummary run_sweep(const Scenario& s, const std::vector<Point>& points, const SweepOptions& opt,
                       const MeasureFn& measure);

// The threads a point runs with when `jobs` points share `cpu_budget` CPUs: its own threads axis value when set,
// else an equal share (at least 1), split between the ranks of a data-parallel training point (threads per rank).
int64_t point_threads(const Point& p, int64_t jobs, int64_t cpu_budget);

// Files of the point processes under a run directory: the scenario (written by run_sweep), each point as handed over,
// its result fields (written by the point process, appended to records.jsonl by the sweep) and its output.
std::string point_scenario_path(const std::string& run_dir);
std::string point_result_path(const std::string& run_dir, int64_t index);
// Where the sweep hands point `index` to its child process (point_handoff_json).
std::string point_handoff_path(const std::string& run_dir, int64_t index);
std::string point_log_path(const std::string& run_dir, int64_t index);

// Arguments after point_command for one point: --run-dir DIR --index I --id ID --threads T.
std::vector<std::string> point_command_args(const std::string& run_dir, const Point& p, int64_t threads);

// Prints the expanded points (analytic memory, skip decisions) as a table.
void print_points(const Scenario& s, const std::vector<Point>& points);

// The latest run directory under results_root/<scenario>/ ("" when none).
std::string latest_run_dir(const std::string& results_root, const std::string& scenario);

}  // namespace sb
