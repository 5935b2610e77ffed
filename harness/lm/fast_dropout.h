// Dropout with a counter-based hash mask: vectorised, parallel, and recomputed in backward instead of stored.
#pragma once

#include <torch/torch.h>

namespace sb {

// Zeroes each element with probability p and scales the rest by 1/(1-p); identity when !train or p == 0.
// The mask is a hash of the element index and a seed drawn from LibTorch's default CPU generator, so
// torch::manual_seed and checkpointed generator state reproduce it. LibTorch 1.13's CPU bernoulli_ draws one
// element at a time and took half of a small model's forward pass; non-CPU tensors use torch::dropout.
torch::Tensor fast_dropout(const torch::Tensor& x, double p, bool train);

// Data-parallel runs: rank r of a run whose ranks hold equal, batch-first slices of one global batch passes r, so
// its masks are those of its slice of the global tensor (element indices offset by r * numel) and W ranks with
// batch b drop exactly what one process with batch W*b drops. 0 (the default) for one process.
void set_dropout_shard(int64_t shard);

}  // namespace sb
