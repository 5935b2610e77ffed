// Subnormal floats: sets and reads the SSE control register's FTZ and DAZ bits.
#include "harness/measure/float_env.h"

#include <atomic>
#include <cstdlib>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include "common/error.h"
#include "harness/measure/blas.h"

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#define SB_HAS_MXCSR 1
#endif

namespace sb {

namespace {

#ifdef SB_HAS_MXCSR
constexpr unsigned kFlushBits = 0x8040;  // FTZ (bit 15) and DAZ (bit 6)

// Runs fn once on each LibTorch intra-op thread: with grain 1 and one index per thread, ATen's OpenMP backend gives
// each thread of the team one chunk.
template <typename Fn>
void on_every_intra_op_thread(Fn fn) {
  at::parallel_for(0, at::get_num_threads(), 1, [&](int64_t, int64_t) { fn(); });
}

// 1: both bits set on this thread; 0: neither; 2: one of them.
int thread_mode() {
  const unsigned bits = _mm_getcsr() & kFlushBits;
  return bits == kFlushBits ? 1 : bits == 0 ? 0 : 2;
}

// The same for what the BLAS computes: a product whose every entry is a single subnormal term, 1e-20 * 1e-20 (the
// last of k), is 0 where a thread flushes and 1e-40 where it does not. Its entries are compared as integers: a float
// compare under DAZ reads 1e-40 as zero. 512 x 256 x 512 is large enough that OpenBLAS splits it across its
// threads (measured: 512 x 64 x 512 it computes on one).
int blas_mode() {
  constexpr int64_t m = 512, k = 256;
  at::Tensor a = at::zeros({m, k}, at::kFloat);  // float whatever the default dtype: 1e-40 is normal in double
  at::Tensor b = at::zeros({k, m}, at::kFloat);
  a.select(1, k - 1).fill_(1e-20);
  b.select(0, k - 1).fill_(1e-20);
  const int64_t nonzero = at::mm(a, b).view(at::kInt).ne(0).sum().item<int64_t>();
  return nonzero == 0 ? 1 : nonzero == m * m ? 0 : 2;
}
#endif

}  // namespace

void configure_denormals() {
  const char* env = std::getenv("SB_DENORMALS");
  const std::string want = env == nullptr || *env == '\0' ? "flush" : env;
  if (want != "flush" && want != "keep") {
    throw Error("SB_DENORMALS=" + want + ": expected flush (the default) or keep");
  }
#ifdef SB_HAS_MXCSR
  const bool flush = want == "flush";
  auto set = [flush] { _mm_setcsr(flush ? (_mm_getcsr() | kFlushBits) : (_mm_getcsr() & ~kFlushBits)); };
  set();
  // Intra-op threads already started (a library that ran in parallel first) do not inherit it: set theirs too.
  on_every_intra_op_thread(set);
  restart_blas_thread_pool();
#endif
}

std::string denormals_mode() {
#ifdef SB_HAS_MXCSR
  const int mine = thread_mode();
  std::atomic<bool> same{true};
  on_every_intra_op_thread([&] {
    if (thread_mode() != mine) same = false;
  });
  if (!same || mine == 2 || blas_mode() != mine) return "mixed";
  return mine == 1 ? "flushed" : "kept";
#else
  return "unknown";
#endif
}

}  // namespace sb
