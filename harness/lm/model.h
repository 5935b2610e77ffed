// LanguageModel: a byte-level Transformer LM whose self-attention runs over an attention pattern's graph.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "harness/lm/config.h"
#include "harness/lm/fast_dropout.h"
#include "kernels/torch/graph_attention_op.h"
#include "patterns/pattern.h"

namespace sb {

// The per-length structure a forward pass needs: the pattern graph (relations renumbered into the
// model's vocabulary) and how extra nodes start.
struct SequenceGraph {
  int64_t n_tokens = 0;
  int64_t n_nodes = 0;
  TorchGraph graph;            // graph mode only
  torch::Tensor extra_init;    // [n_nodes - n_tokens, n_tokens] averaging rows (undefined: all extra nodes start at zero)
  torch::Tensor dist_ids;      // [T, T] int64 relation id of clipped distance i-j (dense mode with relative positions)
  std::string fingerprint;     // of the pattern graph
};

// A config dtype ("float32", "float64", "bfloat16", "float16") as the parameters' dtype and the compute dtype:
// bfloat16 and float16 keep float32 parameters (set_compute_dtype below).
struct Precision {
  torch::Dtype params = torch::kFloat32;
  torch::Dtype compute = torch::kFloat32;
};
Precision precision_of(const std::string& dtype);

class LanguageModelImpl : public torch::nn::Module {
 public:
  explicit LanguageModelImpl(const ModelConfig& cfg);  // throws sb::Error (e.g. pattern without causal form)
  torch::Tensor forward(const torch::Tensor& bytes);   // bytes: [B, T] int64, T <= context; returns logits [B, T, 256]
  int64_t parameter_count() const;
  // Draws every parameter from its own random stream, derived from `seed` and the parameter's name, with the
  // distribution the constructor uses: models of different patterns built with one seed start with identical
  // shared weights (their relation tables differ in size), so patterns are compared on paired runs.
  void reset_parameters(uint64_t seed);
  const ModelConfig& config() const;

  // Relation vocabulary of the relative position embeddings (empty for absolute positions).
  const std::vector<std::string>& relations() const { return relations_; }
  // The cached structure for sequence length n on the parameters' device (built on first use).
  const SequenceGraph& sequence_graph(int64_t n);
  // The pattern parameters after defaults were filled in (empty for the dense baseline).
  const Params& resolved_params() const { return resolved_params_; }
  // The attention kernel a forward at full context runs on the model's device and dtype ("cpu:AVX2",
  // "sdpa:flash_attention", "materialised", ...; records name it). From the configuration, not from a past call, so
  // a run resumed with nothing left to compute records the same.
  std::string attention_backend() const;
  // What the last forward's graph attention ran where (graph_attention_last_call): "" for dense attention and for
  // backends with one way of running a call.
  std::string attention_kernels() const;
  // Mixed precision as autocast does it: with `dtype` bfloat16 or float16 the matmuls (projections, FFN, logits)
  // and attention run in it, while parameters, the residual stream, norms and softmax statistics stay in the
  // parameters' dtype; anything else runs everything in the parameters' dtype. Throws sb::Error when this
  // LibTorch cannot run `dtype` on the parameters' device.
  void set_compute_dtype(c10::ScalarType dtype);
  c10::ScalarType compute_dtype() const;

 private:
  torch::Tensor attend(size_t layer, const torch::Tensor& x, const SequenceGraph& sg);
  torch::Tensor drop(const torch::Tensor& x) { return fast_dropout(x, cfg_.dropout, is_training()); }
  torch::Tensor linear(torch::nn::Linear& layer, const torch::Tensor& x);
  torch::Tensor low(const torch::Tensor& x) const { return low_ ? x.to(*low_) : x; }

  ModelConfig cfg_;
  c10::optional<c10::ScalarType> low_;  // bfloat16 or float16 compute (set_compute_dtype); none: the parameters'
  Params resolved_params_;
  std::vector<std::string> relations_;
  std::map<std::string, uint16_t> relation_ids_;
  std::map<std::string, SequenceGraph> graphs_;  // cache keyed by "length@device"

  torch::nn::Embedding embed_{nullptr};
  torch::Tensor pos_emb_;  // [context, dim] (absolute positions)
  struct Block {
    torch::nn::LayerNorm norm1{nullptr}, norm2{nullptr};
    torch::nn::Linear q{nullptr}, k{nullptr}, v{nullptr}, o{nullptr};
    torch::nn::Linear ff1{nullptr}, ff2{nullptr};
    torch::Tensor rel_emb;  // [R, D_head] (relative positions)
  };
  std::vector<Block> blocks_;
  torch::nn::LayerNorm final_norm_{nullptr};
};
TORCH_MODULE(LanguageModel);

}  // namespace sb
