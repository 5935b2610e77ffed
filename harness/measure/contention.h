// Whether the machine was busy while something was timed: the process's CPU time against wall time x threads, other
// runnable tasks, steal time and run-queue waits (plain C++, read from /proc and the cgroup files).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

namespace sb {

// The cores this process may use: its affinity mask, capped by a cgroup CPU quota (rounded up to whole cores).
struct CpuAllowance {
  int64_t affinity = 1;      // CPUs in the sched_getaffinity mask
  double quota = 0.0;        // cgroup CPU quota in cores (quota / period), 0 when none
  std::string quota_source;  // e.g. "/sys/fs/cgroup/cpu.max"; empty when none
  int64_t usable = 1;        // min(affinity, ceil(quota)), at least 1
};

// Read once per process (affinity and quota do not change under a running benchmark).
const CpuAllowance& cpu_allowance();

// A file's text, or nullopt when it cannot be read (tests pass a fake file system).
using ReadFileFn = std::function<std::optional<std::string>(const std::string& path)>;

// The tightest CPU quota (cores) of this process's cgroup and its ancestors, from /proc/self/cgroup's text: cgroup
// v2 (`0::/path`, ROOT/path/cpu.max: "max 100000" or "150000 100000") and v1 (a hierarchy naming the cpu
// controller, ROOT/cpu[,cpuacct]/path/cpu.cfs_quota_us and cpu.cfs_period_us, -1 = none). 0 when none; `source`
// gets the file that set it.
double cgroup_cpu_quota(const std::string& self_cgroup, const ReadFileFn& read, std::string* source,
                        const std::string& root = "/sys/fs/cgroup");

// cgroup v2 cpu.max: cores, 0 for "max"; -1 when malformed.
double parse_cpu_max(const std::string& text);

// cgroup v1: quota / period in cores, 0 for quota -1; -1 when malformed.
double parse_cfs_quota(const std::string& quota_us, const std::string& period_us);

// /proc/stat: the aggregate "cpu" line's jiffies and procs_running.
struct ProcStat {
  int64_t total = 0;           // user + nice + system + idle + iowait + irq + softirq + steal
  int64_t steal = 0;
  int64_t procs_running = -1;  // tasks running or runnable now, this one included; -1 when absent
  bool ok = false;             // the cpu line was found
};
ProcStat parse_proc_stat(const std::string& text);

// /proc/loadavg's fourth field "running/total": the running count, -1 when malformed.
int64_t parse_loadavg_running(const std::string& text);

// /proc/PID/task/TID/stat: the state letter after the command name ('R' running or runnable); 0 when malformed.
char parse_task_state(const std::string& stat);

// /proc/PID/task/TID/schedstat "run_ns wait_ns slices": the nanoseconds spent runnable on a run queue, -1 when
// malformed.
int64_t parse_schedstat_wait(const std::string& text);

// The measured figures of one timed region and the verdict.
struct Contention {
  double wall_s = 0.0;
  double cpu_s = 0.0;             // process CPU time (all its threads) over the region
  int64_t threads = 1;            // threads the work ran on
  double cpu_share = 0.0;         // cpu_s / (wall_s x threads)
  int64_t usable_cpus = 1;        // cpu_allowance().usable
  double runnable_others = 0.0;   // median over samples of runnable tasks not of this process
  int64_t runnable_others_max = 0;
  int64_t samples = 0;
  double steal_share = -1.0;      // steal jiffies / all jiffies of the machine over the region; -1 unknown
  double run_wait_share = -1.0;   // this process's threads' run-queue wait / (wall_s x threads); -1 unknown
  bool busy = false;
  std::vector<std::string> reasons;  // why busy (empty when not)
};

// The rule, as records state it.
extern const char* const kBusyRule;

// Applies kBusyRule to the figures in `c`: sets busy and reasons.
void judge_contention(Contention& c);

// The record fields: cpu_share, busy_machine, busy_reasons and `contention` {the figures, rule}.
void contention_to_json(const Contention& c, nlohmann::json& record);

// One snapshot: runnable tasks of the machine and of this process, and this process's run-queue wait so far.
struct ContentionSnapshot {
  int64_t procs_running = -1;
  int64_t own_running = 0;
  int64_t own_wait_ns = -1;  // -1: schedstat unreadable
};
ContentionSnapshot take_snapshot();

// Measures a timed region: start(), sample() between timed calls (never inside them), stop(). With
// `every_ms` > 0 a background thread also samples every that many ms (for long regions: training runs).
class ContentionProbe {
 public:
  explicit ContentionProbe(int64_t threads, int every_ms = 0);
  ~ContentionProbe();
  ContentionProbe(const ContentionProbe&) = delete;
  ContentionProbe& operator=(const ContentionProbe&) = delete;
  void start();
  void sample();
  Contention stop();

 private:
  void add(const ContentionSnapshot& s);
  int64_t threads_;
  int every_ms_;
  double wall0_ = 0.0, cpu0_ = 0.0, child_cpu0_ = 0.0;
  ProcStat stat0_;
  int64_t wait0_ = -1;
  std::vector<int64_t> others_;
  struct Sampler;
  Sampler* sampler_ = nullptr;
};

// Process CPU seconds (all threads), plus finished children's when `children`.
double process_cpu_seconds(bool children = false);

}  // namespace sb
