// BLAS set-up: which OpenBLAS kernels run, how many BLAS threads, and a description for result records.
#pragma once

#include <string>

namespace sb {

// Fixes two OpenBLAS set-ups that cost a small model most of its speed, by setting environment variables the
// libraries read only at load time and re-executing the program (only variables the user has not set):
// - runtime CPU detection reads some virtualised CPUs ("Intel Xeon Processor" without a model) as Prescott
//   and runs SSE3 kernels at a fifth of the AVX-512 rate: OPENBLAS_CORETYPE names the CPU's real family;
// - OpenBLAS's pthreads build keeps its own thread pool, which fights LibTorch's spinning OpenMP threads
//   for the cores (training ran at half speed): OMP_WAIT_POLICY=passive. The OpenMP build shares one pool.
// and, whatever the BLAS, OpenMP's wait policy (sb::set_default_wait_policy: passive unless the user chose one).
// Returns only when nothing needed changing or re-execution failed.
void configure_blas_runtime(char** argv);

// Sets OpenBLAS's own thread pool (LibTorch's set_num_threads does not reach it); no-op for other BLAS.
void set_blas_threads(int threads);

// Stops the pthreads build's thread pool, which OpenBLAS starts when it loads, and starts it again from the calling
// thread, whose floating-point mode new threads inherit. No-op for other BLAS builds.
void restart_blas_thread_pool();

// LibTorch's BLAS build info, the BLAS library mapped into this process and OpenBLAS's kernel choice.
std::string blas_info();

}  // namespace sb
