// The dense baselines (LibTorch only, no graph): what every pattern's graph attention is compared against.
#pragma once

#include <torch/torch.h>

#include <string>

namespace sb {

// Dense baselines, causal or not; q, k, v: [B, T, H, D]; return [B, T, H, D].
// dense_attention is the best dense attention LibTorch has: at::scaled_dot_product_attention on LibTorch >= 2.0
// (its fused FlashAttention, memory-efficient, cuDNN or CPU flash kernels; no mask is materialised), and the
// materialised path on LibTorch 1.13, which has no fused kernel.
torch::Tensor dense_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, bool causal);
// dense_naive_attention materialises every score (matmul, mask, softmax, matmul): the paper's own baseline.
torch::Tensor dense_naive_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                    bool causal);
// The dense baseline a model or scenario names: dense_naive_attention when `naive`, else dense_attention.
inline torch::Tensor dense_baseline(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                    bool causal, bool naive) {
  return naive ? dense_naive_attention(q, k, v, causal) : dense_attention(q, k, v, causal);
}
// The kernel a dense call on these inputs runs, as records name it: "sdpa:flash_attention",
// "sdpa:efficient_attention", "sdpa:cudnn_attention", "sdpa:math" or "materialised" (naive: dense_naive_attention).
std::string dense_attention_backend(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                    bool causal, bool naive);

}  // namespace sb
