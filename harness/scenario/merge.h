// `sparsebench merge`: the records of several run directories of one scenario (shards, reruns) as one run directory.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "harness/scenario/scenario.h"

namespace sb {

struct MergeOptions {
  std::vector<std::string> dirs;  // run directories, in order of preference for points recorded more than once
  std::string out;                // the merged run directory
  bool overwrite = false;         // replace an earlier merge (or run) in `out`
  bool skip_corrupt = false;      // merge without the records.jsonl lines that do not parse (else refused)
};

struct MergeReport {
  std::string scenario;          // its name
  int64_t points = 0;            // points of the scenario
  int64_t ok = 0, skipped = 0, failed = 0;  // the kept records by status
  int64_t duplicates = 0;        // records equal to the kept one (apart from provenance), dropped
  int64_t replaced_failures = 0; // failed records of points another directory recorded ok or skipped
  std::vector<std::string> missing;   // point ids no directory recorded, in scenario order
  std::vector<std::string> conflicts; // "ID: DIR_A and DIR_B differ in KEY, ...; kept DIR_A's"
  std::vector<std::string> notes;     // records without ids or of points not in the scenario, sources without records
  std::vector<std::string> skipped_lines;  // --skip-corrupt: "PATH:LINE: reason" of each line left out
  bool complete() const { return missing.empty() && conflicts.empty() && failed == 0; }
};

// Fields that say where and when a record was made rather than what it measured: ignored when records of the same
// point are compared.
const std::vector<std::string>& provenance_fields();

// Checks that every directory holds a run of the same scenario (run.json's scenario_sha256; anything else throws
// sb::Error naming both directories) and that every line of their records.jsonl parses (else sb::Error naming each
// FILE:LINE, nothing written, unless skip_corrupt), holds `out`'s lock (common/run_lock.h), keeps each point's record once (ok or skipped before failed, then the first
// directory given), and writes out/records.jsonl (in scenario order), out/run.json (the scenario, the shared
// provenance and "merged": sources, missing points, conflicts) and out/graphs/. The report says what is missing.
MergeReport merge_runs(const MergeOptions& opt);

}  // namespace sb
