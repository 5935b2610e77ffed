// LibTorch op tests: sb::graph_attention (autograd) against the double reference on a slice of the parity
// table (on CPU, and on CUDA where present), input checks by message text, the dense baseline, the CPU memory tracker.
// Run: ctest -R test_gsa_op
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <dlfcn.h>
#include <fmt/format.h>

#include "kernels/torch/graph_attention_op.h"
#include "common/error.h"
#include "tests/kernels/gsa_cases.h"

namespace sb::test {
namespace {

torch::Tensor to_tensor(const std::vector<double>& x, std::vector<int64_t> shape, torch::Dtype dtype) {
  return torch::from_blob(const_cast<double*>(x.data()), shape, torch::kFloat64).to(dtype).clone();
}

std::vector<double> to_vector(const torch::Tensor& t) {
  if (!t.defined()) return {};
  const torch::Tensor c = t.detach().to(torch::kCPU).to(torch::kFloat64).contiguous();
  return std::vector<double>(c.data_ptr<double>(), c.data_ptr<double>() + c.numel());
}

// Runs the op with autograd on `device`: loss = sum(o * d_o); returns "" or the first mismatch.
std::string check_op_case(const GsaCase& c, torch::Dtype dtype, Tolerance tol, torch::Device device = torch::kCPU) {
  const Graph& g = case_graph(c);
  const RefProblem p = make_problem(c, g);
  const std::vector<double> d_o = make_d_o(c, g);
  const RefResult ref = reference_attention(p, DenseMask(g), d_o);
  const std::vector<int64_t> shape = {p.B, p.N, p.H, p.D};
  torch::Tensor q = to_tensor(p.q, shape, dtype).to(device).requires_grad_();
  torch::Tensor k = to_tensor(p.k, shape, dtype).to(device).requires_grad_();
  torch::Tensor v = to_tensor(p.v, shape, dtype).to(device).requires_grad_();
  torch::Tensor rel;
  if (c.rel) rel = to_tensor(p.rel_emb, {p.R, p.D}, dtype).to(device).requires_grad_();
  const TorchGraph tg = TorchGraph::from_graph(g, device);
  const torch::Tensor o = graph_attention(q, k, v, rel, tg);
  (o * to_tensor(d_o, shape, dtype).to(device)).sum().backward();
  return compare_with_reference(ref, to_vector(o), to_vector(q.grad()), to_vector(k.grad()), to_vector(v.grad()),
                                c.rel ? to_vector(rel.grad()) : std::vector<double>{}, tol);
}

// A slice of the table (n <= 97, two shapes) through autograd on `device`, in fp32 and fp64.
void check_op_slice(const std::string& pattern, torch::Device device) {
  const std::string where = device.is_cpu() ? "" : " " + device.str();
  int passed = 0, run = 0;
  for (const GsaCase& c : gsa_case_table(find_pattern(pattern))) {
    const bool slice = c.n <= 97 && ((c.D == 59 && c.H == 3 && c.B == 2) || (c.D == 16 && c.H == 1 && c.B == 1));
    if (!slice) continue;
    const std::string err = check_op_case(c, torch::kFloat32, {1e-5, 1e-4}, device);
    EXPECT_EQ(err, "") << c.id() << " float32" << where;
    const std::string err64 = check_op_case(c, torch::kFloat64, {1e-11, 1e-9}, device);
    EXPECT_EQ(err64, "") << c.id() << " float64" << where;
    passed += err.empty() && err64.empty();
    ++run;
  }
  std::printf("[ table    ] %s op%s: %d/%d cases passed\n", pattern.c_str(), where.c_str(), passed, run);
}

class GsaOpTable : public ::testing::TestWithParam<std::string> {};

TEST_P(GsaOpTable, AutogradMatchesDoubleReference) { check_op_slice(GetParam(), torch::kCPU); }

INSTANTIATE_TEST_SUITE_P(AllPatterns, GsaOpTable, ::testing::ValuesIn(pattern_names()),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

// "" when the op runs on CUDA here (a device, and a build with the CUDA kernels), else the reason to skip.
std::string cuda_op_unavailable() {
  if (!torch::cuda::is_available()) return "no CUDA device";
  const Graph g = build_pattern("window", 4, false, {{"w", 2}});
  const torch::Tensor q = torch::zeros({1, g.n_nodes(), 1, 8}, torch::Device(torch::kCUDA, 0));
  try {
    graph_attention(q, q, q, {}, TorchGraph::from_graph(g, q.device()));
  } catch (const Error& e) {
    return e.what();  // "... this build has no CUDA kernels"
  }
  return "";
}

// The same slice through the CUDA dispatch of the op (autograd, graph tensors on the GPU), fp32 and fp64.
class GsaOpCudaTable : public ::testing::TestWithParam<std::string> {};

TEST_P(GsaOpCudaTable, AutogradMatchesDoubleReference) {
  static const std::string unavailable = cuda_op_unavailable();
  if (!unavailable.empty()) GTEST_SKIP() << unavailable;
  check_op_slice(GetParam(), torch::Device(torch::kCUDA, 0));
}

INSTANTIATE_TEST_SUITE_P(AllPatterns, GsaOpCudaTable, ::testing::ValuesIn(pattern_names()),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

// Half types on CUDA through the op: outputs and gradients against the fp32 op on the same rounded inputs.
TEST(GsaOpCuda, HalfTypesMatchFloat32) {
  static const std::string unavailable = cuda_op_unavailable();
  if (!unavailable.empty()) GTEST_SKIP() << unavailable;
  const Graph g = build_pattern("bpt", 300, true, {{"k", 4}});
  const TorchGraph tg = TorchGraph::from_graph(g, torch::Device(torch::kCUDA, 0));
  const auto opts = torch::TensorOptions().device(torch::kCUDA, 0);
  for (const auto& [dtype, tol] : {std::pair{torch::kFloat16, 1e-2}, std::pair{torch::kBFloat16, 5e-2}}) {
    std::vector<torch::Tensor> x, x32;  // q, k, v, rel_emb
    for (int64_t i = 0; i < 4; ++i) {
      const auto shape = i < 3 ? std::vector<int64_t>{2, g.n_nodes(), 3, 32} : std::vector<int64_t>{tg.n_relations, 32};
      x.push_back(torch::randn(shape, opts).to(dtype).requires_grad_());
      x32.push_back(x.back().detach().to(torch::kFloat32).requires_grad_());
    }
    const torch::Tensor o = graph_attention(x[0], x[1], x[2], x[3], tg);
    const torch::Tensor o32 = graph_attention(x32[0], x32[1], x32[2], x32[3], tg);
    ASSERT_EQ(o.scalar_type(), dtype);
    const torch::Tensor d_o = torch::randn_like(o32);
    (o.to(torch::kFloat32) * d_o).sum().backward();
    (o32 * d_o).sum().backward();
    const auto rel_err = [](const torch::Tensor& a, const torch::Tensor& b) {
      return ((a.to(torch::kFloat32) - b).abs().max() / b.abs().max().clamp_min(1e-2)).item<double>();
    };
    EXPECT_LT(rel_err(o, o32), tol) << dtype;
    for (int i = 0; i < 4; ++i) EXPECT_LT(rel_err(x[i].grad(), x32[i].grad()), 2 * tol) << dtype << " grad " << i;
  }
}

// Expects sb::Error with exactly `message` from f().
template <typename F>
void expect_error(F f, const std::string& message) {
  try {
    f();
    ADD_FAILURE() << "expected sb::Error: " << message;
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), message);
  }
}

class GsaOpErrors : public ::testing::Test {
 protected:
  Graph graph = build_pattern("window", 5, false, {{"w", 3}});
  TorchGraph tg = TorchGraph::from_graph(graph);
  torch::Tensor q = torch::randn({2, 5, 3, 4});
  torch::Tensor rel = torch::randn({graph.n_relations(), 4});
};

TEST_F(GsaOpErrors, ShapeMessagesNameTheTensor) {
  expect_error([&] { graph_attention(torch::randn({2, 5, 3}), q, q, {}, tg); },
               "q must have shape (B, N, H, D) with N = 5 graph nodes, got (2, 5, 3)");
  expect_error([&] { graph_attention(q, torch::randn({2, 5, 3, 5}), q, {}, tg); },
               "k must have shape (2, 5, 3, 4) like q, got (2, 5, 3, 5)");
  expect_error([&] { graph_attention(q, q, torch::randn({1, 5, 3, 4}), {}, tg); },
               "v must have shape (2, 5, 3, 4) like q, got (1, 5, 3, 4)");
  expect_error([&] { graph_attention(q, q, q, torch::randn({3, 4}), tg); },
               "rel_emb must have shape (R, D) = (65, 4) for a graph with 65 relations, got (3, 4)");
}

TEST_F(GsaOpErrors, GraphForAnotherLength) {
  const TorchGraph other = TorchGraph::from_graph(build_pattern("window", 7, false, {{"w", 3}}));
  expect_error([&] { graph_attention(q, q, q, {}, other); },
               "q must have shape (B, N, H, D) with N = 7 graph nodes, got (2, 5, 3, 4)");
}

TEST_F(GsaOpErrors, DtypeMessages) {
  const torch::Tensor qi = torch::ones({2, 5, 3, 4}, torch::kInt32);
  expect_error([&] { graph_attention(qi, qi, qi, {}, tg); }, "q must have dtype float32 or float64, got int32");
  expect_error([&] { graph_attention(q, q.to(torch::kFloat64), q, {}, tg); },
               "k must have dtype float32 like q, got float64");
  expect_error([&] { graph_attention(q.to(torch::kFloat16), q.to(torch::kFloat16), q.to(torch::kFloat16), {}, tg); },
               "q must have dtype float32 or float64, got float16");
  expect_error([&] { graph_attention(q, q, q, rel.to(torch::kFloat64), tg); },
               "rel_emb must have dtype float32 like q, got float64");
}

TEST_F(GsaOpErrors, DeviceMessages) {
  const torch::Tensor qm = q.to(torch::kMeta);
  expect_error([&] { graph_attention(q, qm, q, {}, tg); }, "k must be on cpu like q, got meta");
  expect_error([&] { graph_attention(q, q, q, rel.to(torch::kMeta), tg); }, "rel_emb must be on cpu like q, got meta");
  const TorchGraph meta_graph = TorchGraph::from_graph(graph, torch::kMeta);
  expect_error([&] { graph_attention(q, q, q, {}, meta_graph); },
               "graph is on meta but q is on cpu; build it with TorchGraph::from_graph(g, q.device())");
  expect_error([&] { graph_attention(qm, qm, qm, {}, meta_graph); },
               "graph_attention: q is on meta; only CPU and CUDA are supported");
}

// The op over graph tensors given one by one (what the TORCH_LIBRARY op does) checks them too.
TEST_F(GsaOpErrors, GraphTensorsChecked) {
  expect_error(
      [&] { TorchGraph::from_tensors(tg.row_ptr, tg.col, tg.rel.to(torch::kInt64), tg.t_row_ptr, tg.t_col, tg.t_edge); },
      fmt::format("graph: rel must be a 1-d int32 tensor of {} entries, got int64 ({})", graph.n_edges(),
                  graph.n_edges()));
  const torch::Tensor bad_col = tg.col.clone();
  bad_col[0] = 99;
  expect_error([&] { TorchGraph::from_tensors(tg.row_ptr, bad_col, tg.rel, tg.t_row_ptr, tg.t_col, tg.t_edge); },
               "graph: col[0] = 99 outside [0, 5)");
}

// from_tensors reproduces from_graph's results.
TEST(GsaOp, FromTensorsMatchesFromGraph) {
  const Graph g = build_pattern(pattern_names().back(), 40, false);
  const TorchGraph a = TorchGraph::from_graph(g);
  const TorchGraph b = TorchGraph::from_tensors(a.row_ptr, a.col, a.rel, a.t_row_ptr, a.t_col, a.t_edge,
                                                a.n_relations);
  const torch::Tensor q = torch::randn({1, g.n_nodes(), 2, 8});
  const torch::Tensor rel = torch::randn({a.n_relations, 8});
  EXPECT_TRUE(torch::equal(graph_attention(q, q * 0.5, q * 2, rel, a), graph_attention(q, q * 0.5, q * 2, rel, b)));
}

// dense_attention equals the reference on the dense pattern (whose token graph is all pairs).
TEST(GsaOp, DenseBaselineMatchesReference) {
  for (bool causal : {false, true}) {
    const GsaCase c{"dense", {}, 33, causal, 16, 2, 2, false};
    const Graph g = build_pattern("dense", c.n, causal);
    const RefProblem p = make_problem(c, g);
    const RefResult ref = reference_attention(p, DenseMask(g), {});
    const std::vector<int64_t> shape = {p.B, p.N, p.H, p.D};
    const torch::Tensor o = dense_attention(to_tensor(p.q, shape, torch::kFloat64), to_tensor(p.k, shape, torch::kFloat64),
                                            to_tensor(p.v, shape, torch::kFloat64), causal);
    EXPECT_LT(max_abs_diff(to_vector(o), ref.o), 1e-12) << "causal=" << causal;
  }
}

// The TORCH_LIBRARY registration in libsparsebench_ops.so, called through the dispatcher as Python would.
TEST(GsaOp, TorchLibraryOpMatchesDirectCall) {
  void* lib = dlopen(SB_OPS_LIBRARY, RTLD_NOW | RTLD_GLOBAL);
  ASSERT_NE(lib, nullptr) << dlerror();
  const auto op = c10::Dispatcher::singleton()
                      .findSchemaOrThrow("sparsebench::graph_attention", "")
                      .typed<torch::Tensor(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&,
                                           const c10::optional<torch::Tensor>&, const torch::Tensor&,
                                           const torch::Tensor&, const torch::Tensor&, const torch::Tensor&,
                                           const torch::Tensor&, const torch::Tensor&)>();
  const Graph g = build_pattern("window", 19, true, {{"w", 4}});
  const TorchGraph tg = TorchGraph::from_graph(g);
  const torch::Tensor q = torch::randn({2, 19, 2, 8}, torch::kFloat64).requires_grad_();
  const torch::Tensor rel = torch::randn({tg.n_relations, 8}, torch::kFloat64).requires_grad_();
  const torch::Tensor o = op.call(q, q * 0.5, q * 2, rel, tg.row_ptr, tg.col, tg.rel, tg.t_row_ptr, tg.t_col, tg.t_edge);
  const torch::Tensor expect = graph_attention(q, q * 0.5, q * 2, rel, tg);
  EXPECT_TRUE(torch::equal(o, expect));
  const auto grads = torch::autograd::grad({o.sum()}, {q, rel});
  const auto expect_grads = torch::autograd::grad({expect.sum()}, {q, rel});
  EXPECT_TRUE(torch::equal(grads[0], expect_grads[0]));
  EXPECT_TRUE(torch::equal(grads[1], expect_grads[1]));
}

}  // namespace
}  // namespace sb::test
