// CPU thread-count control: LibTorch starts with a one-thread pool here and OpenBLAS keeps its own, so every
// command sets both; threads 0 is the cores this process may use (affinity and cgroup quota).
#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <string>

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

bool set_default_wait_policy() {
  if (std::getenv("OMP_WAIT_POLICY") != nullptr || std::getenv("GOMP_SPINCOUNT") != nullptr) return false;
  setenv("OMP_WAIT_POLICY", "passive", 1);
  setenv(kWaitPolicyMark, "1", 1);
  return true;
}

std::string omp_wait_policy() {
  const char* policy = std::getenv("OMP_WAIT_POLICY");
  const char* spin = std::getenv("GOMP_SPINCOUNT");
  const bool ours = std::getenv(kWaitPolicyMark) != nullptr;
  std::string out;
  if (policy != nullptr) {
    out = ours ? fmt::format("{} (sparsebench default)", policy)
               : fmt::format("OMP_WAIT_POLICY={} (environment)", policy);
  }
  if (spin != nullptr) out += fmt::format("{}GOMP_SPINCOUNT={} (environment)", out.empty() ? "" : ", ", spin);
  return out.empty() ? "runtime default" : out;
}

}  // namespace sb
