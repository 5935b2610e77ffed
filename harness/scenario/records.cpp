// Result records: append + fsync, the tolerant reader, CSV export, UTC stamps.
#include "harness/scenario/records.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/durable_file.h"
#include "common/error.h"
#include "common/files.h"
#include "common/json_guard.h"

namespace sb {

namespace fs = std::filesystem;

namespace {

void flatten(const json& v, const std::string& prefix, std::vector<std::pair<std::string, std::string>>& out) {
  if (v.is_object()) {
    for (const auto& [k, x] : v.items()) flatten(x, prefix.empty() ? k : prefix + "." + k, out);
    return;
  }
  std::string text;
  if (v.is_string()) {
    text = v.get<std::string>();
  } else if (v.is_null()) {
    text = "";
  } else if (v.is_array()) {
    bool numbers = std::all_of(v.begin(), v.end(), [](const json& x) { return x.is_number(); });
    if (numbers) {
      std::vector<std::string> parts;
      for (const json& x : v) parts.push_back(x.dump());
      text = fmt::format("{}", fmt::join(parts, ";"));
    } else {
      text = v.dump();
    }
  } else {
    text = v.dump();
  }
  out.emplace_back(prefix, text);
}

std::string csv_cell(const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

}  // namespace

RecordWriter::RecordWriter(const std::string& path) : path_(path) {
  // Cut a truncated last line (no newline) so appended records start on a fresh line.
  bool exists = false;
  const std::string text = read_file(path, &exists);
  if (exists && !text.empty() && text.back() != '\n') {
    const auto nl = text.find_last_of('\n');
    const auto keep = nl == std::string::npos ? 0 : nl + 1;
    if (::truncate(path.c_str(), static_cast<off_t>(keep)) != 0) {
      throw Error(fmt::format("{}: cannot cut the truncated last line: {}", path, std::strerror(errno)));
    }
  }
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd_ < 0) throw Error(fmt::format("{}: cannot open for appending: {}", path, std::strerror(errno)));
}

RecordWriter::~RecordWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void RecordWriter::append(const json& record) {
  // One write() per line: with O_APPEND a crash leaves at most this line incomplete.
  const std::string line = record.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
  size_t done = 0;
  while (done < line.size()) {
    const ssize_t w = ::write(fd_, line.data() + done, line.size() - done);
    if (w < 0) {
      if (errno == EINTR) continue;
      throw Error(fmt::format("{}: write failed: {}", path_, std::strerror(errno)));
    }
    done += static_cast<size_t>(w);
  }
  if (::fsync(fd_) != 0) throw Error(fmt::format("{}: fsync failed: {}", path_, std::strerror(errno)));
}

RecordFile read_records(const std::string& path) {
  RecordFile out;
  bool exists = false;
  const std::string text = read_file(path, &exists);
  out.exists = exists;
  if (!exists) return out;
  size_t pos = 0;
  int64_t line_no = 0;
  while (pos < text.size()) {
    ++line_no;
    const auto nl = text.find('\n', pos);
    const bool complete = nl != std::string::npos;
    const std::string line = text.substr(pos, complete ? nl - pos : std::string::npos);
    pos = complete ? nl + 1 : text.size();
    if (line.empty()) continue;
    if (!complete) {
      out.problems.push_back(fmt::format("{}: line {}: truncated last line ignored ({} bytes)", path, line_no, line.size()));
      out.bad_lines.push_back(
          fmt::format("{}:{}: truncated last line ({} bytes without a newline)", path, line_no, line.size()));
      continue;
    }
    std::string why;
    try {
      json r = parse_json_guarded(line, "", false);  // a hostile line must not reach a recursive printer
      if (r.is_object()) out.records.push_back(std::move(r));
      else why = "a JSON value that is not an object";
    } catch (const Error& e) {
      why = e.what();
      // parse_json_guarded names its input first (here ""): keep what follows.
      const auto cut = why.find(": ");
      if (cut != std::string::npos) why = why.substr(cut + 2);
      const auto at_line = why.find("at line 1, ");
      if (at_line != std::string::npos) why.erase(at_line + 3, 8);  // one line: "at column N"
    }
    if (!why.empty()) {
      const std::string head = line.size() > 40 ? line.substr(0, 37) + "..." : line;
      out.problems.push_back(fmt::format("{}: line {}: not a JSON record ({}), ignored", path, line_no, why));
      out.bad_lines.push_back(fmt::format("{}:{}: not a JSON record ({}): {}", path, line_no, why,
                                          json(head).dump(-1, ' ', true, json::error_handler_t::replace)));
    }
  }
  return out;
}

void write_records_csv(const std::vector<json>& records, const std::string& path) {
  std::vector<std::string> columns;
  std::set<std::string> seen;
  std::vector<std::map<std::string, std::string>> rows;
  for (const json& r : records) {
    std::vector<std::pair<std::string, std::string>> cells;
    flatten(r, "", cells);
    std::map<std::string, std::string> row;
    for (auto& [k, v] : cells) {
      if (seen.insert(k).second) columns.push_back(k);
      row[k] = v;
    }
    rows.push_back(std::move(row));
  }
  std::string text;
  for (size_t i = 0; i < columns.size(); ++i) text += (i ? "," : "") + csv_cell(columns[i]);
  text += "\n";
  for (const auto& row : rows) {
    for (size_t i = 0; i < columns.size(); ++i) {
      auto it = row.find(columns[i]);
      text += (i ? "," : "") + (it == row.end() ? std::string() : csv_cell(it->second));
    }
    text += "\n";
  }
  write_file_atomic(path, text);
}

namespace {

std::string utc_now(const char* format) {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, format, &tm);
  return buf;
}

}  // namespace

std::string utc_stamp() { return utc_now("%Y%m%d-%H%M%S"); }

std::string utc_iso() { return utc_now("%Y-%m-%dT%H:%M:%SZ"); }

double median_of(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

}  // namespace sb
