// Result records: append-only JSON lines with fsync, tolerant reading, CSV export, and the sweep loop.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "harness/scenario/scenario.h"
#include "common/sha256.h"

namespace sb {

// Appends one JSON object per line to a file; each line is written whole, flushed and fsync'ed.
class RecordWriter {
 public:
  // Opens `path` for appending; a truncated last line left by a crash is cut off first.
  explicit RecordWriter(const std::string& path);
  ~RecordWriter();
  RecordWriter(const RecordWriter&) = delete;
  RecordWriter& operator=(const RecordWriter&) = delete;
  void append(const json& record);

 private:
  std::string path_;
  int fd_ = -1;
};

struct RecordFile {
  std::vector<json> records;
  std::vector<std::string> problems;  // lines that were ignored, and why ("line 7: truncated ...")
};

// Reads records.jsonl: a last line without its newline or that does not parse is ignored and reported,
// as is any other line that does not parse. A missing file yields no records.
RecordFile read_records(const std::string& path);

// Writes the records as CSV: one column per scalar field (nested objects flattened as a.b), arrays
// of numbers as their values joined by ';'.
void write_records_csv(const std::vector<json>& records, const std::string& path);


// UTC "YYYYmmdd-HHMMSS".
std::string utc_stamp();
std::string utc_iso();

// The measured part of one point: fills measurements (and status "failed" with a reason, or throws) into
// `record`; run_dir is where the point may keep files of its own.
using MeasureFn = std::function<void(const Scenario&, const Point&, const std::string& run_dir, json& record)>;

struct SweepOptions {
  std::string run_dir;  // records.jsonl, run.json, records.csv, graphs/ go here
  bool resume = false;
  bool overwrite = false;      // replace the records of an earlier run in run_dir
  bool allow_changes = false;  // resume although the scenario differs from run.json's (both recorded)
  bool dry_run = false;
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

// Median and relative spread ((max - min) / 2 / median) of samples.
double median_of(std::vector<double> v);

}  // namespace sb
