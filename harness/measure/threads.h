// CPU thread-count control shared by every command, the trainer and the scenario runner.
#pragma once

namespace sb {

// Sets LibTorch's, OpenMP's and OpenBLAS's CPU thread count: `threads` <= 0 means all cores; more than
// kMaxThreads throws sb::Error naming --threads. Returns the count used.
int set_cpu_threads(int threads);

}  // namespace sb
