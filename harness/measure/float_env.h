// Subnormal floats: flush-to-zero for sparsebench's processes, and the mode that records name.
#pragma once

#include <string>

namespace sb {

// Sets flush-to-zero and denormals-are-zero on the calling thread, LibTorch's intra-op threads and the BLAS threads
// unless SB_DENORMALS=keep (an unknown value is an error naming it). Why: once a model is confident, softmax and its
// gradients produce subnormal floats, which x86 cores compute through microcode assists; a CPU training run then
// slowed 1.9x mid-run (dense MQAR, 3 layers), so tokens/s told apart seeds, not patterns. Call it before other
// threads start: threads inherit the mode. OpenBLAS's pthreads pool, started when the library loads, is restarted.
void configure_denormals();

// "flushed" (FTZ and DAZ) or "kept" (IEEE subnormals) on the calling thread, every LibTorch intra-op thread and in
// what a BLAS matrix product computes (split across the BLAS threads), "mixed" when they differ, "unknown" on CPUs
// without an SSE control register.
std::string denormals_mode();

}  // namespace sb
