// LanguageModel: byte Transformer LM over a pattern graph (tokens + extra nodes), or the dense baseline.
#include "harness/lm/model.h"

#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <optional>

#include <fmt/format.h>
#include <torch/version.h>

#include "common/error.h"
#include "common/hash.h"
#include "harness/lm/fast_linear.h"

namespace sb {

Precision precision_of(const std::string& dtype) {
  if (dtype == "float64") return {torch::kFloat64, torch::kFloat64};
  if (dtype == "bfloat16") return {torch::kFloat32, torch::kBFloat16};
  if (dtype == "float16") return {torch::kFloat32, torch::kFloat16};
  if (dtype == "float32") return {};
  throw Error(fmt::format("dtype: expected float32, float64, bfloat16 or float16, got '{}'", dtype));
}

LanguageModelImpl::LanguageModelImpl(const ModelConfig& cfg) : cfg_(cfg) {
  validate_model_config(cfg_);
  const int64_t head_dim = cfg_.dim / cfg_.heads;
  if (cfg_.attention == "graph") {
    const AttentionPattern& pattern = find_pattern(cfg_.pattern);
    if (cfg_.causal && !pattern.supports_causal()) {
      throw Error(fmt::format(
          "pattern '{}' has no causal form, so it cannot train a left-to-right language model; pick a causal "
          "pattern (see `sparsebench patterns`)",
          cfg_.pattern));
    }
    resolved_params_ = resolve_params(pattern, cfg_.pattern_params);
    // The relation vocabulary is the full-context graph's; shorter sequences use a subset of it.
    if (cfg_.positions == "relative") {
      relations_ = shared_pattern_graph(cfg_.pattern, cfg_.context, cfg_.causal, resolved_params_)->relations;
    }
  } else {
    if (cfg_.positions == "relative") {
      for (int64_t d = -kDistClip; d <= kDistClip; ++d) relations_.push_back(dist_relation_name(d));
    }
  }
  for (size_t i = 0; i < relations_.size(); ++i) relation_ids_[relations_[i]] = static_cast<uint16_t>(i);

  embed_ = register_module("embed", torch::nn::Embedding(256, cfg_.dim));
  torch::nn::init::normal_(embed_->weight, 0.0, 0.02);
  if (cfg_.positions == "absolute") {
    pos_emb_ = register_parameter("pos_emb", torch::randn({cfg_.context, cfg_.dim}) * 0.02);
  }
  for (int64_t l = 0; l < cfg_.layers; ++l) {
    Block b;
    const std::string p = fmt::format("layer{}_", l);
    b.norm1 = register_module(p + "norm1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({cfg_.dim})));
    b.norm2 = register_module(p + "norm2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({cfg_.dim})));
    b.q = register_module(p + "q", torch::nn::Linear(cfg_.dim, cfg_.dim));
    b.k = register_module(p + "k", torch::nn::Linear(cfg_.dim, cfg_.dim));
    b.v = register_module(p + "v", torch::nn::Linear(cfg_.dim, cfg_.dim));
    b.o = register_module(p + "o", torch::nn::Linear(cfg_.dim, cfg_.dim));
    b.ff1 = register_module(p + "ff1", torch::nn::Linear(cfg_.dim, cfg_.ffn));
    b.ff2 = register_module(p + "ff2", torch::nn::Linear(cfg_.ffn, cfg_.dim));
    if (!relations_.empty()) {
      const auto r = static_cast<int64_t>(relations_.size());
      b.rel_emb = register_parameter(p + "rel_emb", torch::randn({r, head_dim}) * 0.02);
    }
    blocks_.push_back(b);
  }
  // Post-norm blocks already end in a LayerNorm; pre-norm needs a final one.
  if (!cfg_.post_norm) {
    final_norm_ = register_module("final_norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({cfg_.dim})));
  }
}

const ModelConfig& LanguageModelImpl::config() const { return cfg_; }

void LanguageModelImpl::reset_parameters(uint64_t seed) {
  torch::NoGradGuard no_grad;
  const auto params = named_parameters(true);
  for (const auto& item : params) {
    const std::string& name = item.key();
    torch::Tensor p = item.value();
    if (name.find("norm") != std::string::npos) continue;  // LayerNorm: ones and zeros, nothing random
    auto gen = at::detail::createCPUGenerator(derive_seed(seed, name));
    auto fresh = torch::empty(p.sizes(), torch::kFloat32);  // drawn on the CPU in fp32: the same on every device
    const bool linear = name.size() > 7 && (name.compare(name.size() - 7, 7, ".weight") == 0 ||
                                            name.compare(name.size() - 5, 5, ".bias") == 0) &&
                        name.find("embed") == std::string::npos;
    if (linear) {
      // Linear layers as LibTorch initialises them: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for weight and bias.
      const std::string weight = name.substr(0, name.rfind('.')) + ".weight";
      const double bound = 1.0 / std::sqrt(static_cast<double>(params[weight].size(1)));
      fresh.uniform_(-bound, bound, gen);
    } else {
      fresh.normal_(0.0, 0.02, gen);  // embeddings, positions and relation tables
    }
    p.copy_(fresh);
  }
}

int64_t LanguageModelImpl::parameter_count() const {
  int64_t n = 0;
  for (const auto& p : parameters()) n += p.numel();
  return n;
}

const SequenceGraph& LanguageModelImpl::sequence_graph(int64_t n) {
  const torch::Device device = embed_->weight.device();
  const std::string key = fmt::format("{}@{}", n, device.str());
  auto it = graphs_.find(key);
  if (it != graphs_.end()) return it->second;

  SequenceGraph sg;
  sg.n_tokens = n;
  sg.n_nodes = n;
  if (cfg_.attention == "graph") {
    // The process's one build of this graph (the scenario's expansion and the constructor asked for it too).
    const std::shared_ptr<const Graph> built = shared_pattern_graph(cfg_.pattern, n, cfg_.causal, resolved_params_);
    std::optional<Graph> renumbered;
    if (!relations_.empty() && built->relations != relations_) {
      // Renumber relations into the model's vocabulary (a shorter sequence may use fewer of them).
      renumbered = *built;
      Graph& r = *renumbered;
      std::vector<uint16_t> remap(r.relations.size());
      for (size_t i = 0; i < r.relations.size(); ++i) {
        auto found = relation_ids_.find(r.relations[i]);
        if (found == relation_ids_.end()) {
          throw Error(fmt::format("pattern '{}' at length {} uses relation '{}', absent at the model's context {}",
                                  cfg_.pattern, n, r.relations[i], cfg_.context));
        }
        remap[i] = found->second;
      }
      for (auto& id : r.rel) id = remap[id];
      r.relations = relations_;
    }
    const Graph& g = renumbered ? *renumbered : *built;
    sg.fingerprint = built->fingerprint();  // the pattern's graph, before renumbering
    sg.n_nodes = g.n_nodes();
    // Extra nodes: span nodes start at zero, relay/sentence nodes at the mean of their tokens.
    const int64_t n_extra = sg.n_nodes - n;
    bool any_mean = false;
    for (int64_t i = n; i < sg.n_nodes; ++i) any_mean |= g.nodes[i].kind != NodeKind::span;
    if (any_mean) {
      auto init = torch::zeros({n_extra, n});
      auto a = init.accessor<float, 2>();
      for (int64_t i = n; i < sg.n_nodes; ++i) {
        const NodeInfo& info = g.nodes[i];
        if (info.kind == NodeKind::span) continue;
        const float w = 1.0f / static_cast<float>(info.last - info.first + 1);
        for (int32_t t = info.first; t <= info.last; ++t) a[i - n][t] = w;
      }
      sg.extra_init = init.to(device);
    }
    sg.graph = TorchGraph::from_graph(g, device);
  } else if (!relations_.empty()) {
    auto ids = torch::empty({n, n}, torch::kInt64);
    auto a = ids.accessor<int64_t, 2>();
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j) a[i][j] = dist_relation_id(i - j);
    sg.dist_ids = ids.to(device);
  }
  return graphs_.emplace(key, std::move(sg)).first->second;
}

// x: [B, N, dim] (normalised input of the attention sub-layer); returns [B, N, dim] before the output projection.
torch::Tensor LanguageModelImpl::attend(size_t layer, const torch::Tensor& x, const SequenceGraph& sg) {
  Block& b = blocks_[layer];
  const int64_t B = x.size(0), N = x.size(1), H = cfg_.heads, D = cfg_.dim / cfg_.heads;
  auto q = linear(b.q, x).view({B, N, H, D});
  auto k = linear(b.k, x).view({B, N, H, D});
  auto v = linear(b.v, x).view({B, N, H, D});
  const torch::Tensor rel_emb = b.rel_emb.defined() ? low(b.rel_emb) : b.rel_emb;
  torch::Tensor o;
  if (cfg_.attention == "graph") {
    o = graph_attention(q, k, v, rel_emb, sg.graph);  // [B, N, H, D]
  } else if (rel_emb.defined()) {
    // Dense with clipped-distance relations, the same scores as the dense pattern's graph:
    // s_ij = q_i . (k_j + r[dist(i-j)]) / sqrt(D); the softmax in the parameters' dtype, as autocast runs it.
    auto qh = q.permute({0, 2, 1, 3});                       // [B, H, T, D]
    auto scores = torch::matmul(qh, k.permute({0, 2, 3, 1}));  // [B, H, T, T]
    auto qr = torch::matmul(qh, rel_emb.t());                // [B, H, T, R]
    scores = scores + torch::gather(qr, 3, sg.dist_ids.unsqueeze(0).unsqueeze(0).expand({B, H, N, N}));
    scores = scores.to(x.scalar_type()) / std::sqrt(static_cast<double>(D));
    if (cfg_.causal) {
      auto future = torch::ones({N, N}, torch::TensorOptions().dtype(torch::kBool).device(x.device())).triu(1);
      scores = scores.masked_fill(future, -std::numeric_limits<double>::infinity());
    }
    o = torch::matmul(low(torch::softmax(scores, -1)), v.permute({0, 2, 1, 3})).permute({0, 2, 1, 3});
  } else {
    o = dense_baseline(q, k, v, cfg_.causal, cfg_.attention == "dense_naive");
  }
  return o.reshape({B, N, cfg_.dim});
}

torch::Tensor LanguageModelImpl::linear(torch::nn::Linear& layer, const torch::Tensor& x) {
  if (!low_) return fast_linear(x, layer->weight, layer->bias);
  return torch::linear(low(x), low(layer->weight), low(layer->bias));
}

void LanguageModelImpl::set_compute_dtype(c10::ScalarType dtype) {
  if (dtype != torch::kBFloat16 && dtype != torch::kFloat16) {
    low_.reset();
    return;
  }
  // What the forward runs in the low type, once on a tiny input: a LibTorch without it (1.13 has no float16
  // matmul on the CPU) is refused here, by name, not deep in the first step.
  const torch::Device device = embed_->weight.device();
  try {
    const torch::Tensor t = torch::ones({2, 8}, torch::TensorOptions().dtype(dtype).device(device));
    (void)torch::gelu(torch::linear(t, t, t.select(1, 0))).sum().item<double>();  // [2, 8] x [2, 8]^T + [2]
  } catch (const c10::Error& e) {
    const std::string what = e.what_without_backtrace();
    throw Error(fmt::format("dtype {}: this LibTorch ({}) cannot run {} matmuls on {} ({}); use {}",
                            dtype_name(dtype), TORCH_VERSION, dtype_name(dtype), device.str(),
                            what.substr(0, what.find('\n')),
                            dtype == torch::kFloat16 ? "bfloat16, or a GPU" : "float32, or a GPU"));
  }
  low_ = dtype;
}

c10::ScalarType LanguageModelImpl::compute_dtype() const { return low_ ? *low_ : embed_->weight.scalar_type(); }

std::string LanguageModelImpl::attention_backend() const {
  const torch::Tensor w = embed_->weight;
  if (cfg_.attention == "graph") return graph_attention_backend(w.device(), compute_dtype());
  if (blocks_.front().rel_emb.defined()) return "materialised (relative-position bias)";
  // The kernel choice reads shapes, dtype and device only: an uninitialised [1, T, H, D] stands for q, k and v.
  const torch::Tensor q =
      torch::empty({1, cfg_.context, cfg_.heads, cfg_.dim / cfg_.heads}, w.options().dtype(compute_dtype()));
  return dense_attention_backend(q, q, q, cfg_.causal, cfg_.attention == "dense_naive");
}

std::string LanguageModelImpl::attention_kernels() const {
  return cfg_.attention == "graph" ? graph_attention_last_call(embed_->weight.device()) : std::string();
}

torch::Tensor LanguageModelImpl::forward(const torch::Tensor& bytes) {
  if (bytes.dim() != 2 || bytes.size(1) < 1) {
    throw Error("bytes must have shape (B, T) with T >= 1, got " + c10::str(bytes.sizes()));
  }
  const int64_t B = bytes.size(0), T = bytes.size(1);
  if (T > cfg_.context) throw Error(fmt::format("bytes: length {} exceeds the model's context {}", T, cfg_.context));
  const SequenceGraph& sg = sequence_graph(T);

  auto x = embed_(bytes.to(torch::kInt64));  // [B, T, dim]
  if (pos_emb_.defined()) x = x + pos_emb_.slice(0, 0, T).unsqueeze(0);
  if (sg.n_nodes > T) {
    torch::Tensor extra;  // [B, n_extra, dim]
    if (sg.extra_init.defined()) {
      extra = torch::matmul(sg.extra_init.to(x.dtype()), x);
    } else {
      extra = torch::zeros({B, sg.n_nodes - T, cfg_.dim}, x.options());
    }
    x = torch::cat({x, extra}, 1);
  }
  x = drop(x);
  for (size_t l = 0; l < blocks_.size(); ++l) {
    Block& b = blocks_[l];
    // After the last attention only the token rows are read: skip the extra nodes' output projection and FFN.
    const bool last = l + 1 == blocks_.size();
    auto keep_tokens = [&](const torch::Tensor& t) { return last && sg.n_nodes > T ? t.slice(1, 0, T) : t; };
    if (cfg_.post_norm) {
      // The sums promote the low-type branches back to the parameters' dtype: the residual stream stays there.
      x = b.norm1(keep_tokens(x) + drop(linear(b.o, keep_tokens(attend(l, x, sg)))));
      x = b.norm2(x + drop(linear(b.ff2, fast_gelu(linear(b.ff1, x)))));
    } else {
      x = keep_tokens(x) + drop(linear(b.o, keep_tokens(attend(l, b.norm1(x), sg))));
      x = x + drop(linear(b.ff2, fast_gelu(linear(b.ff1, b.norm2(x)))));
    }
  }
  if (!cfg_.post_norm) x = final_norm_(x);
  // Tied output embedding: [B, T, 256], returned in the parameters' dtype for the loss's log-softmax.
  if (!low_) return fast_linear(x, embed_->weight);
  return torch::matmul(low(x), low(embed_->weight).t()).to(embed_->weight.scalar_type());
}

}  // namespace sb
