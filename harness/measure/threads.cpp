// CPU thread-count control: LibTorch starts with a one-thread pool here and OpenBLAS keeps its own, so every
// command sets both; threads 0 is the cores this process may use (affinity and cgroup quota).
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <unistd.h>

#include <ATen/Parallel.h>
#include <fmt/format.h>

#include "harness/measure/threads.h"

#include "common/error.h"
#include "common/limits.h"
#include "harness/measure/blas.h"
#include "harness/measure/contention.h"

namespace sb {

namespace {

constexpr const char* kWaitPolicyMark = "SPARSEBENCH_WAIT_POLICY_DEFAULT";  // set beside it: the value is ours

}  // namespace

int set_cpu_threads(int threads) {
  if (threads > kMaxThreads) {
    throw Error(fmt::format("--threads: expected an integer in [0, {}] (0 = the cores this process may use), got {}",
                            kMaxThreads, threads));
  }
  if (threads <= 0) threads = static_cast<int>(cpu_allowance().usable);
  at::set_num_threads(threads);
  omp_set_num_threads(threads);
  set_blas_threads(threads);
  return threads;
}

// Other runnable tasks on the machine now (/proc/loadavg's running count less this process), the fewest of three
// looks 5 ms apart so a passing task does not count; -1 where it cannot be read.
int other_runnable_at_start() {
  int fewest = -1;
  for (int i = 0; i < 3; ++i) {
    if (i > 0) usleep(5000);
    std::FILE* f = std::fopen("/proc/loadavg", "r");
    if (f == nullptr) return -1;
    double a, b, c;
    int running = 0, total = 0;
    const int got = std::fscanf(f, "%lf %lf %lf %d/%d", &a, &b, &c, &running, &total);
    std::fclose(f);
    if (got != 5) return -1;
    const int others = std::max(0, running - 1);
    fewest = fewest < 0 ? others : std::min(fewest, others);
  }
  return fewest;
}

bool set_default_wait_policy() {
  if (std::getenv("OMP_WAIT_POLICY") != nullptr || std::getenv("GOMP_SPINCOUNT") != nullptr) return false;
  if (std::getenv(kWaitPolicyMark) != nullptr) return false;  // decided before the re-exec
  // Sleeping waits keep a descheduled thread from holding the others at a barrier when another process competes
  // for the cores (threads 2 beside a busy loop: 0.5-1.0x the time of threads 1, against 2.4-3.5x spinning), but
  // cost each barrier a wake-up when nothing competes (11-44% slower in a nearly quiet window). So: passive only
  // when other tasks are runnable as sparsebench starts; the record says which was chosen and why.
  const int others = other_runnable_at_start();
  if (others <= 0) {
    setenv(kWaitPolicyMark, others == 0 ? "quiet" : "unknown", 1);
    return false;
  }
  setenv("OMP_WAIT_POLICY", "passive", 1);
  setenv(kWaitPolicyMark, fmt::format("{}", others).c_str(), 1);
  return true;
}

std::string omp_wait_policy() {
  const char* policy = std::getenv("OMP_WAIT_POLICY");
  const char* spin = std::getenv("GOMP_SPINCOUNT");
  const char* mark = std::getenv(kWaitPolicyMark);
  const std::string why = mark == nullptr ? "" : mark;
  std::string out;
  if (policy != nullptr) {
    out = !why.empty() && why != "quiet" && why != "unknown"
              ? fmt::format("{} (sparsebench: {} other runnable tasks at start)", policy, why)
              : fmt::format("OMP_WAIT_POLICY={} (environment)", policy);
  }
  if (spin != nullptr) out += fmt::format("{}GOMP_SPINCOUNT={} (environment)", out.empty() ? "" : ", ", spin);
  if (!out.empty()) return out;
  if (why == "quiet") return "runtime default (machine quiet at start)";
  return why == "unknown" ? "runtime default (load unreadable at start)" : "runtime default";
}

}  // namespace sb
