// Dropout with a counter-based hash mask: vectorised, parallel, and recomputed in backward instead of stored.
#pragma once

#include <torch/torch.h>

namespace sb {

// Zeroes each element with probability p and scales the rest by 1/(1-p); identity when !train or p == 0.
// The mask is a hash of the element index and a seed drawn from LibTorch's default CPU generator, so
// torch::manual_seed and checkpointed generator state reproduce it. LibTorch 1.13's CPU bernoulli_ draws one
// element at a time and took half of a small model's forward pass; non-CPU tensors use torch::dropout.
torch::Tensor fast_dropout(const torch::Tensor& x, double p, bool train);

}  // namespace sb
