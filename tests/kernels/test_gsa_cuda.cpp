// CUDA kernel tests through the plain launchers (no LibTorch): the parity table against the double
// reference in fp32/fp64 (and fp16/bf16 outputs at half-precision tolerance), plus determinism.
// Skips with a reason when there is no CUDA device. Run: ctest -R test_gsa_cuda
#include <gtest/gtest.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstring>

#include "kernels/cuda/gsa_cuda.h"
#include "kernels/gsa_host_graph.h"
#include "tests/kernels/gsa_cases.h"

namespace sb::test {
namespace {

void cuda_ok(cudaError_t err, const char* what) {
  if (err != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(err));
}

// A device copy of a host vector, freed on scope exit.
struct DeviceBuffer {
  void* ptr = nullptr;
  size_t bytes = 0;
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t n) : bytes(n) {
    if (n > 0) cuda_ok(cudaMalloc(&ptr, n), "cudaMalloc");
  }
  template <typename T>
  explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size() * sizeof(T)) {
    if (bytes > 0) cuda_ok(cudaMemcpy(ptr, host.data(), bytes, cudaMemcpyHostToDevice), "cudaMemcpy to device");
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() {
    if (ptr) cudaFree(ptr);
  }
  template <typename T>
  std::vector<T> download() const {
    std::vector<T> host(bytes / sizeof(T));
    if (bytes > 0) cuda_ok(cudaMemcpy(host.data(), ptr, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy to host");
    return host;
  }
};

template <typename T> T from_double(double x) { return static_cast<T>(x); }
template <> __half from_double<__half>(double x) { return __float2half(static_cast<float>(x)); }
template <> __nv_bfloat16 from_double<__nv_bfloat16>(double x) { return __float2bfloat16(static_cast<float>(x)); }
template <typename T> double to_double(T x) { return static_cast<double>(x); }
template <> double to_double<__half>(__half x) { return __half2float(x); }
template <> double to_double<__nv_bfloat16>(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T> std::vector<T> to_device_type(const std::vector<double>& x) {
  std::vector<T> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = from_double<T>(x[i]);
  return y;
}
template <typename T> std::vector<double> from_device_type(const std::vector<T>& x) {
  std::vector<double> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = to_double(x[i]);
  return y;
}

template <typename T> GsaDtype dtype_of();
template <> GsaDtype dtype_of<float>() { return GsaDtype::f32; }
template <> GsaDtype dtype_of<double>() { return GsaDtype::f64; }
template <> GsaDtype dtype_of<__half>() { return GsaDtype::f16; }
template <> GsaDtype dtype_of<__nv_bfloat16>() { return GsaDtype::bf16; }

struct CudaRun {
  std::vector<double> o, dq, dk, dv, d_rel;
};

// Forward and backward of one case on the device, in element type T.
template <typename T>
CudaRun run_cuda(const Graph& g, const RefProblem& prob, const std::vector<double>& d_o_host) {
  using A = std::conditional_t<std::is_same_v<T, double>, double, float>;
  const GsaHostGraph hg(g);
  // relation grouping (edges of each relation in ascending order) for the d_rel_emb pass
  std::vector<int64_t> rel_ptr(static_cast<size_t>(std::max<int64_t>(prob.R, g.n_relations()) + 1), 0);
  for (int32_t r : hg.rel) rel_ptr[r + 1]++;
  for (size_t r = 1; r < rel_ptr.size(); ++r) rel_ptr[r] += rel_ptr[r - 1];
  std::vector<int32_t> rel_edge(hg.col.size()), rel_dst(hg.col.size());
  std::vector<int64_t> cursor(rel_ptr.begin(), rel_ptr.end() - 1);
  for (int64_t u = 0; u < g.n_nodes(); ++u) {
    for (int64_t e = hg.row_ptr[u]; e < hg.row_ptr[u + 1]; ++e) {
      const int64_t slot = cursor[hg.rel[e]]++;
      rel_edge[slot] = static_cast<int32_t>(e);
      rel_dst[slot] = static_cast<int32_t>(u);
    }
  }
  DeviceBuffer row_ptr(hg.row_ptr), col(hg.col), rel(hg.rel), t_row_ptr(hg.t_row_ptr), t_col(hg.t_col),
      t_edge(hg.t_edge), d_rel_ptr(rel_ptr), d_rel_edge(rel_edge), d_rel_dst(rel_dst);
  DeviceBuffer q(to_device_type<T>(prob.q)), k(to_device_type<T>(prob.k)), v(to_device_type<T>(prob.v));
  DeviceBuffer rel_emb(to_device_type<T>(prob.rel_emb)), d_o(to_device_type<T>(d_o_host));
  const size_t size = prob.q.size() * sizeof(T);
  DeviceBuffer o(size), dq(size), dk(size), dv(size), d_rel(prob.rel_emb.size() * sizeof(T));
  DeviceBuffer lse(static_cast<size_t>(prob.B * prob.N * prob.H) * sizeof(A));
  DeviceBuffer delta(static_cast<size_t>(prob.B * prob.N * prob.H) * sizeof(A));
  GsaParams p;
  p.graph = {static_cast<const int64_t*>(row_ptr.ptr), static_cast<const int32_t*>(col.ptr),
             static_cast<const int32_t*>(rel.ptr), static_cast<const int64_t*>(t_row_ptr.ptr),
             static_cast<const int32_t*>(t_col.ptr), static_cast<const int32_t*>(t_edge.ptr),
             static_cast<const int64_t*>(d_rel_ptr.ptr), static_cast<const int32_t*>(d_rel_edge.ptr),
             static_cast<const int32_t*>(d_rel_dst.ptr), g.n_nodes(), g.n_edges()};
  p.dtype = dtype_of<T>();
  p.B = prob.B;
  p.N = prob.N;
  p.H = prob.H;
  p.D = prob.D;
  p.scale = 1.0 / std::sqrt(static_cast<double>(prob.D));
  const GsaStrides st{prob.N * prob.H * prob.D, prob.H * prob.D, prob.D};
  p.q = q.ptr;
  p.k = k.ptr;
  p.v = v.ptr;
  p.o = o.ptr;
  p.q_strides = p.k_strides = p.v_strides = p.o_strides = p.d_o_strides = st;
  p.dq_strides = p.dk_strides = p.dv_strides = st;
  if (!prob.rel_emb.empty()) {
    p.R = prob.R;
    p.rel_emb = rel_emb.ptr;
    p.rel_stride = prob.D;
    p.d_rel_emb = d_rel.ptr;
  }
  DeviceBuffer edge_ds(static_cast<size_t>(gsa_cuda_edge_ds_elems(p)) * sizeof(float));  // sized from p's shapes
  if (p.rel_emb != nullptr) p.edge_ds = static_cast<float*>(edge_ds.ptr);
  p.lse = lse.ptr;
  p.d_o = d_o.ptr;
  p.dq = dq.ptr;
  p.dk = dk.ptr;
  p.dv = dv.ptr;
  p.delta = delta.ptr;
  gsa_forward_cuda(p, nullptr);
  gsa_backward_cuda(p, nullptr);
  cuda_ok(cudaDeviceSynchronize(), "graph attention kernels");
  return {from_device_type(o.download<T>()), from_device_type(dq.download<T>()), from_device_type(dk.download<T>()),
          from_device_type(dv.download<T>()), from_device_type(d_rel.download<T>())};
}

bool have_device() { return gsa_cuda_device_count() > 0; }

template <typename T>
void run_table(const std::string& pattern, Tolerance tol, bool outputs_only, const char* label) {
  int passed = 0, run = 0;
  for (const GsaCase& c : gsa_case_table(find_pattern(pattern))) {
    const Graph& g = case_graph(c);
    const RefProblem prob = make_problem(c, g);
    const std::vector<double> d_o = make_d_o(c, g);
    const RefResult ref = reference_attention(prob, DenseMask(g), d_o);
    const CudaRun r = run_cuda<T>(g, prob, d_o);
    const std::string err = outputs_only ? (max_abs_diff(r.o, ref.o) <= tol.out_tol * std::max(1.0, max_abs(ref.o))
                                                ? ""
                                                : "o differs")
                                         : compare_with_reference(ref, r.o, r.dq, r.dk, r.dv, r.d_rel, tol);
    EXPECT_EQ(err, "") << c.id() << " " << label;
    passed += err.empty();
    ++run;
  }
  std::printf("[ table    ] %s cuda %s: %d/%d cases passed\n", pattern.c_str(), label, passed, run);
}

class GsaCudaTable : public ::testing::TestWithParam<std::string> {};

TEST_P(GsaCudaTable, Fp32MatchesDoubleReference) {
  if (!have_device()) GTEST_SKIP() << "no CUDA device";
  run_table<float>(GetParam(), {1e-5, 1e-4}, false, "fp32");
}

TEST_P(GsaCudaTable, Fp64MatchesDoubleReference) {
  if (!have_device()) GTEST_SKIP() << "no CUDA device";
  run_table<double>(GetParam(), {1e-11, 1e-9}, false, "fp64");
}

// Half types: inputs are rounded to 8 (bf16) or 11 (fp16) bits, so only the outputs are compared, at
// a tolerance of that order (accumulation is fp32).
TEST_P(GsaCudaTable, HalfTypesMatchDoubleReference) {
  if (!have_device()) GTEST_SKIP() << "no CUDA device";
  run_table<__half>(GetParam(), {1e-2, 0}, true, "fp16");
  run_table<__nv_bfloat16>(GetParam(), {5e-2, 0}, true, "bf16");
}

INSTANTIATE_TEST_SUITE_P(AllPatterns, GsaCudaTable, ::testing::ValuesIn(pattern_names()),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

TEST(GsaCuda, BitwiseIdenticalAcrossRuns) {
  if (!have_device()) GTEST_SKIP() << "no CUDA device";
  const AttentionPattern& pat = find_pattern(pattern_names().back());
  const GsaCase c{pat.name(), small_params(pat), 1025, false, 59, 3, 2, true};
  const Graph& g = case_graph(c);
  const RefProblem prob = make_problem(c, g);
  const std::vector<double> d_o = make_d_o(c, g);
  const CudaRun a = run_cuda<float>(g, prob, d_o);
  const CudaRun b = run_cuda<float>(g, prob, d_o);
  EXPECT_EQ(a.o, b.o);
  EXPECT_EQ(a.dq, b.dq);
  EXPECT_EQ(a.dk, b.dk);
  EXPECT_EQ(a.dv, b.dv);
  EXPECT_EQ(a.d_rel, b.d_rel);
}

}  // namespace
}  // namespace sb::test
