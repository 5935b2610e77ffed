// Device sync, peak-memory probes, the GEMM yardstick and attention FLOP counts.
#include "harness/measure/timing.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <string>

#include <fmt/format.h>

#include "harness/measure/memory_tracker.h"

#if defined(SB_WITH_CUDA) && __has_include(<c10/cuda/CUDACachingAllocator.h>)
#include <c10/cuda/CUDACachingAllocator.h>
#define SB_CUDA_PEAK 1
// StatType::AGGREGATE is index 0; LibTorch 2.x moved the enum out of CUDACachingAllocator.
constexpr size_t kAggregateStat = 0;
#endif

namespace sb {

void sync_device(const torch::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize();
}

PeakProbe::PeakProbe(torch::Device device) : device_(device) {
  if (!device_.is_cuda()) MemoryTracker::install();
}

const char* PeakProbe::source() const { return device_.is_cuda() ? "cuda_caching_allocator" : "cpu_counting_allocator"; }

bool PeakProbe::available() const {
#ifdef SB_CUDA_PEAK
  return true;
#else
  return !device_.is_cuda();
#endif
}

void PeakProbe::reset() {
  if (!device_.is_cuda()) {
    MemoryTracker::reset_peak();
    base_ = MemoryTracker::current_bytes();
    return;
  }
#ifdef SB_CUDA_PEAK
  c10::cuda::CUDACachingAllocator::resetPeakStats(device_.index());
  base_ = c10::cuda::CUDACachingAllocator::getDeviceStats(device_.index()).allocated_bytes[kAggregateStat].current;
#endif
}

int64_t PeakProbe::peak() const {
  if (!device_.is_cuda()) return MemoryTracker::peak_bytes();
#ifdef SB_CUDA_PEAK
  return c10::cuda::CUDACachingAllocator::getDeviceStats(device_.index()).allocated_bytes[kAggregateStat].peak;
#else
  return 0;
#endif
}

double gemm_gflops(torch::Device device, torch::Dtype dtype) {
  static std::map<std::string, double> cache;
  const std::string key = fmt::format("{}/{}/{}", device.str(), at::get_num_threads(), c10::toString(dtype));
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  // Half types on a CPU without native kernels can run at a few GFLOP/s: a smaller product keeps this brief.
  const bool slow = device.is_cpu() && (dtype == torch::kBFloat16 || dtype == torch::kFloat16);
  const int64_t n = slow ? 512 : 2048;
  torch::NoGradGuard no_grad;
  const torch::Tensor a = torch::randn({n, n}, torch::TensorOptions().device(device)).to(dtype);
  const torch::Tensor b = torch::randn({n, n}, torch::TensorOptions().device(device)).to(dtype);
  torch::Tensor c = torch::matmul(a, b);
  sync_device(device);
  double best = 1e30;
  for (int i = 0; i < 3; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    c = torch::matmul(a, b);
    sync_device(device);
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  const double rate = 2.0 * static_cast<double>(n * n * n) / best / 1e9;
  cache[key] = rate;
  return rate;
}

double attention_flops(double pairs, int64_t batch, int64_t heads, int64_t head_dim, bool backward) {
  return (backward ? 14.0 : 4.0) * pairs * static_cast<double>(batch * heads * head_dim);
}

}  // namespace sb
