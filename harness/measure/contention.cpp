// Contention of timed regions and the cores this process may use, read from /proc and the cgroup files.
#include "harness/measure/contention.h"

#include <dirent.h>
#include <sched.h>
#include <sys/resource.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <fstream>
#include <mutex>
#include <sstream>
#include <tuple>
#include <utility>

#include <fmt/format.h>

namespace sb {

namespace {

std::optional<std::string> read_text(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

double seconds_of(clockid_t clock) {
  timespec ts{};
  clock_gettime(clock, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

double wall_now() { return seconds_of(CLOCK_MONOTONIC); }

// Parents of a cgroup path, itself first: "/a/b" -> "/a/b", "/a", "/".
std::vector<std::string> path_and_parents(std::string path) {
  std::vector<std::string> out;
  while (!path.empty() && path.back() == '/') path.pop_back();
  while (!path.empty()) {
    out.push_back(path);
    path = path.substr(0, path.find_last_of('/'));
  }
  out.push_back("");
  return out;
}

int64_t lower_median(std::vector<int64_t> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[(v.size() - 1) / 2];
}

}  // namespace

double parse_cpu_max(const std::string& text) {
  std::istringstream in(text);
  std::string quota;
  double period = 0.0;
  if (!(in >> quota)) return -1.0;
  if (quota == "max") return 0.0;
  if (!(in >> period) || period <= 0.0) return -1.0;
  try {
    size_t used = 0;
    const double q = std::stod(quota, &used);
    if (used != quota.size() || q <= 0.0) return -1.0;
    return q / period;
  } catch (const std::exception&) {
    return -1.0;
  }
}

double parse_cfs_quota(const std::string& quota_us, const std::string& period_us) {
  std::istringstream qi(quota_us), pi(period_us);
  double q = 0.0, p = 0.0;
  if (!(qi >> q)) return -1.0;
  if (q < 0.0) return 0.0;  // -1: no quota
  if (!(pi >> p) || p <= 0.0 || q == 0.0) return -1.0;
  return q / p;
}

double cgroup_cpu_quota(const std::string& self_cgroup, const ReadFileFn& read, std::string* source,
                        const std::string& root) {
  double best = 0.0;
  auto consider = [&](double cores, const std::string& file) {
    if (cores > 0.0 && (best == 0.0 || cores < best)) {
      best = cores;
      if (source) *source = file;
    }
  };
  std::istringstream in(self_cgroup);
  std::string line;
  while (std::getline(in, line)) {
    // "hierarchy-id:controllers:path"
    const auto a = line.find(':');
    const auto b = a == std::string::npos ? std::string::npos : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string id = line.substr(0, a), controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    if (id == "0" && controllers.empty()) {  // cgroup v2
      for (const std::string& dir : path_and_parents(path)) {
        const std::string file = root + dir + "/cpu.max";
        if (auto text = read(file)) consider(parse_cpu_max(*text), file);
      }
      continue;
    }
    std::istringstream cs(controllers);
    std::string c;
    bool cpu = false;
    while (std::getline(cs, c, ',')) cpu = cpu || c == "cpu";
    if (!cpu) continue;
    // v1 mounts the hierarchy under its controllers' names, or "cpu" as a link to it.
    for (const std::string& mount : {controllers, std::string("cpu")}) {
      for (const std::string& dir : path_and_parents(path)) {
        const std::string base = root + "/" + mount + dir;
        const auto q = read(base + "/cpu.cfs_quota_us");
        const auto p = read(base + "/cpu.cfs_period_us");
        if (q && p) consider(parse_cfs_quota(*q, *p), base + "/cpu.cfs_quota_us");
      }
    }
  }
  return best;
}

const CpuAllowance& cpu_allowance() {
  static const CpuAllowance allowance = [] {
    CpuAllowance a;
    cpu_set_t set;
    CPU_ZERO(&set);
    a.affinity = sched_getaffinity(0, sizeof set, &set) == 0
                     ? std::max(1, CPU_COUNT(&set))
                     : static_cast<int64_t>(std::max(1u, std::thread::hardware_concurrency()));
    a.quota = cgroup_cpu_quota(read_text("/proc/self/cgroup").value_or(""), read_text, &a.quota_source);
    a.usable = a.affinity;
    if (a.quota > 0.0) a.usable = std::min<int64_t>(a.usable, static_cast<int64_t>(std::ceil(a.quota - 1e-9)));
    a.usable = std::max<int64_t>(1, a.usable);
    return a;
  }();
  return allowance;
}

ProcStat parse_proc_stat(const std::string& text) {
  ProcStat s;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::string key;
    ls >> key;
    if (key == "cpu") {
      int64_t v[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      int n = 0;
      while (n < 8 && ls >> v[n]) ++n;
      if (n < 4) continue;  // user nice system idle at least
      for (int i = 0; i < n; ++i) s.total += v[i];
      s.steal = n >= 8 ? v[7] : 0;
      s.ok = true;
    } else if (key == "procs_running") {
      int64_t r = -1;
      if (ls >> r) s.procs_running = r;
    }
  }
  return s;
}

int64_t parse_loadavg_running(const std::string& text) {
  std::istringstream in(text);
  std::string a, b, c, rt;
  if (!(in >> a >> b >> c >> rt)) return -1;
  const auto slash = rt.find('/');
  if (slash == std::string::npos || slash == 0) return -1;
  try {
    return std::stoll(rt.substr(0, slash));
  } catch (const std::exception&) {
    return -1;
  }
}

char parse_task_state(const std::string& stat) {
  // "TID (comm) S ...": comm may hold spaces and parentheses, so the state follows the last ')'.
  const auto close = stat.rfind(')');
  if (close == std::string::npos || close + 2 >= stat.size()) return 0;
  return stat[close + 2];
}

int64_t parse_schedstat_wait(const std::string& text) {
  std::istringstream in(text);
  int64_t run = 0, wait = 0;
  if (!(in >> run >> wait) || wait < 0) return -1;
  return wait;
}

namespace {

// This process's runnable threads and their run-queue wait so far (-1 when unreadable).
std::pair<int64_t, int64_t> own_threads() {
  int64_t running = 0, wait = 0;
  bool wait_ok = true;
  DIR* dir = opendir("/proc/self/task");
  if (dir == nullptr) return {0, -1};
  while (const dirent* e = readdir(dir)) {
    if (e->d_name[0] == '.') continue;
    const std::string base = std::string("/proc/self/task/") + e->d_name;
    if (auto stat = read_text(base + "/stat")) running += parse_task_state(*stat) == 'R';
    const int64_t w = parse_schedstat_wait(read_text(base + "/schedstat").value_or(""));
    if (w < 0) wait_ok = false;
    else wait += w;
  }
  closedir(dir);
  return {running, wait_ok ? wait : -1};
}

}  // namespace

ContentionSnapshot take_snapshot() {
  ContentionSnapshot s;
  const ProcStat st = parse_proc_stat(read_text("/proc/stat").value_or(""));
  s.procs_running = st.procs_running;
  if (s.procs_running < 0) s.procs_running = parse_loadavg_running(read_text("/proc/loadavg").value_or(""));
  // One read of our threads per sample: the sampler runs beside timed work and takes a core from it while it reads.
  // (An OpenMP thread that stops spinning between the two counts can read as another task; the rule's cpu_share
  // condition keeps that from flagging a point whose threads ran the whole region.)
  std::tie(s.own_running, s.own_wait_ns) = own_threads();
  return s;
}

double process_cpu_seconds(bool children) {
  double s = seconds_of(CLOCK_PROCESS_CPUTIME_ID);
  if (children) {
    rusage ru{};
    if (getrusage(RUSAGE_CHILDREN, &ru) == 0) {
      s += static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
           1e-6 * static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
    }
  }
  return s;
}

const char* const kBusyRule =
    "busy when, over the timed region, its threads ran less than 90% of wall time x threads (cpu_share < 0.9) and "
    "(1) the median count of runnable tasks not of this process exceeds the cores it leaves free (usable_cpus - "
    "threads), or (2) its threads waited on a run queue for more than 10% of wall time x threads while the median "
    "sample saw another runnable task; or when (3) steal took more than 5% of the machine's CPU time, or (4) threads "
    "exceed usable_cpus. cpu_share alone is not judged (serial parts and passive waits lower it on an idle machine)";

void judge_contention(Contention& c) {
  c.reasons.clear();
  // Threads that ran (nearly) the whole region lost nothing to anyone: on a quiet machine short 2-thread calls read
  // one "other" task in the median sample or waits of 12-60% (our own threads queueing behind each other) with
  // cpu_share 0.94-1.09 (results/busy_machine/cpu-2core-idle); beside a busy loop cpu_share is 0.49-0.67.
  const bool lost_cpu = c.cpu_share < 0.9;
  const int64_t free_cores = std::max<int64_t>(0, c.usable_cpus - c.threads);
  if (lost_cpu && c.samples > 0 && c.runnable_others > static_cast<double>(free_cores)) {
    c.reasons.push_back(fmt::format("{:g} other runnable tasks (median of {} samples) > {} free cores",
                                    c.runnable_others, c.samples, free_cores));
  }
  // Wake-up latency alone (an idle machine, OpenMP threads that sleep between regions) is not another process.
  if (lost_cpu && c.run_wait_share > 0.10 && c.runnable_others > 0) {
    c.reasons.push_back(fmt::format("threads waited for a CPU {:.0f}% of the time (> 10%)", 100.0 * c.run_wait_share));
  }
  if (c.steal_share > 0.05) {
    c.reasons.push_back(fmt::format("steal {:.0f}% of the machine's CPU time (> 5%)", 100.0 * c.steal_share));
  }
  if (c.threads > c.usable_cpus) {
    c.reasons.push_back(fmt::format("{} threads on {} usable cores", c.threads, c.usable_cpus));
  }
  c.busy = !c.reasons.empty();
}

void contention_to_json(const Contention& c, nlohmann::json& record) {
  const CpuAllowance& a = cpu_allowance();
  auto known = [](double v) { return v < 0.0 ? nlohmann::json(nullptr) : nlohmann::json(v); };
  record["cpu_share"] = c.cpu_share;
  record["busy_machine"] = c.busy;
  record["busy_reasons"] = c.reasons;
  record["contention"] = {{"wall_s", c.wall_s},
                          {"cpu_s", c.cpu_s},
                          {"threads", c.threads},
                          {"usable_cpus", c.usable_cpus},
                          {"affinity_cpus", a.affinity},
                          {"cpu_quota", a.quota > 0.0 ? nlohmann::json(a.quota) : nlohmann::json(nullptr)},
                          {"runnable_others", c.runnable_others},
                          {"runnable_others_max", c.runnable_others_max},
                          {"samples", c.samples},
                          {"steal_share", known(c.steal_share)},
                          {"run_wait_share", known(c.run_wait_share)},
                          {"rule", kBusyRule}};
}

struct ContentionProbe::Sampler {
  std::mutex mutex;
  std::condition_variable cv;
  bool stop = false;
  std::thread thread;
};

ContentionProbe::ContentionProbe(int64_t threads, int every_ms)
    : threads_(std::max<int64_t>(1, threads)), every_ms_(every_ms) {}

ContentionProbe::~ContentionProbe() {
  if (sampler_ == nullptr) return;
  {
    const std::lock_guard<std::mutex> lock(sampler_->mutex);
    sampler_->stop = true;
  }
  sampler_->cv.notify_all();
  sampler_->thread.join();
  delete sampler_;
}

void ContentionProbe::add(const ContentionSnapshot& s) {
  if (s.procs_running < 0) return;
  others_.push_back(std::max<int64_t>(0, s.procs_running - s.own_running));
}

void ContentionProbe::start() {
  others_.clear();
  const ContentionSnapshot s = take_snapshot();
  add(s);
  wait0_ = s.own_wait_ns;
  stat0_ = parse_proc_stat(read_text("/proc/stat").value_or(""));
  cpu0_ = process_cpu_seconds(false);
  child_cpu0_ = process_cpu_seconds(true) - cpu0_;
  wall0_ = wall_now();
  if (every_ms_ > 0 && sampler_ == nullptr) {
    sampler_ = new Sampler;
    sampler_->thread = std::thread([this] {
      std::unique_lock<std::mutex> lock(sampler_->mutex);
      while (!sampler_->cv.wait_for(lock, std::chrono::milliseconds(every_ms_), [this] { return sampler_->stop; })) {
        add(take_snapshot());  // others_ is guarded by the mutex held here
      }
    });
  }
}

void ContentionProbe::sample() {
  const ContentionSnapshot s = take_snapshot();
  if (sampler_ != nullptr) {
    const std::lock_guard<std::mutex> lock(sampler_->mutex);
    add(s);
  } else {
    add(s);
  }
}

Contention ContentionProbe::stop() {
  Contention c;
  c.wall_s = wall_now() - wall0_;
  const double cpu = process_cpu_seconds(false);
  c.cpu_s = (cpu - cpu0_) + std::max(0.0, (process_cpu_seconds(true) - cpu) - child_cpu0_);
  if (sampler_ != nullptr) {
    {
      const std::lock_guard<std::mutex> lock(sampler_->mutex);
      sampler_->stop = true;
    }
    sampler_->cv.notify_all();
    sampler_->thread.join();
    delete sampler_;
    sampler_ = nullptr;
  }
  const ProcStat st = parse_proc_stat(read_text("/proc/stat").value_or(""));
  const ContentionSnapshot s = take_snapshot();
  add(s);
  c.threads = threads_;
  c.usable_cpus = cpu_allowance().usable;
  c.cpu_share = c.wall_s > 0.0 ? c.cpu_s / (c.wall_s * static_cast<double>(threads_)) : 0.0;
  c.samples = static_cast<int64_t>(others_.size());
  c.runnable_others = static_cast<double>(lower_median(others_));
  c.runnable_others_max = others_.empty() ? 0 : *std::max_element(others_.begin(), others_.end());
  if (stat0_.ok && st.ok && st.total > stat0_.total) {
    c.steal_share = static_cast<double>(st.steal - stat0_.steal) / static_cast<double>(st.total - stat0_.total);
  }
  if (wait0_ >= 0 && s.own_wait_ns >= 0 && c.wall_s > 0.0) {
    // Threads that ended during the region take their waits with them: a lower bound then.
    c.run_wait_share = std::max<double>(0.0, 1e-9 * static_cast<double>(s.own_wait_ns - wait0_)) /
                       (c.wall_s * static_cast<double>(threads_));
  }
  judge_contention(c);
  return c;
}

}  // namespace sb
