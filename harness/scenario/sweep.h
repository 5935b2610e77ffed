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
};

struct SweepSummary {
  int64_t total = 0;
  int64_t already = 0;  // recorded before a resume
  int64_t ok = 0;
  int64_t skipped = 0;
  int64_t failed = 0;
};

// Expands nothing: runs `points` of `s`, recording every one (ok/skipped/failed) in run_dir/records.jsonl,
// printing progress with an ETA; exceptions from `measure` are recorded as failed points.
SweepSummary run_sweep(const Scenario& s, const std::vector<Point>& points, const SweepOptions& opt,
                       const MeasureFn& measure);

// Prints the expanded points (analytic memory, skip decisions) as a table.
void print_points(const Scenario& s, const std::vector<Point>& points);

// The latest run directory under results_root/<scenario>/ ("" when none).
std::string latest_run_dir(const std::string& results_root, const std::string& scenario);

}  // namespace sb
