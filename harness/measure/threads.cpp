// CPU thread-count control: LibTorch starts with a one-thread pool here and OpenBLAS keeps its own, so every
// command sets both.
#include <omp.h>

#include <algorithm>
#include <thread>

#include <ATen/Parallel.h>
#include <fmt/format.h>

#include "harness/measure/threads.h"

#include "common/error.h"
#include "common/limits.h"
#include "harness/measure/blas.h"

namespace sb {

int set_cpu_threads(int threads) {
  if (threads > kMaxThreads) {
    throw Error(fmt::format("--threads: expected an integer in [0, {}] (0 = all cores), got {}", kMaxThreads, threads));
  }
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  at::set_num_threads(threads);
  omp_set_num_threads(threads);
  set_blas_threads(threads);
  return threads;
}

}  // namespace sb
