// CPU thread-count control shared by every command, the trainer and the scenario runner.
#pragma once

#include <string>

namespace sb {

// Sets LibTorch's, OpenMP's and OpenBLAS's CPU thread count: `threads` <= 0 means the cores this process may use
// (its affinity mask capped by a cgroup CPU quota: sb::cpu_allowance), not the machine's; more than kMaxThreads
// throws sb::Error naming --threads. Returns the count used.
int set_cpu_threads(int threads);

// Sets OMP_WAIT_POLICY=passive when neither it nor GOMP_SPINCOUNT is set and other tasks are runnable as the program
// starts, so that OpenMP threads waiting at a barrier sleep at once instead of spinning: a spinning waiter keeps its
// core from the thread it waits for when another process holds that thread's core (2 threads beside one busy process
// ran 10x slower than 1). On a quiet machine the runtime's spinning stays (sleeping cost each barrier a wake-up).
// OpenMP reads it when it loads: returns true when it was set and the program must re-execute itself to apply it.
bool set_default_wait_policy();

// The OpenMP wait policy in force, for records: "passive (sparsebench default)", "OMP_WAIT_POLICY=active
// (environment)", "GOMP_SPINCOUNT=10000 (environment)" or "runtime default".
std::string omp_wait_policy();

}  // namespace sb
