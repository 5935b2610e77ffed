// Measuring tools shared by the scenario runner and `sparsebench bench`: device sync, peak memory of a region,
// the fp32 GEMM yardstick and the attention FLOP count.
#pragma once

#include <cstdint>

#include <torch/torch.h>

namespace sb {

// Waits for the device's queued work (no-op on the CPU).
void sync_device(const torch::Device& device);

// Peak memory of measured work: CPU tensors via the counting allocator (sb::MemoryTracker), CUDA tensors via
// the caching allocator where LibTorch has CUDA. reset() before the work, peak() - base after it.
class PeakProbe {
 public:
  explicit PeakProbe(torch::Device device);
  const char* source() const;  // "cpu_counting_allocator" | "cuda_caching_allocator"
  bool available() const;      // false for CUDA tensors when this build cannot read the caching allocator
  void reset();                // sets the peak to what is live now and remembers it as base()
  int64_t base() const { return base_; }
  int64_t peak() const;

 private:
  torch::Device device_;
  int64_t base_ = 0;
};

// GEMM rate (GFLOP/s) in `dtype` of a 2048^3 LibTorch matmul (512^3 for half types on the CPU) on `device` at the
// current thread count: best of 3 after a warm-up, measured once per (device, threads, dtype). The yardstick of
// gemm_fraction.
double gemm_gflops(torch::Device device, torch::Dtype dtype = torch::kFloat32);

// FLOPs of one attention call over `pairs` attended (query, key) pairs: 4 per pair and head dimension forward
// (scores and weighted sum); forward+backward counted as 3.5x that (backward = 2.5x forward, recomputation
// excluded, the FlashAttention convention).
double attention_flops(double pairs, int64_t batch, int64_t heads, int64_t head_dim, bool backward);

}  // namespace sb
