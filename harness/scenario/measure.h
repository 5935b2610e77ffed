// The LibTorch side of the scenario runner: measuring one point and describing the machine and build.
#pragma once

#include "harness/scenario/records.h"

namespace sb {

// Runs one point (attention op, whole model, or a training run) and fills `record` with
// samples, median, spread, tokens/s, peak memory, or the trainer's result. Throws on failure.
void measure_point(const Scenario& s, const Point& p, const std::string& run_dir, json& record);
// The same for a point handed to this process by its sweep (`run-point`): `recorded_config` is the point's config as
// the sweep recorded it (point_handoff_json), taken as is rather than serialised again.
void measure_handed_point(const Scenario& s, const Point& p, const std::string& run_dir, const json& recorded_config,
                          json& record);

// Checks, before anything runs, what each point will need: trainer options and the data file (kind train),
// the model configuration (kind model). Throws sb::Error "FILE: point I (LABEL): ..." at the first problem.
void check_points(const Scenario& s, const std::vector<Point>& points);

// Provenance for run.json: commit, build type, compiler, LibTorch version, BLAS, threads, CPU, GPU.
json run_environment();

}  // namespace sb
