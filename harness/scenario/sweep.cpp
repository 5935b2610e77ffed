// The sweep loop: runs a scenario's points with progress, ETA and resume, recording every one.
#include "harness/scenario/sweep.h"

#include <chrono>
#include <filesystem>
#include <set>

#include <fmt/format.h>

#include "common/error.h"
#include "common/files.h"
#include "common/json_guard.h"
#include "common/sha256.h"
#include "common/text.h"
#include "harness/scenario/paths.h"
#include "harness/scenario/run_config.h"

namespace sb {

namespace fs = std::filesystem;

namespace {

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

}  // namespace

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
  const std::string prior_run = read_file(run_json_path, &have_run);
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
               format_duration(elapsed), remaining > 0 ? format_duration(eta) : "0m00s");
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
