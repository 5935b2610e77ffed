// CUDA kernel tests without LibTorch: the parity table on every registered CUDA backend against the double
// reference (fp32, fp64; fp16/bf16 outputs at half-precision tolerance) through device memory, plus
// determinism. Skips with a reason when there is no CUDA device. Run: ctest -R test_gsa_cuda
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <stdexcept>

#include "kernels/cuda/gsa_cuda.h"
#include "tests/kernels/gsa_cases.h"

namespace sb::test {
namespace {

void cuda_ok(cudaError_t err, const char* what) {
  if (err != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(err));
}

// Device memory for the table runner; get() waits for the kernels queued before it.
class CudaMemory final : public GsaTestMemory {
 public:
  ~CudaMemory() override { clear(); }
  void* put(const void* host, size_t bytes) override {
    void* ptr = nullptr;
    cuda_ok(cudaMalloc(&ptr, std::max<size_t>(bytes, 1)), "cudaMalloc");
    buffers_.push_back(ptr);
    if (host != nullptr) {
      cuda_ok(cudaMemcpy(ptr, host, bytes, cudaMemcpyHostToDevice), "cudaMemcpy to device");
    } else {
      cuda_ok(cudaMemset(ptr, 0xff, bytes), "cudaMemset");
    }
    return ptr;
  }
  void get(void* host, const void* buffer, size_t bytes) override {
    cuda_ok(cudaDeviceSynchronize(), "graph attention kernels");
    cuda_ok(cudaMemcpy(host, buffer, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy to host");
  }
  void clear() override {
    for (void* p : buffers_) cudaFree(p);
    buffers_.clear();
  }

 private:
  std::vector<void*> buffers_;
};

bool have_device() { return gsa_cuda_device_count() > 0; }

class GsaCudaTable : public ::testing::TestWithParam<std::string> {};

TEST_P(GsaCudaTable, EveryBackendMatchesDoubleReference) {
  if (!have_device()) GTEST_SKIP() << "no CUDA device";
  CudaMemory mem;
  for (const std::string& failure : run_backend_table(GetParam(), GsaDevice::cuda, mem)) ADD_FAILURE() << failure;
}

INSTANTIATE_TEST_SUITE_P(AllPatterns, GsaCudaTable, ::testing::ValuesIn(pattern_names()),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

// Every CUDA backend, at a D the lane groups take (64) and one they leave to the warp kernels (59).
TEST(GsaCuda, BitwiseIdenticalAcrossRuns) {
  if (!have_device()) GTEST_SKIP() << "no CUDA device";
  const AttentionPattern& pat = find_pattern(pattern_names().back());
  for (const GsaBackend* cuda : gsa_backends()) {
    if (cuda->device() != GsaDevice::cuda) continue;
    for (int64_t D : {59, 64}) {
      const GsaCase c{pat.name(), small_params(pat), 1025, false, D, 3, 2, true};
      const Graph& g = case_graph(c);
      const RefProblem prob = make_problem(c, g);
      const std::vector<double> d_o = make_d_o(c, g);
      CudaMemory mem;
      const GsaRunOutputs a = run_on_backend(*cuda, g, prob, d_o, GsaDtype::f32, mem);
      const GsaRunOutputs b = run_on_backend(*cuda, g, prob, d_o, GsaDtype::f32, mem);
      SCOPED_TRACE(cuda->name() + " D=" + std::to_string(D));
      EXPECT_EQ(a.o, b.o);
      EXPECT_EQ(a.lse, b.lse);
      EXPECT_EQ(a.dq, b.dq);
      EXPECT_EQ(a.dk, b.dk);
      EXPECT_EQ(a.dv, b.dv);
      EXPECT_EQ(a.d_rel, b.d_rel);
    }
  }
}

// The CUDA backend refuses head dimensions outside its range with the reason, before any launch.
TEST(GsaCuda, RefusesLargeHeadDimensionWithTheReason) {
  const GsaBackend* cuda = gsa_backend_for(GsaDevice::cuda);
  ASSERT_NE(cuda, nullptr) << "a CUDA build registers a CUDA backend";
  GsaParams p;
  p.B = p.N = p.H = 1;
  p.D = kGsaCudaMaxD;
  EXPECT_EQ(cuda->unsupported(p), "");
  p.D = kGsaCudaMaxD + 1;
  const std::string why = "head dimension D = " + std::to_string(p.D) + " (the CUDA kernels take 1 to " +
                          std::to_string(kGsaCudaMaxD) + ")";
  EXPECT_EQ(cuda->unsupported(p), why);
  try {
    cuda->forward(p, nullptr);
    ADD_FAILURE() << "expected sb::Error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "graph_attention: cuda does not support " + why);
  }
}

}  // namespace
}  // namespace sb::test
