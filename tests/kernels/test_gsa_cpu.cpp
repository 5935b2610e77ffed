// CPU kernel tests without LibTorch: the parity table on every registered CPU backend against the double
// reference, the reference's own finite-difference check, extreme scores, empty rows and bitwise determinism
// on every CPU backend, the backend registry, and the host graph preparation.
// Run: ctest -R test_gsa_cpu (or ./test_gsa_cpu --gtest_filter=...).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fmt/format.h>
#include <limits>
#include <omp.h>
#include <random>
#include <set>

#include "kernels/gsa_backend.h"
#include "kernels/gsa_cpu.h"
#include "kernels/gsa_cpu_targets.h"
#include "kernels/gsa_host_graph.h"
#include "patterns/error.h"
#include "tests/kernels/expect_error.h"
#include "tests/kernels/gsa_cases.h"

namespace sb::test {
namespace {

// The registered CPU backends (one per CPU target this machine runs).
std::vector<const GsaBackend*> cpu_backends() {
  std::vector<const GsaBackend*> out;
  for (const GsaBackend* b : gsa_backends()) {
    if (b->device() == GsaDevice::cpu) out.push_back(b);
  }
  return out;
}

// fp32 forward and backward of a problem on backend b, through host memory.
GsaRunOutputs run_fp32(const GsaBackend& b, const Graph& g, const RefProblem& p, const std::vector<double>& d_o) {
  HostMemory mem;
  return run_on_backend(b, g, p, d_o, GsaDtype::f32, mem);
}

// The parity table on every CPU backend in every dtype (unsupported dtypes are reported, not run).
class GsaCpuTable : public ::testing::TestWithParam<std::string> {};

TEST_P(GsaCpuTable, EveryBackendMatchesDoubleReference) {
  HostMemory mem;
  for (const std::string& failure : run_backend_table(GetParam(), GsaDevice::cpu, mem)) ADD_FAILURE() << failure;
}

INSTANTIATE_TEST_SUITE_P(AllPatterns, GsaCpuTable, ::testing::ValuesIn(pattern_names()),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

// The reference's backward against central finite differences of its own forward.
TEST(GsaReference, GradientsMatchFiniteDifferences) {
  const GsaCase c{"window", {{"w", 3}}, 6, false, 5, 2, 2, true};
  const Graph g = build_pattern("window", 6, false, {{"w", 3}});
  const DenseMask mask(g);
  RefProblem p = make_problem(c, g);
  const std::vector<double> d_o = make_d_o(c, g);
  const RefResult ref = reference_attention(p, mask, d_o);
  auto loss = [&](const RefProblem& x) {
    const RefResult r = reference_attention(x, mask, {});
    double l = 0.0;
    for (size_t i = 0; i < r.o.size(); ++i) l += r.o[i] * d_o[i];
    return l;
  };
  const double h = 1e-6;
  std::vector<double> RefProblem::*fields[] = {&RefProblem::q, &RefProblem::k, &RefProblem::v, &RefProblem::rel_emb};
  const std::vector<double>* grads[] = {&ref.dq, &ref.dk, &ref.dv, &ref.d_rel};
  for (int f = 0; f < 4; ++f) {
    std::vector<double>& x = p.*fields[f];
    ASSERT_EQ(x.size(), grads[f]->size());
    for (size_t i = 0; i < x.size(); ++i) {
      const double saved = x[i];
      x[i] = saved + h;
      const double up = loss(p);
      x[i] = saved - h;
      const double down = loss(p);
      x[i] = saved;
      EXPECT_NEAR((up - down) / (2 * h), (*grads[f])[i], 1e-7) << "field " << f << " element " << i;
    }
  }
}

// Scores of +-1e4: integer inputs and D = 16 (scale 1/4) make every score exact in fp32, so the fp32
// outputs must match the reference at the table's tolerance, with no inf or nan anywhere. The softmaxes
// are then nearly one-hot and dq, dk nearly cancel (dS = P (dP - delta) with P ~ 1), so their error is
// bounded relative to the natural gradient scale max|dv| = O(1) rather than to their own tiny size.
TEST(GsaCpu, ExtremeScoresStayFiniteAndCorrect) {
  for (bool causal : {false, true}) {
    const GsaCase c{"window", {{"w", 7}}, 50, causal, 16, 2, 1, false};
    const Graph g = build_pattern("window", c.n, causal, c.params);
    RefProblem p = make_problem(c, g);
    std::mt19937_64 rng(7);
    std::uniform_int_distribution<int> small(-100, 100);
    for (double& x : p.q) x = small(rng);
    for (double& x : p.k) x = small(rng);
    const std::vector<double> d_o = make_d_o(c, g);
    const RefResult ref = reference_attention(p, DenseMask(g), d_o);
    double max_score_gap = 0.0;
    for (double l : ref.lse) max_score_gap = std::max(max_score_gap, std::fabs(l));
    EXPECT_GT(max_score_gap, 5e3) << "the inputs should produce scores of order 1e4";
    for (const GsaBackend* backend : cpu_backends()) {
      const GsaRunOutputs run = run_fp32(*backend, g, p, d_o);
      const std::string where = c.id() + " " + backend->name();
      for (const std::vector<double>* x : {&run.o, &run.dq, &run.dk, &run.dv}) {
        for (double e : *x) ASSERT_TRUE(std::isfinite(e)) << where;
      }
      EXPECT_LE(max_abs_diff(run.o, ref.o), 1e-5 * std::max(1.0, max_abs(ref.o))) << where;
      const double grad_scale = max_abs(ref.dv);
      EXPECT_LE(max_abs_diff(run.dv, ref.dv), 1e-4 * grad_scale) << where;
      EXPECT_LE(max_abs_diff(run.dq, ref.dq), 1e-4 * grad_scale) << where;
      EXPECT_LE(max_abs_diff(run.dk, ref.dk), 1e-4 * grad_scale) << where;
    }
  }
}

// A node with no sources (a span node nobody feeds) outputs zeros, lse = -inf, and gets zero gradients.
TEST(GsaCpu, EmptyRowOutputsZero) {
  GraphBuilder b(3, false);
  const uint16_t self = b.relation("self");
  const uint16_t up = b.relation("span");
  const int32_t span = b.add_node(NodeKind::span, 1, 0, 1);
  for (int32_t i = 0; i < 3; ++i) {
    b.add_edge(i, i, self);
    b.add_edge(span, i, up);  // tokens read the span node; the span node reads nothing
  }
  const Graph g = b.finish();
  g.validate();
  const GsaCase c{"custom", {}, 3, false, 8, 2, 2, true};
  const RefProblem p = make_problem(c, g);
  const std::vector<double> d_o = make_d_o(c, g);
  const RefResult ref = reference_attention(p, DenseMask(g), d_o);
  for (const GsaBackend* backend : cpu_backends()) {
    const GsaRunOutputs run = run_fp32(*backend, g, p, d_o);
    for (int64_t bb = 0; bb < 2; ++bb) {
      for (int64_t h = 0; h < 2; ++h) {
        const double lse = run.lse[(bb * 4 + span) * 2 + h];
        EXPECT_TRUE(std::isinf(lse) && lse < 0) << backend->name();
        for (int64_t d = 0; d < 8; ++d) EXPECT_EQ(run.o[((bb * 4 + span) * 2 + h) * 8 + d], 0.0) << backend->name();
      }
    }
    EXPECT_EQ(compare_run(ref, run, gsa_dtype_rows().front()), "") << backend->name();
  }
}

bool same_bits(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0;
}

// On every CPU backend, repeated runs and 1 vs 2 threads give identical bits for every output, d_rel_emb
// included (fp32 results widened to double, which keeps equal bits equal and different bits different).
TEST(GsaCpu, BitwiseIdenticalAcrossRunsAndThreads) {
  for (const std::string name : pattern_names()) {
    const AttentionPattern& pat = find_pattern(name);
    const GsaCase c{name, small_params(pat), 1025, pat.supports_causal(), 59, 3, 2, true};
    const Graph& g = case_graph(c);
    const RefProblem p = make_problem(c, g);
    const std::vector<double> d_o = make_d_o(c, g);
    for (const GsaBackend* backend : cpu_backends()) {
      const std::string where = c.id() + " " + backend->name();
      const int saved_threads = omp_get_max_threads();
      omp_set_num_threads(1);
      const GsaRunOutputs one = run_fp32(*backend, g, p, d_o);
      omp_set_num_threads(2);
      const GsaRunOutputs two = run_fp32(*backend, g, p, d_o);
      const GsaRunOutputs again = run_fp32(*backend, g, p, d_o);
      omp_set_num_threads(saved_threads);
      for (const GsaRunOutputs* other : {&two, &again}) {
        EXPECT_TRUE(same_bits(one.o, other->o)) << where << " o";
        EXPECT_TRUE(same_bits(one.lse, other->lse)) << where << " lse";
        EXPECT_TRUE(same_bits(one.dq, other->dq)) << where << " dq";
        EXPECT_TRUE(same_bits(one.dk, other->dk)) << where << " dk";
        EXPECT_TRUE(same_bits(one.dv, other->dv)) << where << " dv";
        EXPECT_TRUE(same_bits(one.d_rel, other->d_rel)) << where << " d_rel";
      }
    }
  }
}

TEST(GsaCpu, RejectsHalfPrecision) {
  GsaParams p;
  p.dtype = GsaDtype::f16;
  try {
    gsa_forward_cpu(p);
    FAIL() << "expected sb::Error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "graph_attention forward: the CPU kernels support float32 and float64 only");
  }
}

// The registry lists one CPU backend per CPU target, best first, and the active target serves the CPU.
TEST(GsaBackends, OneCpuBackendPerTarget) {
  const std::vector<std::string> targets = gsa_cpu_targets();
  const std::vector<const GsaBackend*> cpu = cpu_backends();
  ASSERT_EQ(cpu.size(), targets.size());
  for (size_t i = 0; i < targets.size(); ++i) EXPECT_EQ(cpu[i]->name(), "cpu:" + targets[i]);
  ASSERT_NE(gsa_backend_for(GsaDevice::cpu), nullptr);
  EXPECT_EQ(gsa_backend_for(GsaDevice::cpu)->name(), "cpu:" + gsa_cpu_target());
  std::set<std::string> names;
  for (const GsaBackend* b : gsa_backends()) EXPECT_TRUE(names.insert(b->name()).second) << b->name();
  EXPECT_EQ(find_gsa_backend("cpu:no-such-target"), nullptr);
  expect_error([] { gsa_cpu_pin_target("no-such-target"); },
               fmt::format("CPU target 'no-such-target' is not available here; available: {}", fmt::join(targets, ", ")));
}

// A scope sends calls on the CPU to one backend and gives the previous target back.
TEST(GsaBackends, ScopeSelectsTheBackendAndRestores) {
  const std::string before = gsa_cpu_target();
  for (const GsaBackend* b : cpu_backends()) {
    {
      const GsaBackendScope scope(*b);
      EXPECT_EQ(gsa_backend_for(GsaDevice::cpu), b);
    }
    EXPECT_EQ(gsa_cpu_target(), before);
  }
}

// Half types are refused with the reason, by the support answer and by the calls themselves.
TEST(GsaBackends, CpuRefusesHalfTypesWithTheReason) {
  GsaParams p;
  p.B = p.N = p.H = 1;
  p.D = 16;
  for (const GsaBackend* b : cpu_backends()) {
    p.dtype = GsaDtype::f32;
    EXPECT_EQ(b->unsupported(p), "") << b->name();
    p.dtype = GsaDtype::f64;
    EXPECT_EQ(b->unsupported(p), "") << b->name();
    for (GsaDtype half : {GsaDtype::f16, GsaDtype::bf16}) {
      p.dtype = half;
      const std::string why =
          fmt::format("dtype {} (the CPU kernels take float32 and float64)", gsa_dtype_name(half));
      EXPECT_EQ(b->unsupported(p), why);
      expect_error([&] { b->forward(p, nullptr); }, "graph_attention: " + b->name() + " does not support " + why);
      expect_error([&] { b->backward(p, nullptr); }, "graph_attention: " + b->name() + " does not support " + why);
    }
  }
}

// The backward refuses a workspace smaller than it asked for, before touching any pointer.
TEST(GsaBackends, BackwardChecksItsWorkspace) {
  const float dummy = 0.0f;
  GsaParams p;
  p.B = 2;
  p.N = 40;
  p.H = 3;
  p.D = 16;
  p.R = 5;
  p.rel_emb = &dummy;
  p.delta = const_cast<float*>(&dummy);
  for (const GsaBackend* b : cpu_backends()) {
    const GsaWorkspace need = b->backward_workspace(p);
    EXPECT_EQ(need.delta_bytes, 2 * 40 * 3 * 4) << b->name();
    ASSERT_GT(need.workspace_bytes, 0) << b->name();
    p.workspace_bytes = need.workspace_bytes - 1;
    expect_error([&] { b->backward(p, nullptr); },
                 fmt::format("graph_attention backward on {}: needs delta and a workspace of {} bytes, got {}", b->name(),
                             need.workspace_bytes, need.workspace_bytes - 1));
  }
}

// From the destination CSR alone, the host preparation rebuilds the pattern graph's transpose, and groups
// every edge under its relation in ascending order with its destination.
TEST(GsaHostGraph, FromCsrMatchesPatternGraph) {
  for (const std::string& name : pattern_names()) {
    const AttentionPattern& pat = find_pattern(name);
    const Graph g = build_pattern(name, 97, pat.supports_causal(), small_params(pat));
    const GsaHostGraph a(g);
    const GsaHostGraph b(g.row_ptr, g.col, std::vector<int32_t>(g.rel.begin(), g.rel.end()), g.n_relations());
    EXPECT_EQ(b.n_nodes, g.n_nodes()) << name;
    EXPECT_EQ(b.n_relations, g.n_relations()) << name;
    EXPECT_EQ(b.t_row_ptr, g.t_row_ptr) << name;
    EXPECT_EQ(b.t_col, g.t_col) << name;
    EXPECT_EQ(b.t_edge, g.t_edge) << name;
    EXPECT_EQ(a.rel_ptr, b.rel_ptr) << name;
    EXPECT_EQ(a.rel_edge, b.rel_edge) << name;
    EXPECT_EQ(a.rel_dst, b.rel_dst) << name;
    ASSERT_EQ(b.rel_ptr.size(), static_cast<size_t>(g.n_relations() + 1)) << name;
    ASSERT_EQ(b.rel_ptr.back(), g.n_edges()) << name;
    for (int64_t r = 0; r < g.n_relations(); ++r) {
      for (int64_t i = b.rel_ptr[r]; i < b.rel_ptr[r + 1]; ++i) {
        const int32_t e = b.rel_edge[i], u = b.rel_dst[i];
        EXPECT_EQ(b.rel[e], r) << name;
        EXPECT_TRUE(e >= g.row_ptr[u] && e < g.row_ptr[u + 1]) << name << " edge " << e;
        if (i > b.rel_ptr[r]) EXPECT_LT(b.rel_edge[i - 1], e) << name;
      }
    }
  }
  // n_relations grows to cover every relation id
  EXPECT_EQ(GsaHostGraph({0, 1, 2}, {0, 1}, {0, 6}, 2).n_relations, 7);
}

TEST(GsaHostGraph, RejectsBadCsrByName) {
  expect_error([] { GsaHostGraph({}, {}, {}, 0); }, "graph: row_ptr must have n_nodes + 1 >= 1 entries");
  expect_error([] { GsaHostGraph({0, 1, 3}, {0, 1}, {0, 0}, 0); }, "graph: row_ptr must run from 0 to E = 2");
  expect_error([] { GsaHostGraph({0, 2, 1, 2}, {0, 1}, {0, 0}, 0); }, "graph: row_ptr decreases at node 1");
  expect_error([] { GsaHostGraph({0, 1, 2}, {0, 5}, {0, 0}, 0); }, "graph: col[1] = 5 outside [0, 2)");
  expect_error([] { GsaHostGraph({0, 1, 2}, {0, -1}, {0, 0}, 0); }, "graph: col[1] = -1 outside [0, 2)");
  expect_error([] { GsaHostGraph({0, 1, 2}, {0, 1}, {-3, 0}, 0); }, "graph: rel[0] = -3 outside [0, 65535)");
  expect_error([] { GsaHostGraph({0, 1, 2}, {0, 1}, {0}, 0); }, "graph: rel must have one entry per edge (2), got 1");
  expect_error([] { GsaHostGraph({0, 1, 2}, {0, 1}, {0, 0}, 70000); }, "graph: n_relations = 70000 exceeds 65535");
}

// Every host preparation is counted once (the op's tests count the preparations its calls make: none).
TEST(GsaHostGraph, CountsPreparations) {
  const Graph g = build_pattern("window", 20, false, {{"w", 3}});
  const int64_t before = GsaHostGraph::preparations();
  const GsaHostGraph a(g);
  EXPECT_EQ(GsaHostGraph::preparations(), before + 1);
  const GsaHostGraph b(a.row_ptr, a.col, a.rel, 0);
  EXPECT_EQ(GsaHostGraph::preparations(), before + 2);
  (void)a.view();
  EXPECT_EQ(GsaHostGraph::preparations(), before + 2);
}

}  // namespace
}  // namespace sb::test
