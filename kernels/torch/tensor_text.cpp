// How the op's messages and records name tensors (tensor_text.h).
#include "kernels/torch/tensor_text.h"

#include <fmt/format.h>
#include <fmt/ranges.h>  // fmt::join (in format.h before fmt 11)

#include <vector>

namespace sb {

std::string dtype_name(c10::ScalarType s) {
  switch (s) {
    case torch::kFloat32: return "float32";
    case torch::kFloat64: return "float64";
    case torch::kFloat16: return "float16";
    case torch::kBFloat16: return "bfloat16";
    case torch::kInt32: return "int32";
    case torch::kInt64: return "int64";
    case torch::kInt16: return "int16";
    case torch::kInt8: return "int8";
    case torch::kUInt8: return "uint8";
    case torch::kBool: return "bool";
    default: return c10::toString(s);
  }
}

std::string shape_str(const torch::Tensor& t) {
  std::vector<int64_t> s(t.sizes().begin(), t.sizes().end());
  return fmt::format("({})", fmt::join(s, ", "));
}

std::string dtype_str(const torch::Tensor& t) { return dtype_name(t.scalar_type()); }

}  // namespace sb
