// LibTorch op tests: sb::graph_attention (autograd) against the double reference on a slice of the parity
// table on every registered backend (CPU, and CUDA where present), input checks by message text, the op
// through the dispatcher, no host preparation per call, the dense baseline, the CPU memory tracker.
// Run: ctest -R test_gsa_op
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <fmt/format.h>
#include <fmt/ranges.h>  // fmt::join (in format.h before fmt 11)
#include <omp.h>

#include "kernels/gsa_backend.h"
#include "kernels/gsa_host_graph.h"
#include "kernels/torch/graph_attention_op.h"
#include "common/error.h"
#include "tests/kernels/expect_error.h"
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

torch::Dtype torch_dtype(GsaDtype t) {
  switch (t) {
    case GsaDtype::f64: return torch::kFloat64;
    case GsaDtype::f16: return torch::kFloat16;
    case GsaDtype::bf16: return torch::kBFloat16;
    case GsaDtype::f32: break;
  }
  return torch::kFloat32;
}

// Runs the op with autograd on `device`: loss = sum(o * d_o); returns "" or the first mismatch.
std::string check_op_case(const GsaCase& c, const GsaDtypeRows& rows, torch::Device device) {
  const Graph& g = case_graph(c);
  const RefProblem p = make_problem(c, g);
  const std::vector<double> d_o = make_d_o(c, g);
  const RefResult ref = reference_attention(p, DenseMask(g), d_o);
  const std::vector<int64_t> shape = {p.B, p.N, p.H, p.D};
  const torch::Dtype dtype = torch_dtype(rows.dtype);
  torch::Tensor q = to_tensor(p.q, shape, dtype).to(device).requires_grad_();
  torch::Tensor k = to_tensor(p.k, shape, dtype).to(device).requires_grad_();
  torch::Tensor v = to_tensor(p.v, shape, dtype).to(device).requires_grad_();
  torch::Tensor rel;
  if (c.rel) rel = to_tensor(p.rel_emb, {p.R, p.D}, dtype).to(device).requires_grad_();
  const TorchGraph tg = TorchGraph::from_graph(g, device);
  const torch::Tensor o = graph_attention(q, k, v, rel, tg);
  if (rows.outputs_only) {
    const double err = max_abs_diff(to_vector(o), ref.o), bound = rows.tol.out_tol * std::max(1.0, max_abs(ref.o));
    return err <= bound ? "" : fmt::format("o: max error {:.3g} > {:.3g}", err, bound);
  }
  (o * to_tensor(d_o, shape, dtype).to(device)).sum().backward();
  return compare_with_reference(ref, to_vector(o), to_vector(q.grad()), to_vector(k.grad()), to_vector(v.grad()),
                                c.rel ? to_vector(rel.grad()) : std::vector<double>{}, rows.tol);
}

// A slice of the table (n <= 97, two shapes) through autograd on `device`, on every registered backend of
// that device in every dtype (half types the backend lacks run staged through its float32 kernels). A row the
// op does not support must be refused with the backend's reason; it is counted and printed as not supported.
void check_op_slice(const std::string& pattern, torch::Device device) {
  const GsaDevice gsa_device = device.is_cuda() ? GsaDevice::cuda : GsaDevice::cpu;
  int backends = 0;
  for (const GsaBackend* backend : gsa_backends()) {
    if (backend->device() != gsa_device) continue;
    ++backends;
    const GsaBackendScope scope(*backend);
    for (const GsaDtypeRows& rows : gsa_dtype_rows()) {
      int passed = 0, run = 0;
      bool staged = false;
      std::map<std::string, int> unsupported;
      for (const GsaCase& c : gsa_case_table(find_pattern(pattern))) {
        const bool slice = c.n <= 97 && ((c.D == 59 && c.H == 3 && c.B == 2) || (c.D == 16 && c.H == 1 && c.B == 1));
        if (!slice) continue;
        const std::string where = fmt::format("{} {} {}", c.id(), backend->name(), gsa_dtype_name(rows.dtype));
        GsaParams shape;
        shape.dtype = rows.dtype;
        shape.B = c.B;
        shape.N = case_graph(c).n_nodes();
        shape.H = c.H;
        shape.D = c.D;
        shape.R = c.rel ? case_graph(c).n_relations() : 0;
        const std::string why = backend->unsupported(shape);
        // A half type the backend lacks but whose float32 it runs is staged by the op (graph_attention_op.cpp).
        GsaParams as_f32 = shape;
        as_f32.dtype = GsaDtype::f32;
        const bool half = rows.dtype == GsaDtype::f16 || rows.dtype == GsaDtype::bf16;
        staged = half && !why.empty() && backend->unsupported(as_f32).empty();
        if (!why.empty() && !staged) {
          unsupported[why]++;
          const torch::Tensor q = torch::zeros({c.B, case_graph(c).n_nodes(), c.H, c.D},
                                               torch::TensorOptions().dtype(torch_dtype(rows.dtype)).device(device));
          expect_error([&] { graph_attention(q, q, q, {}, TorchGraph::from_graph(case_graph(c), device)); },
                       "graph_attention: " + backend->name() + " does not support " + why);
          continue;
        }
        const std::string err = check_op_case(c, rows, device);
        EXPECT_EQ(err, "") << where;
        passed += err.empty();
        ++run;
      }
      std::vector<std::string> reasons;
      int n_unsupported = 0;
      for (const auto& [why, n] : unsupported) {
        reasons.push_back(fmt::format("{} x {}", n, why));
        n_unsupported += n;
      }
      std::printf("[ table    ] %s op %s %s%s: %d/%d passed, %d not supported%s\n", pattern.c_str(),
                  backend->name().c_str(), gsa_dtype_name(rows.dtype), staged ? " (staged to float32)" : "", passed,
                  run, n_unsupported,
                  reasons.empty() ? "" : fmt::format(" ({})", fmt::join(reasons, "; ")).c_str());
    }
  }
  EXPECT_GT(backends, 0) << "no " << device.str() << " backend is registered";
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

// The same slice through the CUDA registration of the op (autograd, graph tensors on the GPU).
class GsaOpCudaTable : public ::testing::TestWithParam<std::string> {};

TEST_P(GsaOpCudaTable, AutogradMatchesDoubleReference) {
  static const std::string unavailable = cuda_op_unavailable();
  if (!unavailable.empty()) GTEST_SKIP() << unavailable;
  check_op_slice(GetParam(), torch::Device(torch::kCUDA, 0));
}

INSTANTIATE_TEST_SUITE_P(AllPatterns, GsaOpCudaTable, ::testing::ValuesIn(pattern_names()),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

// Half types through the op: outputs and gradients against the fp32 op on the same rounded inputs (the CPU
// stages them through its float32 kernels, CUDA runs half kernels that accumulate in float32).
void check_half_types(torch::Device device) {
  const Graph g = build_pattern("bpt", 300, true, {{"k", 4}});
  const TorchGraph tg = TorchGraph::from_graph(g, device);
  const auto opts = torch::TensorOptions().device(device);
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
    if (device.is_cpu()) {
      // Staged: the float32 kernels' output rounded once, so bit for bit the float32 op's rounded output.
      EXPECT_TRUE(torch::equal(o, o32.detach().to(dtype))) << dtype;
    }
    const torch::Tensor d_o = torch::randn_like(o32);
    (o.to(torch::kFloat32) * d_o).sum().backward();
    (o32 * d_o).sum().backward();
    const auto rel_err = [](const torch::Tensor& a, const torch::Tensor& b) {
      return ((a.to(torch::kFloat32) - b).abs().max() / b.abs().max().clamp_min(1e-2)).item<double>();
    };
    EXPECT_LT(rel_err(o, o32), tol) << dtype;
    for (int i = 0; i < 4; ++i) {
      ASSERT_EQ(x[i].grad().scalar_type(), dtype) << "grad " << i;
      EXPECT_LT(rel_err(x[i].grad(), x32[i].grad()), 2 * tol) << dtype << " grad " << i;
    }
  }
}

TEST(GsaOp, HalfTypesMatchFloat32OnCpu) {
  check_half_types(torch::kCPU);
  EXPECT_EQ(graph_attention_backend(torch::kCPU, torch::kBFloat16),
            graph_attention_backend(torch::kCPU) + " (bfloat16 staged to float32)");
  EXPECT_EQ(graph_attention_backend(torch::kCPU, torch::kFloat64), graph_attention_backend(torch::kCPU));
}

TEST(GsaOpCuda, HalfTypesMatchFloat32) {
  static const std::string unavailable = cuda_op_unavailable();
  if (!unavailable.empty()) GTEST_SKIP() << unavailable;
  check_half_types(torch::Device(torch::kCUDA, 0));
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
  expect_error([&] { graph_attention(qi, qi, qi, {}, tg); },
               "q must have dtype float32, float64, float16 or bfloat16, got int32");
  expect_error([&] { graph_attention(q, q.to(torch::kFloat64), q, {}, tg); },
               "k must have dtype float32 like q, got float64");
  const torch::Tensor qh = q.to(torch::kFloat16);
  expect_error([&] { graph_attention(qh, qh.to(torch::kBFloat16), qh, {}, tg); },
               "k must have dtype float16 like q, got bfloat16");
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

// The graph tensors handed to prepare_graph are checked (the host preparation names the bad entry).
TEST_F(GsaOpErrors, GraphTensorsChecked) {
  expect_error([&] { TorchGraph::from_tensors(tg.row_ptr, tg.col, tg.rel.to(torch::kInt64)); },
               fmt::format("graph: rel must be a 1-d int32 tensor of {} entries, got int64 ({})", graph.n_edges(),
                           graph.n_edges()));
  const torch::Tensor bad_col = tg.col.clone();
  bad_col[0] = 99;
  expect_error([&] { TorchGraph::from_tensors(tg.row_ptr, bad_col, tg.rel); }, "graph: col[0] = 99 outside [0, 5)");
  expect_error([&] { TorchGraph::from_tensors(tg.row_ptr, tg.col, tg.rel.to(torch::kMeta)); },
               "graph: row_ptr, col and rel must be on one device");
}

// from_tensors (the CSR alone: transpose and relation grouping rebuilt) reproduces from_graph's results.
TEST(GsaOp, FromTensorsMatchesFromGraph) {
  const Graph g = build_pattern(pattern_names().back(), 40, false);
  const TorchGraph a = TorchGraph::from_graph(g);
  const TorchGraph b = TorchGraph::from_tensors(a.row_ptr, a.col, a.rel, a.n_relations);
  for (const auto& [x, y] : {std::pair{a.t_row_ptr, b.t_row_ptr}, {a.t_col, b.t_col}, {a.t_edge, b.t_edge},
                             {a.rel_ptr, b.rel_ptr}, {a.rel_edge, b.rel_edge}, {a.rel_dst, b.rel_dst},
                             {a.row_blocks, b.row_blocks}, {a.src_blocks, b.src_blocks}}) {
    EXPECT_TRUE(torch::equal(x, y));
  }
  // The CPU block orders travel with the prepared graph.
  const std::vector<int32_t> order = gsa_block_order(g.row_ptr.data(), g.col.data(), g.n_nodes());
  ASSERT_EQ(a.row_blocks.numel(), static_cast<int64_t>(order.size()));
  for (size_t i = 0; i < order.size(); ++i) EXPECT_EQ(a.row_blocks[static_cast<int64_t>(i)].item<int32_t>(), order[i]);
  const torch::Tensor q = torch::randn({1, g.n_nodes(), 2, 8});
  const torch::Tensor rel = torch::randn({a.n_relations, 8});
  EXPECT_TRUE(torch::equal(graph_attention(q, q * 0.5, q * 2, rel, a), graph_attention(q, q * 0.5, q * 2, rel, b)));
}

// The op called 1,000 times (forward and backward) on one prepared graph prepares it exactly once: no call
// copies, validates or regroups the graph on the host. Both entry points: the C++ function and the
// dispatcher op with a graph from prepare_graph (what Python calls).
TEST(GsaOp, ThousandCallsOnOnePreparedGraphPrepareItOnce) {
  const Graph g = build_pattern("window", 24, true, {{"w", 4}});
  const int saved_threads = omp_get_max_threads();
  omp_set_num_threads(1);  // tiny calls: a second thread adds only synchronisation
  const int64_t start = GsaHostGraph::preparations();
  const TorchGraph tg = TorchGraph::from_graph(g);
  EXPECT_EQ(GsaHostGraph::preparations(), start + 1);
  const torch::Tensor q = torch::randn({1, g.n_nodes(), 2, 8}).requires_grad_();
  const torch::Tensor rel = torch::randn({tg.n_relations, 8}).requires_grad_();
  for (int i = 0; i < 1000; ++i) graph_attention(q, q, q, rel, tg).sum().backward();
  EXPECT_EQ(GsaHostGraph::preparations(), start + 1);

  const auto prepare = c10::Dispatcher::singleton()
                           .findSchemaOrThrow("sparsebench::prepare_graph", "")
                           .typed<c10::intrusive_ptr<TorchGraph>(const torch::Tensor&, const torch::Tensor&,
                                                                 const torch::Tensor&, int64_t)>();
  const auto op = c10::Dispatcher::singleton()
                      .findSchemaOrThrow("sparsebench::graph_attention", "")
                      .typed<torch::Tensor(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&,
                                           const c10::optional<torch::Tensor>&, const c10::intrusive_ptr<TorchGraph>&)>();
  const auto handle = prepare.call(tg.row_ptr, tg.col, tg.rel, tg.n_relations);
  EXPECT_EQ(GsaHostGraph::preparations(), start + 2);
  for (int i = 0; i < 1000; ++i) op.call(q, q, q, rel, handle).sum().backward();
  EXPECT_EQ(GsaHostGraph::preparations(), start + 2);
  const auto count = c10::Dispatcher::singleton().findSchemaOrThrow("sparsebench::graph_preparations", "").typed<int64_t()>();
  EXPECT_EQ(count.call(), start + 2);
  omp_set_num_threads(saved_threads);
}

// graph_attention_backend names the CPU backend the registry serves (the active CPU target).
TEST(GsaOp, NamesItsBackend) {
  EXPECT_EQ(graph_attention_backend(torch::kCPU), gsa_backend_for(GsaDevice::cpu)->name());
  expect_error([] { graph_attention_backend(torch::kMeta); },
               "graph_attention: q is on meta; only CPU and CUDA are supported");
}

// Both dense baselines (dense_attention: SDPA on LibTorch >= 2; dense_naive_attention: materialised) equal the
// reference on the dense pattern (whose token graph is all pairs), outputs and gradients, and name their kernel.
TEST(GsaOp, DenseBaselinesMatchReference) {
  for (bool naive : {false, true}) {
    for (bool causal : {false, true}) {
      const GsaCase c{"dense", {}, 33, causal, 16, 2, 2, false};
      const Graph g = build_pattern("dense", c.n, causal);
      const RefProblem p = make_problem(c, g);
      const std::vector<double> d_o = make_d_o(c, g);
      const RefResult ref = reference_attention(p, DenseMask(g), d_o);
      const std::vector<int64_t> shape = {p.B, p.N, p.H, p.D};
      const torch::Tensor q = to_tensor(p.q, shape, torch::kFloat64).requires_grad_(),
                          k = to_tensor(p.k, shape, torch::kFloat64).requires_grad_(),
                          v = to_tensor(p.v, shape, torch::kFloat64).requires_grad_();
      const torch::Tensor o = naive ? dense_naive_attention(q, k, v, causal) : dense_attention(q, k, v, causal);
      const std::string what = fmt::format("naive={} causal={}", naive, causal);
      EXPECT_LT(max_abs_diff(to_vector(o), ref.o), 1e-12) << what;
      const auto grads = torch::autograd::grad({o}, {q, k, v}, {to_tensor(d_o, shape, torch::kFloat64)});
      EXPECT_LT(max_abs_diff(to_vector(grads[0]), ref.dq), 1e-12) << what;
      EXPECT_LT(max_abs_diff(to_vector(grads[1]), ref.dk), 1e-12) << what;
      EXPECT_LT(max_abs_diff(to_vector(grads[2]), ref.dv), 1e-12) << what;
      const std::string backend = dense_attention_backend(q, k, v, causal, naive);
#if TORCH_VERSION_MAJOR >= 2
      if (naive) EXPECT_EQ(backend, "materialised");
      else EXPECT_EQ(backend.rfind("sdpa:", 0), 0u) << backend;
#else
      EXPECT_EQ(backend, "materialised") << "LibTorch 1.13 has no fused dense kernel";
#endif
    }
  }
  expect_error([] { dense_attention(torch::zeros({2, 3, 4}), torch::zeros({2, 3, 4}), torch::zeros({2, 3, 4}), true); },
               "q must have shape (B, T, H, D), got (2, 3, 4)");
  expect_error([] { dense_naive_attention(torch::zeros({1, 3, 2, 4}), torch::zeros({1, 2, 2, 4}),
                                          torch::zeros({1, 3, 2, 4}), true); },
               "k must have shape (1, 3, 2, 4) like q, got (1, 2, 2, 4)");
}

// The op as Python calls it: prepare_graph, then sparsebench::graph_attention through the dispatcher
// (boxed, as from Python or TorchScript), equal to the C++ function in outputs and gradients.
TEST(GsaOp, DispatcherOpMatchesDirectCall) {
  const Graph g = build_pattern("window", 19, true, {{"w", 4}});
  const TorchGraph tg = TorchGraph::from_graph(g);
  const torch::Tensor q = torch::randn({2, 19, 2, 8}, torch::kFloat64).requires_grad_();
  const torch::Tensor rel = torch::randn({tg.n_relations, 8}, torch::kFloat64).requires_grad_();
  const c10::OperatorHandle prepare = c10::Dispatcher::singleton().findSchemaOrThrow("sparsebench::prepare_graph", "");
  const c10::OperatorHandle op = c10::Dispatcher::singleton().findSchemaOrThrow("sparsebench::graph_attention", "");
  torch::jit::Stack stack = {tg.row_ptr, tg.col, tg.rel, tg.n_relations};
  prepare.callBoxed(&stack);
  ASSERT_EQ(stack.size(), 1u);
  const c10::IValue handle = stack[0];
  const torch::Tensor k = q * 0.5, v = q * 2;  // made once: both calls then sum q's gradients in one order
  stack = {q, k, v, rel, handle};
  op.callBoxed(&stack);
  const torch::Tensor o = stack[0].toTensor();
  const torch::Tensor expect = graph_attention(q, k, v, rel, tg);
  EXPECT_TRUE(torch::equal(o, expect));
  const auto grads = torch::autograd::grad({o.sum()}, {q, rel});
  const auto expect_grads = torch::autograd::grad({expect.sum()}, {q, rel});
  EXPECT_TRUE(torch::equal(grads[0], expect_grads[0]));
  EXPECT_TRUE(torch::equal(grads[1], expect_grads[1]));
  EXPECT_EQ(handle.toCustomClass<TorchGraph>()->n_relations, tg.n_relations);
}

// Without autograd (inference mode) the op runs its CPU registration directly, with the same result.
TEST(GsaOp, InferenceModeUsesTheDeviceKernel) {
  const Graph g = build_pattern("window", 19, false, {{"w", 4}});
  const TorchGraph tg = TorchGraph::from_graph(g);
  const torch::Tensor q = torch::randn({1, 19, 2, 8});
  const torch::Tensor expect = graph_attention(q, q, q, {}, tg);
  c10::InferenceMode inference;
  const torch::Tensor o = graph_attention(q, q, q, {}, tg);
  EXPECT_TRUE(torch::equal(o, expect));
}

}  // namespace
}  // namespace sb::test
