// How the op's messages and records name tensors: a dtype as Python spells it, a shape as "(B, N, H, D)".
#pragma once

#include <torch/torch.h>

#include <string>

namespace sb {

// A dtype as Python spells it: float32, bfloat16, int64, ...
std::string dtype_name(c10::ScalarType s);
// t's shape as "(2, 5, 3)", and its dtype as dtype_name spells it.
std::string shape_str(const torch::Tensor& t);
std::string dtype_str(const torch::Tensor& t);

}  // namespace sb
