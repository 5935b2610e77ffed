// Result records: append-only JSON lines with fsync, tolerant reading, CSV export.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "harness/scenario/scenario.h"

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
  bool exists = false;  // the file could be opened
  std::vector<json> records;
  std::vector<std::string> problems;  // lines that were ignored, and why ("PATH: line 7: truncated ...")
  std::vector<std::string> bad_lines;  // the same lines as "PATH:LINE: reason", for readers that refuse them (merge)
};

// Reads records.jsonl with the guarded JSON parser (bounded depth, no recursion on hostile lines): a last line
// without its newline, or any line that does not parse as a JSON object, is left out and reported. A missing
// file yields no records (exists false).
RecordFile read_records(const std::string& path);

// Writes the records as CSV: one column per scalar field (nested objects flattened as a.b), arrays
// of numbers as their values joined by ';'.
void write_records_csv(const std::vector<json>& records, const std::string& path);
// The run.json keys that say which build ran where: repeated in each resumed entry and each merged source,
// since a sweep may be resumed or sharded on other machines and builds.
inline constexpr const char* kRunMachineKeys[] = {"commit", "cpu", "simd_target", "libtorch", "host"};

// Copies each of `keys` that `from` holds into `to` (fields of run.json, results and records may be absent).
template <typename Keys>
void copy_present_keys(const json& from, const Keys& keys, json& to) {
  for (const char* k : keys) {
    if (from.contains(k)) to[k] = from[k];
  }
}
inline void copy_present_keys(const json& from, std::initializer_list<const char*> keys, json& to) {
  copy_present_keys<std::initializer_list<const char*>>(from, keys, to);
}

// UTC "YYYYmmdd-HHMMSS".
std::string utc_stamp();
std::string utc_iso();

// Median and relative spread ((max - min) / 2 / median) of samples.
double median_of(std::vector<double> v);

}  // namespace sb
