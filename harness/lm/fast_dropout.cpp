// fast_dropout: hash-mask dropout as an autograd function (CPU; other devices fall back to torch::dropout).
#include "harness/lm/fast_dropout.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <mutex>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <ATen/record_function.h>
#include <fmt/format.h>

#include "common/error.h"

namespace sb {

namespace {

// murmur3's 32-bit finaliser: full avalanche, and 32-bit multiplies vectorise on every x86 target.
inline uint32_t mix32(uint32_t h) {
  h ^= h >> 16;
  h *= 0x85ebca6bu;
  h ^= h >> 13;
  h *= 0xc2b2ae35u;
  h ^= h >> 16;
  return h;
}

std::atomic<int64_t> g_shard{0};

// out[i] = keep(i) ? in[i] * scale : 0, keep(i) = hash(seed, first + i) >= threshold.
template <typename T>
void apply_mask(const T* in, T* out, int64_t n, int64_t first, uint64_t seed, uint32_t threshold, T scale) {
  at::parallel_for(0, n, 1 << 15, [&](int64_t begin, int64_t end) {
    int64_t i = begin;
    while (i < end) {
      // The high index bits salt each 2^32-element block, so huge tensors do not repeat masks.
      const int64_t hi = (first + i) >> 32;
      const int64_t stop = std::min<int64_t>(end, ((hi + 1) << 32) - first);
      const uint32_t salt = mix32(static_cast<uint32_t>(hi) ^ static_cast<uint32_t>(seed >> 32)) ^
                            static_cast<uint32_t>(seed);
      for (; i < stop; ++i) {
        const uint32_t h = mix32(static_cast<uint32_t>(first + i) * 0x9e3779b9u + salt);
        out[i] = h >= threshold ? in[i] * scale : T(0);
      }
    }
  });
}

torch::Tensor masked(const torch::Tensor& x, double p, uint64_t seed) {
  RECORD_FUNCTION("sparsebench::dropout", std::vector<c10::IValue>());
  auto in = x.contiguous();
  auto out = torch::empty_like(in);
  const auto threshold = static_cast<uint32_t>(p * 4294967296.0);
  AT_DISPATCH_FLOATING_TYPES(in.scalar_type(), "fast_dropout", [&] {
    apply_mask<scalar_t>(in.data_ptr<scalar_t>(), out.data_ptr<scalar_t>(), in.numel(), g_shard.load() * in.numel(),
                         seed, threshold, static_cast<scalar_t>(1.0 / (1.0 - p)));
  });
  return out;
}

struct FastDropout : public torch::autograd::Function<FastDropout> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, double p,
                               int64_t seed) {
    ctx->saved_data["p"] = p;
    ctx->saved_data["seed"] = seed;
    return masked(x, p, static_cast<uint64_t>(seed));
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const double p = ctx->saved_data["p"].toDouble();
    const auto seed = static_cast<uint64_t>(ctx->saved_data["seed"].toInt());
    return {masked(grads[0], p, seed), torch::Tensor(), torch::Tensor()};
  }
};

uint64_t draw_seed() {
  auto gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  return at::check_generator<at::CPUGeneratorImpl>(gen)->random64();
}

}  // namespace

void set_dropout_shard(int64_t shard) { g_shard.store(shard); }

torch::Tensor fast_dropout(const torch::Tensor& x, double p, bool train) {
  if (!(p >= 0.0 && p < 1.0)) throw Error(fmt::format("dropout: expected p in [0, 1), got {}", p));
  if (!train || p == 0.0) return x;
  if (!x.device().is_cpu() || !at::isFloatingType(x.scalar_type()) || x.scalar_type() == torch::kHalf ||
      x.scalar_type() == torch::kBFloat16) {
    return torch::dropout(x, p, train);
  }
  return FastDropout::apply(x, p, static_cast<int64_t>(draw_seed()));
}

}  // namespace sb
