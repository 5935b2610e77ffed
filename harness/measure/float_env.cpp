// Subnormal floats: sets and reads the SSE control register's FTZ and DAZ bits.
#include "harness/measure/float_env.h"

#include <atomic>
#include <cstdlib>

#include <ATen/Parallel.h>

#include "common/error.h"

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
#endif
}

std::string denormals_mode() {
#ifdef SB_HAS_MXCSR
  const int mine = thread_mode();
  std::atomic<bool> same{true};
  on_every_intra_op_thread([&] {
    if (thread_mode() != mine) same = false;
  });
  if (!same || mine == 2) return "mixed";
  return mine == 1 ? "flushed" : "kept";
#else
  return "unknown";
#endif
}

}  // namespace sb
