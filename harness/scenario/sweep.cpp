// The sweep loop: runs a scenario's points with progress, ETA and resume, recording every one.
#include "harness/scenario/sweep.h"

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <set>

#include <fmt/format.h>

#include "common/error.h"
#include "common/files.h"
#include "common/json_guard.h"
#include "common/run_lock.h"
#include "common/sha256.h"
#include "common/text.h"
#include "harness/scenario/paths.h"
#include "harness/scenario/point_process.h"
#include "common/config_changes.h"
#include "harness/scenario/shard.h"

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

// A busy point's reasons, joined.
std::string busy_reasons_text(const json& record) {
  std::string out;
  if (!record.contains("busy_reasons") || !record["busy_reasons"].is_array()) return "no reason recorded";
  for (const json& r : record["busy_reasons"]) {
    if (r.is_string()) out += (out.empty() ? "" : "; ") + r.get<std::string>();
  }
  return out;
}

// The last non-empty line of a point's log, cut short (the likeliest reason a point process died).
std::string log_tail(const std::string& path) {
  bool exists = false;
  std::string text = read_file(path, &exists);
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  const auto nl = text.find_last_of('\n');
  std::string last = nl == std::string::npos ? text : text.substr(nl + 1);
  return last.size() > 200 ? last.substr(0, 197) + "..." : last;
}

// Runs `runnable` in child processes, at most `jobs` at once, recording each through `finish` as it ends. A stop
// signal ends the children and returns with the points that were running unrecorded.
void run_in_processes(const Scenario& s, const std::vector<const Point*>& runnable, const SweepOptions& opt,
                      int64_t jobs, int64_t cpu_budget, const std::function<json(const Point&)>& base_record,
                      const std::function<void(const Point&, json&)>& finish, int64_t& running, SweepSummary& sum) {
  const fs::path dir(opt.run_dir);
  std::error_code ec;
  for (const char* sub : {".points", "logs"}) {
    fs::create_directories(dir / sub, ec);
    if (ec) throw Error(fmt::format("{}: cannot create: {}", (dir / sub).string(), ec.message()));
  }
  for (const auto& entry : fs::directory_iterator(dir / ".points", ec)) fs::remove(entry.path(), ec);  // stale
  write_file_atomic(point_scenario_path(opt.run_dir), json{{"file", s.file}, {"doc", s.doc}}.dump() + "\n");

  using clock = std::chrono::steady_clock;
  struct Live {
    const Point* point;
    clock::time_point t0;
    json record;
  };
  std::map<pid_t, Live> live;
  StopSignals stop;
  size_t next = 0;
  while ((next < runnable.size() || !live.empty()) && StopSignals::received() == 0) {
    while (static_cast<int64_t>(live.size()) < jobs && next < runnable.size()) {
      const Point& p = *runnable[next++];
      const int64_t threads = point_threads(p, jobs, cpu_budget);
      Point handed = p;
      handed.config.threads = threads;
      write_file_atomic(point_handoff_path(opt.run_dir, p.index), point_handoff_json(handed).dump() + "\n");
      std::vector<std::string> argv = opt.point_command;
      for (std::string& a : point_command_args(opt.run_dir, p, threads)) argv.push_back(std::move(a));
      const pid_t pid = start_point_process(argv, point_log_path(opt.run_dir, p.index));
      live[pid] = Live{&p, clock::now(), base_record(p)};
      running = static_cast<int64_t>(live.size());
    }
    const ProcessExit e = wait_point_process(200);
    const auto it = live.find(e.pid);
    if (it == live.end()) continue;
    Live done = std::move(it->second);
    live.erase(it);
    running = static_cast<int64_t>(live.size());
    const Point& p = *done.point;
    const std::string result_path = point_result_path(opt.run_dir, p.index);
    if (e.signal == SIGINT || e.signal == SIGTERM || e.signal == SIGHUP) {
      // Stopped from outside rather than failed: left unrecorded, so --resume runs it again.
      fmt::print(stderr, "note: point {} ({}) was {}; not recorded\n", p.index, p.label, describe_exit(e));
      fs::remove(result_path, ec);
      continue;
    }
    json& record = done.record;
    record["wall_s"] = std::chrono::duration<double>(clock::now() - done.t0).count();
    bool have = false;
    const std::string text = read_file(result_path, &have);
    const std::string log = fs::path(point_log_path(opt.run_dir, p.index)).lexically_relative(dir).string();
    if (e.code == 0 && have) {
      try {
        const json fields = parse_json_guarded(text, result_path, false);
        if (!fields.is_object()) throw Error(fmt::format("{}: not a JSON object", result_path));
        for (const auto& [k, v] : fields.items()) record[k] = v;
        if (record.contains("reason") && record["reason"].is_string()) {
          record["reason"] = failure_reason(record["reason"].get<std::string>());
        }
      } catch (const Error& err) {
        record["status"] = "failed";
        record["reason"] = failure_reason(err.what());
      }
    } else {
      const std::string tail = log_tail(point_log_path(opt.run_dir, p.index));
      record["status"] = "failed";
      record["reason"] = fmt::format("the point's process ended with {} ({}{})", describe_exit(e), log,
                                     tail.empty() ? "" : ": " + tail);
    }
    record["log"] = log;
    fs::remove(result_path, ec);
    finish(p, record);
  }
  sum.stop_signal = StopSignals::received();
  if (live.empty()) return;
  // Stopped: the running points end without records (SIGTERM, then SIGKILL after 10 s).
  for (const auto& [pid, l] : live) ::kill(pid, SIGTERM);
  const auto deadline = clock::now() + std::chrono::seconds(10);
  while (!live.empty()) {
    const ProcessExit e = wait_point_process(100);
    const auto it = live.find(e.pid);
    if (it != live.end()) {
      fs::remove(point_result_path(opt.run_dir, it->second.point->index), ec);
      live.erase(it);
    } else if (clock::now() > deadline) {
      for (const auto& [pid, l] : live) ::kill(pid, SIGKILL);
    }
  }
}

}  // namespace

std::string latest_run_dir(const std::string& results_root, const std::string& scenario) {
  const fs::path dir = path_under_root(results_root, {scenario}, "scenario name");
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return "";
  std::string best;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    // Run directories only (a shards-<hash> directory holds runs, one per shard).
    if (!entry.is_directory() || !fs::exists(entry.path() / "run.json")) continue;
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
    // A seeded training point shows its seed beside its mode.
    const std::string mode = p.id == p.config_id ? p.mode : fmt::format("{} seed={}", p.mode, p.seed());
    fmt::print("{:>5}  {:<28} {:>7} {:>6} {:>6} {:>4} {:<16} {:>9} {:>9.1f}Mi  {}\n", p.index, p.label, p.length(),
               p.batch(), p.causal() ? "yes" : "no", p.threads(), mode, degree,
               static_cast<double>(p.analytic_bytes) / (1024.0 * 1024.0), skip ? "skip: " + p.skip_reason : "run");
  }
  // A training point is one run of the trainer: repeats and warm-up do not apply.
  const std::string timing =
      s.kind == ScenarioKind::train ? "one training run each" : fmt::format("{} repeats after {} warm-up", s.repeats, s.warmup);
  fmt::print("{}: {} points, {} to run, {} skipped (kind {}, {})\n", s.name, points.size(), points.size() - skipped,
             skipped, kind_name(s.kind), timing);
}

namespace {

// --overwrite clears the run; --resume reads which points are recorded already (returned: point id -> its index);
// otherwise a run directory that holds records is refused.
std::map<std::string, int64_t> prepare_records(const fs::path& dir, const std::string& records_path,
                                               const SweepOptions& opt) {
  std::error_code ec;
  std::map<std::string, int64_t> done;
  if (opt.overwrite && !opt.resume) {
    // train/ too: a point finds its checkpoint there and would continue the replaced run's training.
    for (const char* f : {"records.jsonl", "records.csv", "run.json", "train"}) {
      fs::remove_all(dir / f, ec);
      if (ec) throw Error(fmt::format("--overwrite: cannot remove '{}': {}", (dir / f).string(), ec.message()));
    }
  }
  if (opt.resume) {
    const RecordFile prior = read_records(records_path);
    for (const std::string& p : prior.problems) fmt::print(stderr, "warning: {}\n", p);
    for (const json& r : prior.records) {
      if (!r.contains("point") || !r["point"].is_string()) continue;
      done[r["point"].get<std::string>()] = r.contains("index") && r["index"].is_number_integer() ? r["index"].get<int64_t>() : -1;
    }
  } else if (fs::exists(records_path) && fs::file_size(records_path, ec) > 0) {
    throw Error(fmt::format("{} already holds records; pass --resume to continue that run, --overwrite to replace "
                            "it, or choose another --out",
                            records_path));
  }
  return done;
}

// run.json: provenance; a resume keeps the original and notes when it resumed (refusing another shard or changed
// settings unless allowed).
void write_run_json(const fs::path& dir, const Scenario& s, const SweepOptions& opt, int64_t jobs, int64_t total) {
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
    const json prior_shard = run.value("shard", json());
    if (prior_shard != opt.shard) {
      auto name = [](const json& sh) {
        return sh.is_object() ? fmt::format("shard {}/{}", sh.value("index", -1), sh.value("count", -1))
                              : std::string("the whole scenario");
      };
      throw Error(fmt::format("--resume: {} holds {}, not {}; resume each shard in its own directory",
                              run_json_path, name(prior_shard), name(opt.shard)));
    }
    const auto changes = config_changes(run.value("scenario", json::object()), s.doc);
    refuse_changes(changes, opt.allow_changes, "--resume", run_json_path);
    json entry = {{"time", utc_iso()}, {"scenario_sha256", sha256_hex(s.doc.dump())}, {"jobs", jobs}};
    // A resumed sweep may run on another machine or build: say which ran from here on.
    copy_present_keys(opt.environment, kRunMachineKeys, entry);
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
    run["kind"] = kind_name(s.kind);
    run["started"] = utc_iso();
    run["points"] = total;
    run["jobs"] = jobs;
    if (!opt.shard.is_null()) run["shard"] = opt.shard;
    if (!opt.scenario_point_ids.empty()) run["point_ids"] = opt.scenario_point_ids;
  }
  write_file_atomic(run_json_path, run.dump(2) + "\n");
}

// One picture source per distinct graph at n = 64 (graphs/*.json, for the pattern figures).
void export_graph_pictures(const fs::path& dir, const std::vector<Point>& points) {
  std::error_code ec;
  fs::create_directories(dir / "graphs", ec);
  std::set<std::string> written;
  for (const Point& p : points) {
    if (p.attention() != "graph" || !p.skip_reason.empty()) continue;
    std::string file = p.pattern();
    for (const auto& [k, v] : p.params()) file += fmt::format("-{}{}", k, v);
    file += p.causal() ? "-causal" : "-bidir";
    if (!written.insert(file).second) continue;
    const fs::path out = dir / "graphs" / (file + ".json");
    if (fs::exists(out)) continue;
    try {
      // Through the store: a point at n = 64 has built this graph already.
      const auto g = shared_pattern_graph(p.pattern(), 64, p.causal(), p.params());
      write_file_atomic(out.string(), graph_export_json(p.pattern(), p.params(), *g).dump() + "\n");
    } catch (const Error& e) {
      fmt::print(stderr, "note: no n=64 picture for {}: {}\n", file, e.what());
    }
  }
}

// The progress line's account of a finished point: its quality and speed, or why it did not run.
std::string progress_detail(const std::string& status, const json& record) {
  std::string detail;
  if (status == "ok" && record.contains("tokens_per_s")) {
    detail = fmt::format("{:.0f} tok/s", record["tokens_per_s"].get<double>());
    if (record.contains("peak_bytes") && record["peak_bytes"].is_number()) {
      detail += fmt::format(", peak {:.1f} MiB", record["peak_bytes"].get<double>() / (1024.0 * 1024.0));
    }
    // Training points: the quality first.
    for (const char* split : {"test_bpc", "valid_bpc", "test_accuracy"}) {  // prepended, so valid comes first
      if (record.contains(split) && record[split].is_number()) {
        detail = fmt::format("{} {:.3f}, ", split, record[split].get<double>()) + detail;
      }
    }
  } else if (record.contains("reason")) {
    detail = record["reason"].get<std::string>();
  }
  return detail;
}

}  // namespace

SweepSummary run_sweep(const Scenario& s, const std::vector<Point>& points, const SweepOptions& opt,
                       const MeasureFn& measure) {
  SweepSummary sum;
  sum.total = static_cast<int64_t>(points.size());
  const fs::path dir(opt.run_dir);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw Error(fmt::format("{}: cannot create the run directory: {}", opt.run_dir, ec.message()));
  // One writer per run directory, held until the sweep returns: taken before anything is read, replaced or appended.
  const RunDirLock lock(opt.run_dir, "run directory");
  if (lock.taken_over().pid != 0) {
    fmt::print(stderr, "note: {}: taking over the lock of pid {} on host {}, which ended without releasing it\n",
               lock.path(), lock.taken_over().pid, lock.taken_over().host);
  }
  const std::string records_path = (dir / "records.jsonl").string();
  const int64_t jobs = std::max<int64_t>(1, opt.jobs);
  const int64_t cpu_budget = opt.cpu_budget > 0 ? opt.cpu_budget : available_cpus();
  if (jobs > 1 && opt.point_command.empty()) throw Error("internal: --jobs above 1 needs the point command");

  const std::map<std::string, int64_t> done = prepare_records(dir, records_path, opt);

  write_run_json(dir, s, opt, jobs, sum.total);

  if (opt.export_graphs) export_graph_pictures(dir, points);

  // A resumed scenario with points added or removed numbers its points anew; a point to run whose number a recorded
  // point of the run holds gets a number after every other, so its training, log and handoff files never replace
  // that point's (train/NNNN, logs/point-NNNN.log).
  std::map<int64_t, std::string> recorded_at;
  int64_t next_index = 0;
  for (const auto& [id, index] : done) {
    if (index >= 0) recorded_at[index] = id;
    next_index = std::max(next_index, index + 1);
  }
  for (const Point& p : points) next_index = std::max(next_index, p.index + 1);
  std::vector<Point> renumbered;
  renumbered.reserve(points.size());  // stable addresses: runnable points into it
  std::vector<const Point*> runnable, pending;  // pending: in order, the skipped ones too
  for (const Point& p : points) {
    if (done.count(p.id)) {
      ++sum.already;
      continue;
    }
    const auto held = recorded_at.find(p.index);
    if (held == recorded_at.end() || held->second == p.id) {
      pending.push_back(&p);
    } else {
      renumbered.push_back(p);
      renumbered.back().index = next_index++;
      fmt::print("note: point {} ({}) runs as point {}: the run's records hold {} as point {}\n", p.index, p.label,
                 renumbered.back().index, held->second, p.index);
      pending.push_back(&renumbered.back());
    }
    if (p.skip_reason.empty()) runnable.push_back(pending.back());
  }
  const int64_t to_run = static_cast<int64_t>(runnable.size());
  fmt::print("{}: {} points: {} to run, {} to skip, {} already recorded -> {}\n", s.name, sum.total, to_run,
             sum.total - to_run - sum.already, sum.already, opt.run_dir);
  const int64_t running_max = std::min(jobs, std::max<int64_t>(1, to_run));
  if (jobs > 1) {
    fmt::print("{}: up to {} points at once, each in its own process; threads per point: {} of {} CPUs unless the "
               "point sets its own; output in {}/logs/\n",
               s.name, running_max, std::max<int64_t>(1, cpu_budget / jobs), cpu_budget, opt.run_dir);
  }
  std::fflush(stdout);

  RecordWriter writer(records_path);
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  int64_t ran = 0, seen = 0, running = 0;
  double point_seconds = 0.0;  // summed wall time of the measured points, for the ETA
  // Records one finished point and prints its progress line.
  auto finish = [&](const Point& p, json& record) {
    ++seen;
    if (!record.contains("status")) record["status"] = "ok";
    if (!opt.shard.is_null()) record["shard"] = opt.shard;
    const std::string status = record["status"].get<std::string>();
    if (status == "ok") ++sum.ok;
    else if (status == "skipped") ++sum.skipped;
    else ++sum.failed;
    writer.append(record);
    if (record.contains("wall_s")) {
      ++ran;
      point_seconds += record["wall_s"].get<double>();
    }
    const double elapsed = std::chrono::duration<double>(clock::now() - start).count();
    const int64_t remaining = to_run - ran;
    // Mean point time over the points running at once.
    const double eta = ran > 0 ? point_seconds / static_cast<double>(ran) * static_cast<double>(remaining) /
                                     static_cast<double>(std::max<int64_t>(1, std::min(running_max, remaining)))
                               : -1.0;
    const std::string detail = progress_detail(status, record);
    const int64_t t = record.contains("threads_used") ? record["threads_used"].get<int64_t>() : p.threads();
    fmt::print("[{}/{}] {} n={} b={} {}{} t={} -> {} {} | {}elapsed {}, ETA {}\n", seen + sum.already, sum.total,
               p.label, p.length(), p.batch(), p.mode, p.causal() ? " causal" : "", t, status, detail,
               jobs > 1 ? fmt::format("running {}, ", running) : "", format_duration(elapsed),
               remaining > 0 ? format_duration(eta) : "0m00s");
    if (record.value("busy_machine", false)) {
      ++sum.busy;
      fmt::print("warning: point {} ({}) ran on a busy machine: {}; cpu_share {:.2f}: its timing reflects the load\n",
                 p.index, p.label, busy_reasons_text(record), record.value("cpu_share", 0.0));
    }
    std::fflush(stdout);
  };
  auto base_record = [&](const Point& p) {
    json record = point_to_json(s, p);
    record["time"] = utc_iso();
    record["jobs"] = jobs;
    return record;
  };

  // Points skipped (or refused) at expansion are recorded without running anything: in order with one job, first
  // with several.
  auto record_skip = [&](const Point& p, json& record) {
    const bool error = p.skip_reason.rfind("error: ", 0) == 0;
    record["status"] = error ? "failed" : "skipped";
    record["reason"] = error ? p.skip_reason.substr(7) : p.skip_reason;
  };
  if (jobs > 1) {
    for (const Point* q : pending) {
      if (q->skip_reason.empty()) continue;
      json record = base_record(*q);
      record_skip(*q, record);
      finish(*q, record);
    }
    run_in_processes(s, runnable, opt, jobs, cpu_budget, base_record, finish, running, sum);
  } else {
    for (const Point* q : pending) {
      const Point& p = *q;
      json record = base_record(p);
      if (!p.skip_reason.empty()) {
        record_skip(p, record);
      } else {
        const auto t0 = clock::now();
        try {
          measure(s, p, opt.run_dir, record);
        } catch (const std::exception& e) {
          record["status"] = "failed";
          record["reason"] = failure_reason(e.what());
        }
        record["wall_s"] = std::chrono::duration<double>(clock::now() - t0).count();
      }
      finish(p, record);
    }
  }

  const RecordFile all = read_records(records_path);
  for (const std::string& p : all.problems) fmt::print(stderr, "warning: {}\n", p);
  write_records_csv(all.records, (dir / "records.csv").string());
  if (sum.stop_signal != 0) {
    fmt::print("{}: stopped by signal {} ({}): {} ok, {} skipped, {} failed recorded; points that were running are "
               "not recorded (--resume runs them) -> {}\n",
               s.name, sum.stop_signal, strsignal(sum.stop_signal), sum.ok, sum.skipped, sum.failed, opt.run_dir);
    return sum;
  }
  fmt::print("{}: {} ok, {} skipped, {} failed{} -> {}\n", s.name, sum.ok, sum.skipped, sum.failed,
             sum.already ? fmt::format(", {} recorded earlier", sum.already) : "", opt.run_dir);
  if (sum.busy > 0) {
    fmt::print("warning: {} of the {} points measured here ran on a busy machine (busy_machine in the records, listed "
               "in report.md); their timings reflect the load, not the code: rerun them on a quiet machine\n",
               sum.busy, ran);
  }
  return sum;
}

int64_t point_threads(const Point& p, int64_t jobs, int64_t cpu_budget) {
  if (p.threads() > 0) return p.threads();
  // A data-parallel training point runs nproc ranks, and threads are per rank: they split the point's share.
  const int64_t ranks = std::max<int64_t>(1, p.config.nproc);
  return std::max<int64_t>(1, cpu_budget / std::max<int64_t>(1, jobs) / ranks);
}

std::string point_scenario_path(const std::string& run_dir) {
  return (fs::path(run_dir) / ".points" / "scenario.json").string();
}

std::string point_result_path(const std::string& run_dir, int64_t index) {
  return (fs::path(run_dir) / ".points" / fmt::format("{:04}.json", index)).string();
}

std::string point_handoff_path(const std::string& run_dir, int64_t index) {
  return (fs::path(run_dir) / ".points" / fmt::format("{:04}.point.json", index)).string();
}

std::string point_log_path(const std::string& run_dir, int64_t index) {
  return (fs::path(run_dir) / "logs" / fmt::format("point-{:04}.log", index)).string();
}

std::vector<std::string> point_command_args(const std::string& run_dir, const Point& p, int64_t threads) {
  return {"--run-dir", run_dir, "--index", std::to_string(p.index), "--id", p.id, "--threads", std::to_string(threads)};
}

}  // namespace sb
