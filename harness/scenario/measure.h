// The LibTorch side of the scenario runner: measuring one point and describing the machine and build.
#pragma once

#include "harness/scenario/records.h"

namespace sb {

// Runs one point (attention op, whole model, or a training run) and fills `record` with
// samples, median, spread, tokens/s, peak memory, or the trainer's result. Throws on failure.
void measure_point(const Scenario& s, const Point& p, const std::string& run_dir, json& record);

// Provenance for run.json: commit, build type, compiler, LibTorch version, BLAS, threads, CPU, GPU.
json run_environment();

}  // namespace sb
