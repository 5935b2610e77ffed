// The CUDA kernels as a GsaBackend (registered by gsa_backends() when the build has CUDA).
#pragma once

#include <memory>

#include "kernels/cuda/gsa_cuda.h"
#include "kernels/gsa_backend.h"

namespace sb {

std::unique_ptr<GsaBackend> make_gsa_cuda_backend(GsaCudaKernels kernels);

}  // namespace sb
