// Merging run directories of one scenario: same-scenario check, one record per point, conflicts and missing points.
#include "harness/scenario/merge.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <optional>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/error.h"
#include "common/files.h"
#include "common/json_guard.h"
#include "common/run_lock.h"
#include "harness/scenario/records.h"

namespace sb {

namespace fs = std::filesystem;

namespace {

struct Source {
  std::string dir;
  json run;
  bool has_records = false;  // records.jsonl exists
  std::vector<json> records;
  std::vector<std::string> bad_lines;  // "PATH:LINE: reason"
};

std::string short_sha(const json& run) {
  const std::string sha = run.value("scenario_sha256", std::string());
  return sha.size() > 12 ? sha.substr(0, 12) + "..." : sha;
}

Source read_source(const std::string& dir) {
  Source src;
  src.dir = dir;
  if (!fs::is_directory(dir)) throw Error(fmt::format("merge: {}: not a directory", dir));
  const std::string run_path = (fs::path(dir) / "run.json").string();
  bool exists = false;
  const std::string text = read_file(run_path, &exists);
  if (!exists) throw Error(fmt::format("merge: {}: no run.json; not a run directory of `sparsebench run`", dir));
  src.run = parse_json_guarded(text, run_path, false);
  if (!src.run.is_object() || !src.run.contains("scenario_sha256") || !src.run["scenario_sha256"].is_string() ||
      !src.run.contains("scenario") || !src.run["scenario"].is_object()) {
    throw Error(fmt::format("merge: {}: scenario_sha256 or scenario missing; not a run.json of `sparsebench run`",
                            run_path));
  }
  for (const json& entry : src.run.value("resumed", json::array())) {
    if (entry.is_object() && entry.contains("changed")) {
      throw Error(fmt::format("merge: {} was resumed with changed settings (--allow-changes), so its records belong to "
                              "more than one scenario; merge runs of one scenario only",
                              dir));
    }
  }
  // The guarded reader of --resume; here a line it leaves out is an error (or, with --skip-corrupt, recorded).
  RecordFile rf = read_records((fs::path(dir) / "records.jsonl").string());
  src.has_records = rf.exists;
  src.records = std::move(rf.records);
  src.bad_lines = std::move(rf.bad_lines);
  return src;
}

// The point ids of the scenario: recorded in run.json, else expanded again from its scenario.
std::vector<std::string> scenario_point_ids(const Source& src) {
  std::vector<std::string> ids;
  if (src.run.contains("point_ids") && src.run["point_ids"].is_array()) {
    for (const json& id : src.run["point_ids"]) {
      if (id.is_string()) ids.push_back(id.get<std::string>());
    }
    return ids;
  }
  const Scenario s = scenario_from_json(src.run["scenario"], (fs::path(src.dir) / "run.json").string());
  for (const Point& p : expand_scenario(s)) ids.push_back(p.id);
  return ids;
}

int status_rank(const json& r) {
  const std::string st = r.value("status", std::string());
  return st == "ok" || st == "skipped" ? 1 : 0;
}

json without_provenance(json r) {
  for (const std::string& k : provenance_fields()) r.erase(k);
  return r;
}

std::vector<std::string> differing_keys(const json& a, const json& b) {
  std::vector<std::string> keys;
  std::set<std::string> all;
  for (const auto& [k, v] : a.items()) all.insert(k);
  for (const auto& [k, v] : b.items()) all.insert(k);
  for (const std::string& k : all) {
    if (!a.contains(k) || !b.contains(k) || a[k] != b[k]) keys.push_back(k);
  }
  return keys;
}

std::string cut_list(const std::vector<std::string>& v, size_t most) {
  std::vector<std::string> shown(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(std::min(most, v.size())));
  return fmt::format("{}{}", fmt::join(shown, ", "), v.size() > most ? fmt::format(", ... ({} in all)", v.size()) : "");
}

}  // namespace

const std::vector<std::string>& provenance_fields() {
  static const std::vector<std::string> fields = {"time", "wall_s", "shard", "jobs", "train_dir", "log"};
  return fields;
}

MergeReport merge_runs(const MergeOptions& opt) {
  if (opt.dirs.empty()) throw Error("merge: no run directories given");
  if (opt.out.empty()) throw Error("merge: --out DIR is required");
  std::error_code ec;
  const fs::path out_canon = fs::weakly_canonical(opt.out, ec);
  std::set<fs::path> seen_dirs;
  for (const std::string& d : opt.dirs) {
    const fs::path canon = fs::weakly_canonical(d, ec);
    if (!seen_dirs.insert(canon).second) throw Error(fmt::format("merge: {} is given twice", d));
    if (canon == out_canon) {
      throw Error(fmt::format("merge: --out {} is one of the run directories; write the merge elsewhere", opt.out));
    }
  }
  // One writer per run directory: a merge into a directory that a run or another merge writes is refused at once
  // (an existing DIR is locked before the sources are read; a new one only once they passed, so a refused merge
  // creates nothing).
  std::optional<RunDirLock> lock;
  if (fs::is_directory(opt.out, ec)) lock.emplace(opt.out, "merge --out");
  std::vector<Source> sources;
  for (const std::string& d : opt.dirs) {
    sources.push_back(read_source(d));
    const Source& first = sources.front();
    const Source& now = sources.back();
    if (now.run["scenario_sha256"] != first.run["scenario_sha256"]) {
      throw Error(fmt::format("merge: {} and {} hold runs of different scenarios ({} scenario_sha256 {}, {} "
                              "scenario_sha256 {}); only runs of the same scenario (file and --set overrides) merge",
                              first.dir, now.dir, first.run.value("scenario_name", std::string("?")), short_sha(first.run),
                              now.run.value("scenario_name", std::string("?")), short_sha(now.run)));
    }
  }
  std::vector<std::string> bad_lines;
  for (const Source& src : sources) bad_lines.insert(bad_lines.end(), src.bad_lines.begin(), src.bad_lines.end());
  if (!bad_lines.empty() && !opt.skip_corrupt) {
    const size_t most = 20;
    std::string list;
    for (size_t i = 0; i < bad_lines.size() && i < most; ++i) list += "\n  " + bad_lines[i];
    if (bad_lines.size() > most) list += fmt::format("\n  ... {} more", bad_lines.size() - most);
    throw Error(fmt::format("merge: {} corrupt or truncated line{} in the records of the run directories:{}\nnothing "
                            "was written; repair the lines (a run's own --resume cuts a truncated last line), or pass "
                            "--skip-corrupt to merge without them (they are listed in {}/run.json)",
                            bad_lines.size(), bad_lines.size() == 1 ? "" : "s", list, opt.out));
  }
  const fs::path out(opt.out);
  if (!lock) lock.emplace(opt.out, "merge --out");
  const fs::path records_path = out / "records.jsonl";
  if (fs::exists(records_path) && fs::file_size(records_path, ec) > 0 && !opt.overwrite) {
    throw Error(fmt::format("merge: {} already holds records; pass --overwrite to replace them or choose another --out",
                            records_path.string()));
  }

  MergeReport rep;
  rep.scenario = sources.front().run.value("scenario_name", std::string());
  rep.skipped_lines = bad_lines;
  for (const Source& src : sources) {
    if (!src.has_records) {
      rep.notes.push_back(fmt::format("{}: no records.jsonl (the run recorded nothing there); its points count as "
                                      "missing", src.dir));
    }
  }
  const std::vector<std::string> ids = scenario_point_ids(sources.front());
  rep.points = static_cast<int64_t>(ids.size());
  const std::set<std::string> id_set(ids.begin(), ids.end());
  // Candidates per point in preference order: directory order, then record order.
  std::map<std::string, std::vector<std::pair<const Source*, const json*>>> by_point;
  for (const Source& src : sources) {
    for (const json& r : src.records) {
      if (!r.contains("point") || !r["point"].is_string()) {
        rep.notes.push_back(fmt::format("{}: a record without a point id, ignored", src.dir));
        continue;
      }
      const std::string id = r["point"].get<std::string>();
      if (!id_set.count(id)) {
        rep.notes.push_back(fmt::format("{}: point '{}' is not a point of the scenario, ignored", src.dir, id));
        continue;
      }
      by_point[id].emplace_back(&src, &r);
    }
  }

  std::string lines;
  for (const std::string& id : ids) {
    const auto it = by_point.find(id);
    if (it == by_point.end()) {
      rep.missing.push_back(id);
      continue;
    }
    const auto& cands = it->second;
    int best_rank = 0;
    for (const auto& [src, r] : cands) best_rank = std::max(best_rank, status_rank(*r));
    const std::pair<const Source*, const json*>* kept = nullptr;
    for (const auto& c : cands) {
      if (status_rank(*c.second) != best_rank) {
        ++rep.replaced_failures;
        continue;
      }
      if (kept == nullptr) {
        kept = &c;
        continue;
      }
      const std::vector<std::string> keys = differing_keys(without_provenance(*kept->second),
                                                           without_provenance(*c.second));
      if (keys.empty()) {
        ++rep.duplicates;
      } else {
        rep.conflicts.push_back(fmt::format("{}: {} and {} differ in {}; kept {}'s", id, kept->first->dir, c.first->dir,
                                            cut_list(keys, 6), kept->first->dir));
      }
    }
    const json& r = *kept->second;
    const std::string st = r.value("status", std::string());
    if (st == "ok") ++rep.ok;
    else if (st == "skipped") ++rep.skipped;
    else ++rep.failed;
    lines += r.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
  }

  fs::create_directories(out / "graphs", ec);
  if (ec) throw Error(fmt::format("merge: {}: cannot create: {}", (out / "graphs").string(), ec.message()));
  // run.json: the scenario, provenance shared by every source (else "mixed"), and where each part came from.
  json run;
  const json& first = sources.front().run;
  for (const auto& [k, v] : first.items()) {
    if (k == "shard" || k == "resumed" || k == "jobs" || k == "merged") continue;
    bool same = true;
    for (const Source& src : sources) same = same && src.run.contains(k) && src.run[k] == v;
    run[k] = same ? v : json("mixed (see merged.from)");
  }
  run["points"] = rep.points;
  run["point_ids"] = ids;
  std::string started;
  json from = json::array();
  for (const Source& src : sources) {
    const std::string st = src.run.value("started", std::string());
    if (started.empty() || (!st.empty() && st < started)) started = st;
    json part = {{"dir", src.dir}, {"records", src.records.size()}};
    if (!src.has_records) part["records_file"] = "missing";
    copy_present_keys(src.run, {"shard", "started", "resumed", "jobs"}, part);
    copy_present_keys(src.run, kRunMachineKeys, part);
    from.push_back(std::move(part));
    // The pattern pictures: every source's, once.
    for (const auto& entry : fs::directory_iterator(fs::path(src.dir) / "graphs", ec)) {
      const fs::path target = out / "graphs" / entry.path().filename();
      if (!fs::exists(target)) fs::copy_file(entry.path(), target, ec);
    }
  }
  run["started"] = started;
  run["merged"] = {{"time", utc_iso()},     {"from", from},           {"complete", rep.complete()},
                   {"missing", rep.missing}, {"conflicts", rep.conflicts}, {"failed", rep.failed}};
  if (!rep.skipped_lines.empty()) run["merged"]["skipped_lines"] = rep.skipped_lines;  // --skip-corrupt
  write_file_atomic(records_path.string(), lines);
  write_file_atomic((out / "run.json").string(), run.dump(2) + "\n");
  const RecordFile all = read_records(records_path.string());
  write_records_csv(all.records, (out / "records.csv").string());
  return rep;
}

}  // namespace sb
