// The CUDA kernels as a GsaBackend (registered by gsa_backends() when the build has CUDA).
#pragma once

#include <memory>

#include "kernels/cuda/gsa_cuda.h"
#include "kernels/cuda/gsa_cuda_tc.h"
#include "kernels/gsa_backend.h"

namespace sb {

std::unique_ptr<GsaBackend> make_gsa_cuda_backend(GsaCudaKernels kernels);
// "cuda:tc" (kernels/cuda/gsa_cuda_tc_backend.cpp): dense tiles of bf16/fp16 calls without relation embeddings on
// tensor cores, the rest on the lane groups. strict: unsupported() also refuses the calls the tensor-core forward
// does not take (the parity table's entry); otherwise it takes every call "cuda" takes (SB_CUDA_KERNELS=tc).
std::unique_ptr<GsaBackend> make_gsa_cuda_tc_backend(bool strict);
// What the calling thread's last cuda:tc forward (or backward) ran on tensor cores.
GsaTcStats gsa_cuda_tc_last_stats(bool backward = false);

}  // namespace sb
