// CPU thread-count control: LibTorch starts with a one-thread pool here and OpenBLAS keeps its own, so every
// command sets both.
#include <omp.h>

#include <algorithm>
#include <thread>

#include <ATen/Parallel.h>

#include "harness/measure/threads.h"

#include "harness/measure/blas.h"

namespace sb {

int set_cpu_threads(int threads) {
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  at::set_num_threads(threads);
  omp_set_num_threads(threads);
  set_blas_threads(threads);
  return threads;
}

}  // namespace sb
