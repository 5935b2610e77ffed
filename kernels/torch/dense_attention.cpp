// The dense baselines the patterns are compared against: LibTorch's best dense attention and the materialised one.
#include "kernels/torch/dense_attention.h"

#include <fmt/format.h>
#include <torch/version.h>

#include <cmath>
#include <limits>

#include "kernels/torch/tensor_text.h"
#include "common/error.h"

namespace sb {

namespace {

void check_dense_inputs(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
  if (q.dim() != 4) throw Error(fmt::format("q must have shape (B, T, H, D), got {}", shape_str(q)));
  if (k.sizes() != q.sizes()) throw Error(fmt::format("k must have shape {} like q, got {}", shape_str(q), shape_str(k)));
  if (v.sizes() != q.sizes()) throw Error(fmt::format("v must have shape {} like q, got {}", shape_str(q), shape_str(v)));
}

}  // namespace

torch::Tensor dense_naive_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                    bool causal) {
  check_dense_inputs(q, k, v);
  // [B, T, H, D] -> [B, H, T, D]
  // q is scaled before the product so the [B, H, T, T] scores are materialised once
  const torch::Tensor qt = (q * (1.0 / std::sqrt(static_cast<double>(q.size(3))))).transpose(1, 2);
  const torch::Tensor kt = k.transpose(1, 2), vt = v.transpose(1, 2);
  torch::Tensor scores = torch::matmul(qt, kt.transpose(-2, -1));
  if (causal) {
    const int64_t t = q.size(1);
    const torch::Tensor future = torch::ones({t, t}, q.options().dtype(torch::kBool)).triu(1);
    scores.masked_fill_(future, -std::numeric_limits<double>::infinity());
  }
  return torch::matmul(torch::softmax(scores, -1), vt).transpose(1, 2).contiguous();
}

torch::Tensor dense_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, bool causal) {
#if TORCH_VERSION_MAJOR >= 2
  check_dense_inputs(q, k, v);
  // [B, T, H, D] -> [B, H, T, D]; the default scale is 1/sqrt(D), as in the naive path
  return at::scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), {}, 0.0, causal)
      .transpose(1, 2)
      .contiguous();
#else
  return dense_naive_attention(q, k, v, causal);
#endif
}

std::string dense_attention_backend(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                    bool causal, bool naive) {
  check_dense_inputs(q, k, v);
#if TORCH_VERSION_MAJOR >= 2
  if (!naive) {
    // The same choice scaled_dot_product_attention makes (at::SDPBackend numbering, stable since 2.0).
    switch (at::_fused_sdp_choice(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), {}, 0.0, causal)) {
      case 0: return "sdpa:math";
      case 1: return "sdpa:flash_attention";
      case 2: return "sdpa:efficient_attention";
      case 3: return "sdpa:cudnn_attention";
      default: return "sdpa:other";
    }
  }
#else
  (void)causal;
  (void)naive;
#endif
  return "materialised";
}

}  // namespace sb
