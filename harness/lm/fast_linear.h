// Linear layers (y = x W^T + b) and GELU of the language model through oneDNN on the CPU, forward and backward.
#pragma once

#include <torch/torch.h>

#include <string>

namespace sb {

// x [..., K], w [N, K], b [N] or undefined -> [..., N], differentiable in all three. Float32 CPU tensors run oneDNN's
// matmul where the build has it (SB_ONEDNN) and SB_MATMUL is not "torch"; anything else runs torch::linear.
// OpenBLAS reached 95-150 GFLOP/s on the model's [4096, 128] x [128, N] products where oneDNN's kernels reach
// 200-220 (2-core Zen 4), and those products are most of a small model's step.
torch::Tensor fast_linear(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b = {});

// GELU (exact, erf form) whose backward runs oneDNN's vectorised eltwise kernel for float32 CPU tensors where
// fast_linear runs oneDNN (LibTorch 1.13's CPU backward computes erf one element at a time: 5-7x its forward, which
// already runs oneDNN's); the forward is torch::gelu's. Anything else runs torch::gelu.
torch::Tensor fast_gelu(const torch::Tensor& x);

// Which library runs fast_linear's float32 CPU products, for records: "onednn <version> (<isa>)" or "libtorch"
// (with the reason when oneDNN was built but is switched off).
std::string matmul_backend();

}  // namespace sb
