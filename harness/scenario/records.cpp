// Result records (append + fsync, tolerant reader, CSV), SHA-256, and the sweep loop with progress and resume.
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

#include "common/durable_file.h"
#include "common/error.h"
#include "common/json_guard.h"
#include "harness/scenario/paths.h"
#include "harness/scenario/run_config.h"

namespace sb {

namespace fs = std::filesystem;

namespace {

std::string read_all(const std::string& path, bool* exists) {
  std::ifstream in(path, std::ios::binary);
  *exists = static_cast<bool>(in);
  if (!in) return {};
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A failure's message as recorded: the first lines only (LibTorch appends a C++ stack trace after "Exception
// raised from"), cut to a few hundred characters.
std::string failure_reason(const std::string& what) {
  std::string r = what.substr(0, what.find("Exception raised from"));
  size_t lines = 0, cut = 0;
  while (cut < r.size() && lines < 3) {
    cut = r.find('\n', cut);
    if (cut == std::string::npos) break;
    ++cut, ++lines;
  }
  if (lines >= 3 && cut < r.size()) r = r.substr(0, cut);
  while (!r.empty() && (r.back() == '\n' || r.back() == ' ')) r.pop_back();
  return r.size() > 400 ? r.substr(0, 397) + "..." : r;
}

std::string fmt_duration(double seconds) {
  if (seconds < 0) return "?";
  const int64_t s = static_cast<int64_t>(seconds + 0.5);
  if (s >= 3600) return fmt::format("{}h{:02}m", s / 3600, (s % 3600) / 60);
  return fmt::format("{}m{:02}s", s / 60, s % 60);
}

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
  const std::string text = read_all(path, &exists);
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
  const std::string text = read_all(path, &exists);
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
      continue;
    }
    try {
      check_json_text(line, path, false);  // a hostile line must not reach a recursive printer
      json r = json::parse(line);
      if (!r.is_object()) throw Error("not an object");
      out.records.push_back(std::move(r));
    } catch (const std::exception&) {
      out.problems.push_back(fmt::format("{}: line {}: not a JSON record, ignored", path, line_no));
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

std::string utc_stamp() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%d-%H%M%S", &tm);
  return buf;
}

std::string utc_iso() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

double median_of(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

std::string latest_run_dir(const std::string& results_root, const std::string& scenario) {
  const fs::path dir = path_under_root(results_root, {scenario}, "scenario name");
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return "";
  std::string best;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (!entry.is_directory()) continue;
    const std::string name = entry.path().filename().string();
    if (name > best) best = name;  // names start with a UTC timestamp
  }
  return best.empty() ? "" : (dir / best).string();
}

void print_points(const Scenario& s, const std::vector<Point>& points) {
  int64_t skipped = 0;
  fmt::print("{:>5}  {:<28} {:>7} {:>6} {:>6} {:>4} {:<16} {:>9} {:>11}  {}\n", "#", "pattern", "length", "batch",
             "causal", "thr", "mode", "degree", "analytic", "decision");
  for (const Point& p : points) {
    const bool skip = !p.skip_reason.empty();
    skipped += skip;
    std::string degree = fmt::format("{:.1f}", p.stats.token_in_degree_mean);
    if (p.degree_target) degree = fmt::format("{:.1f}->{}", *p.degree_target, degree);
    fmt::print("{:>5}  {:<28} {:>7} {:>6} {:>6} {:>4} {:<16} {:>9} {:>9.1f}Mi  {}\n", p.index, p.label, p.length,
               p.batch, p.causal ? "yes" : "no", p.threads, p.mode, degree,
               static_cast<double>(p.analytic_bytes) / (1024.0 * 1024.0), skip ? "skip: " + p.skip_reason : "run");
  }
  // A training point is one run of the trainer: repeats and warm-up do not apply.
  const std::string timing =
      s.kind == "train" ? "one training run each" : fmt::format("{} repeats after {} warm-up", s.repeats, s.warmup);
  fmt::print("{}: {} points, {} to run, {} skipped (kind {}, {})\n", s.name, points.size(), points.size() - skipped,
             skipped, s.kind, timing);
}

SweepSummary run_sweep(const Scenario& s, const std::vector<Point>& points, const SweepOptions& opt,
                       const MeasureFn& measure) {
  SweepSummary sum;
  sum.total = static_cast<int64_t>(points.size());
  const fs::path dir(opt.run_dir);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw Error(fmt::format("{}: cannot create the run directory: {}", opt.run_dir, ec.message()));
  const std::string records_path = (dir / "records.jsonl").string();

  std::set<std::string> done;
  if (opt.overwrite && !opt.resume) {
    for (const char* f : {"records.jsonl", "records.csv", "run.json"}) {
      fs::remove(dir / f, ec);
      if (ec) throw Error(fmt::format("--overwrite: cannot remove '{}': {}", (dir / f).string(), ec.message()));
    }
  }
  if (opt.resume) {
    const RecordFile prior = read_records(records_path);
    for (const std::string& p : prior.problems) fmt::print(stderr, "warning: {}\n", p);
    for (const json& r : prior.records) {
      if (r.contains("point") && r["point"].is_string()) done.insert(r["point"].get<std::string>());
    }
  } else if (fs::exists(records_path) && fs::file_size(records_path, ec) > 0) {
    throw Error(fmt::format("{} already holds records; pass --resume to continue that run, --overwrite to replace "
                            "it, or choose another --out",
                            records_path));
  }

  // run.json: provenance; a resume keeps the original and notes when it resumed.
  const std::string run_json_path = (dir / "run.json").string();
  json run;
  bool have_run = false;
  const std::string prior_run = read_all(run_json_path, &have_run);
  if (have_run && opt.resume) {
    try {
      run = parse_json_guarded(prior_run, run_json_path, false);
    } catch (const Error& e) {
      throw Error(fmt::format("{}; --resume needs the run's run.json to compare settings", e.what()));
    }
    if (!run.is_object()) throw Error(fmt::format("{}: not a JSON object; --resume needs it", run_json_path));
    const auto changes = config_changes(run.value("scenario", json::object()), s.doc);
    refuse_changes(changes, opt.allow_changes, "--resume", run_json_path);
    json entry = {{"time", utc_iso()}, {"scenario_sha256", sha256_hex(s.doc.dump())}};
    if (!changes.empty()) {
      entry["changed"] = changes_json(changes);  // before and after, per key
      entry["scenario"] = s.doc;
    }
    run["resumed"].push_back(entry);
  } else {
    run = opt.environment;
    run["scenario_name"] = s.name;
    run["scenario_file"] = s.file;
    run["scenario"] = s.doc;
    run["scenario_sha256"] = sha256_hex(s.doc.dump());
    run["kind"] = s.kind;
    run["started"] = utc_iso();
    run["points"] = sum.total;
  }
  write_file_atomic(run_json_path, run.dump(2) + "\n");

  if (opt.export_graphs) {
    // One picture source per distinct graph at n = 64.
    fs::create_directories(dir / "graphs", ec);
    std::set<std::string> written;
    for (const Point& p : points) {
      if (p.attention != "graph" || !p.skip_reason.empty()) continue;
      std::string file = p.pattern;
      for (const auto& [k, v] : p.params) file += fmt::format("-{}{}", k, v);
      file += p.causal ? "-causal" : "-bidir";
      if (!written.insert(file).second) continue;
      const fs::path out = dir / "graphs" / (file + ".json");
      if (fs::exists(out)) continue;
      try {
        const Graph g = build_pattern(p.pattern, 64, p.causal, p.params);
        write_file_atomic(out.string(), graph_export_json(p.pattern, p.params, g).dump() + "\n");
      } catch (const Error& e) {
        fmt::print(stderr, "note: no n=64 picture for {}: {}\n", file, e.what());
      }
    }
  }

  int64_t to_run = 0;
  for (const Point& p : points) {
    if (done.count(p.id)) ++sum.already;
    else if (p.skip_reason.empty()) ++to_run;
  }
  fmt::print("{}: {} points: {} to run, {} to skip, {} already recorded -> {}\n", s.name, sum.total, to_run,
             sum.total - to_run - sum.already, sum.already, opt.run_dir);
  std::fflush(stdout);

  RecordWriter writer(records_path);
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  int64_t ran = 0;
  int64_t seen = 0;
  for (const Point& p : points) {
    if (done.count(p.id)) continue;
    ++seen;
    json record = point_to_json(s, p);
    record["time"] = utc_iso();
    if (!p.skip_reason.empty()) {
      const bool error = p.skip_reason.rfind("error: ", 0) == 0;
      record["status"] = error ? "failed" : "skipped";
      record["reason"] = error ? p.skip_reason.substr(7) : p.skip_reason;
    } else {
      const auto t0 = clock::now();
      try {
        measure(s, p, opt.run_dir, record);
      } catch (const std::exception& e) {
        record["status"] = "failed";
        record["reason"] = failure_reason(e.what());
      }
      if (!record.contains("status")) record["status"] = "ok";
      record["wall_s"] = std::chrono::duration<double>(clock::now() - t0).count();
      ++ran;
    }
    const std::string status = record["status"].get<std::string>();
    if (status == "ok") ++sum.ok;
    else if (status == "skipped") ++sum.skipped;
    else ++sum.failed;
    writer.append(record);

    const double elapsed = std::chrono::duration<double>(clock::now() - start).count();
    const int64_t remaining = to_run - ran;
    const double eta = ran > 0 ? elapsed / static_cast<double>(ran) * static_cast<double>(remaining) : -1.0;
    std::string detail;
    if (status == "ok" && record.contains("tokens_per_s")) {
      detail = fmt::format("{:.0f} tok/s", record["tokens_per_s"].get<double>());
      if (record.contains("peak_bytes") && record["peak_bytes"].is_number()) {
        detail += fmt::format(", peak {:.1f} MiB", record["peak_bytes"].get<double>() / (1024.0 * 1024.0));
      }
      // Training points: the quality first.
      for (const char* split : {"test_bpc", "valid_bpc"}) {  // prepended, so valid comes first
        if (record.contains(split) && record[split].is_number()) {
          detail = fmt::format("{} {:.3f}, ", split, record[split].get<double>()) + detail;
        }
      }
    } else if (record.contains("reason")) {
      detail = record["reason"].get<std::string>();
    }
    fmt::print("[{}/{}] {} n={} b={} {}{} t={} -> {} {} | elapsed {}, ETA {}\n", seen + sum.already, sum.total,
               p.label, p.length, p.batch, p.mode, p.causal ? " causal" : "", p.threads, status, detail,
               fmt_duration(elapsed), remaining > 0 ? fmt_duration(eta) : "0m00s");
    std::fflush(stdout);
  }

  const RecordFile all = read_records(records_path);
  for (const std::string& p : all.problems) fmt::print(stderr, "warning: {}\n", p);
  write_records_csv(all.records, (dir / "records.csv").string());
  fmt::print("{}: {} ok, {} skipped, {} failed{} -> {}\n", s.name, sum.ok, sum.skipped, sum.failed,
             sum.already ? fmt::format(", {} recorded earlier", sum.already) : "", opt.run_dir);
  return sum;
}

}  // namespace sb
