// CPU kernel tests without LibTorch, on every SIMD target this CPU runs (each case named with its target): the
// parity table against the double reference (fp32 and fp64), extreme and non-finite scores, empty rows, heavy rows
// split into pieces, bitwise determinism; plus the reference's own finite-difference check and target pinning.
// Run: ctest -R test_gsa_cpu (or ./test_gsa_cpu --gtest_filter='*AVX2*').
#include <gtest/gtest.h>

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <tuple>
#include <limits>
#include <omp.h>
#include <random>

#include "kernels/gsa_cpu.h"
#include "kernels/gsa_host_graph.h"
#include "kernels/gsa_split_plan.h"
#include "patterns/error.h"
#include "tests/kernels/gsa_cases.h"

namespace sb::test {
namespace {

// Pins a SIMD target for one scope and restores the previous one.
class PinTarget {
 public:
  explicit PinTarget(const std::string& name) : saved_(gsa_cpu_target()) { gsa_cpu_pin_target(name); }
  ~PinTarget() { gsa_cpu_pin_target(saved_); }
  PinTarget(const PinTarget&) = delete;
  PinTarget& operator=(const PinTarget&) = delete;

 private:
  std::string saved_;
};

template <typename T>
struct CpuRun {
  std::vector<T> o, lse, dq, dk, dv, d_rel;
};

GsaStrides contiguous_strides(const RefProblem& p) { return {p.N * p.H * p.D, p.H * p.D, p.D}; }

// Runs the CPU kernels forward (and backward when d_o is non-empty) on the problem, in precision T.
template <typename T>
CpuRun<T> run_cpu(const Graph& g, const RefProblem& prob, const std::vector<double>& d_o_in) {
  const GsaHostGraph hg(g);
  const std::vector<T> q = convert<T>(prob.q), k = convert<T>(prob.k), v = convert<T>(prob.v);
  const std::vector<T> rel = convert<T>(prob.rel_emb), d_o = convert<T>(d_o_in);
  CpuRun<T> r;
  const size_t size = q.size();
  r.o.assign(size, T(0));
  r.lse.assign(static_cast<size_t>(prob.B * prob.N * prob.H), T(0));
  GsaParams p;
  p.graph = hg.view();
  p.dtype = sizeof(T) == 8 ? GsaDtype::f64 : GsaDtype::f32;
  p.B = prob.B;
  p.N = prob.N;
  p.H = prob.H;
  p.D = prob.D;
  p.scale = 1.0 / std::sqrt(static_cast<double>(prob.D));
  p.q = q.data();
  p.k = k.data();
  p.v = v.data();
  p.o = r.o.data();
  p.q_strides = p.k_strides = p.v_strides = p.o_strides = contiguous_strides(prob);
  if (!rel.empty()) {
    p.R = prob.R;
    p.rel_emb = rel.data();
    p.rel_stride = prob.D;
  }
  p.lse = r.lse.data();
  gsa_forward_cpu(p);
  if (d_o.empty()) return r;
  r.dq.assign(size, T(-1));
  r.dk.assign(size, T(-1));
  r.dv.assign(size, T(-1));
  r.d_rel.assign(rel.size(), T(-1));
  std::vector<T> delta(static_cast<size_t>(gsa_cpu_delta_elems(p)));
  std::vector<T> rel_partial(static_cast<size_t>(gsa_cpu_rel_partial_elems(p)));
  p.d_o = d_o.data();
  p.d_o_strides = p.dq_strides = p.dk_strides = p.dv_strides = contiguous_strides(prob);
  p.dq = r.dq.data();
  p.dk = r.dk.data();
  p.dv = r.dv.data();
  p.d_rel_emb = rel.empty() ? nullptr : r.d_rel.data();
  p.delta = delta.data();
  p.rel_partial = rel_partial.data();
  gsa_backward_cpu(p);
  return r;
}

template <typename T>
std::string check_case(const GsaCase& c, Tolerance tol) {
  const Graph& g = case_graph(c);
  const RefProblem prob = make_problem(c, g);
  const std::vector<double> d_o = make_d_o(c, g);
  const RefResult ref = reference_attention(prob, DenseMask(g), d_o);
  const CpuRun<T> run = run_cpu<T>(g, prob, d_o);
  std::string err = compare_with_reference(ref, widen(run.o), widen(run.dq), widen(run.dk), widen(run.dv),
                                           widen(run.d_rel), tol);
  if (err.empty()) {
    const double lse_err = max_abs_diff(widen(run.lse), ref.lse);  // inf - inf = nan: compare -inf rows apart
    for (size_t i = 0; i < ref.lse.size(); ++i) {
      const bool ref_empty = std::isinf(ref.lse[i]);
      if (ref_empty != std::isinf(static_cast<double>(run.lse[i]))) return "lse: empty-row mismatch";
      if (!ref_empty && std::fabs(run.lse[i] - ref.lse[i]) > tol.out_tol * std::max(1.0, std::fabs(ref.lse[i]))) {
        return "lse: error " + std::to_string(lse_err);
      }
    }
  }
  return err;
}

// Parameter: (pattern, target); test names end with the target, e.g. AllPatterns/GsaCpuTable.Fp32.../bpt_AVX2.
using PatternTarget = std::tuple<std::string, std::string>;

class GsaCpuTable : public ::testing::TestWithParam<PatternTarget> {
 protected:
  const std::string& pattern() const { return std::get<0>(GetParam()); }
  const std::string& target() const { return std::get<1>(GetParam()); }
};

TEST_P(GsaCpuTable, Fp32MatchesDoubleReference) {
  const PinTarget pin(target());
  const std::vector<GsaCase> cases = gsa_case_table(find_pattern(pattern()));
  int passed = 0;
  for (const GsaCase& c : cases) {
    const std::string err = check_case<float>(c, {1e-5, 1e-4});
    EXPECT_EQ(err, "") << c.id() << " on " << target();
    passed += err.empty();
  }
  std::printf("[ table    ] %s fp32 %s: %d/%zu cases passed\n", pattern().c_str(), target().c_str(), passed,
              cases.size());
}

TEST_P(GsaCpuTable, Fp64MatchesDoubleReference) {
  const PinTarget pin(target());
  int passed = 0, run = 0;
  for (const GsaCase& c : gsa_case_table(find_pattern(pattern()))) {
    if (c.n > 97) continue;  // fp64 adds no coverage of blocking at large n that fp32 lacks
    const std::string err = check_case<double>(c, {1e-11, 1e-9});
    EXPECT_EQ(err, "") << c.id() << " on " << target();
    passed += err.empty();
    ++run;
  }
  std::printf("[ table    ] %s fp64 %s: %d/%d cases passed\n", pattern().c_str(), target().c_str(), passed, run);
}

INSTANTIATE_TEST_SUITE_P(AllPatterns, GsaCpuTable,
                         ::testing::Combine(::testing::ValuesIn(pattern_names()),
                                            ::testing::ValuesIn(gsa_cpu_targets())),
                         [](const ::testing::TestParamInfo<PatternTarget>& info) {
                           return std::get<0>(info.param) + "_" + std::get<1>(info.param);
                         });

// Tests run once per target (parameter: the target name).
class GsaCpuTarget : public ::testing::TestWithParam<std::string> {};

INSTANTIATE_TEST_SUITE_P(AllTargets, GsaCpuTarget, ::testing::ValuesIn(gsa_cpu_targets()),
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
TEST_P(GsaCpuTarget, ExtremeScoresStayFiniteAndCorrect) {
  const PinTarget pin(GetParam());
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
    const CpuRun<float> run = run_cpu<float>(g, p, d_o);
    for (float x : run.o) ASSERT_TRUE(std::isfinite(x));
    for (float x : run.dq) ASSERT_TRUE(std::isfinite(x));
    for (float x : run.dk) ASSERT_TRUE(std::isfinite(x));
    for (float x : run.dv) ASSERT_TRUE(std::isfinite(x));
    EXPECT_LE(max_abs_diff(widen(run.o), ref.o), 1e-5 * std::max(1.0, max_abs(ref.o))) << c.id();
    const double grad_scale = max_abs(ref.dv);
    EXPECT_LE(max_abs_diff(widen(run.dv), ref.dv), 1e-4 * grad_scale) << c.id();
    EXPECT_LE(max_abs_diff(widen(run.dq), ref.dq), 1e-4 * grad_scale) << c.id();
    EXPECT_LE(max_abs_diff(widen(run.dk), ref.dk), 1e-4 * grad_scale) << c.id();
  }
}

// A node with no sources (a span node nobody feeds) outputs zeros, lse = -inf, and gets zero gradients.
TEST_P(GsaCpuTarget, EmptyRowOutputsZero) {
  const PinTarget pin(GetParam());
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
  const CpuRun<float> run = run_cpu<float>(g, p, d_o);
  for (int64_t bb = 0; bb < 2; ++bb) {
    for (int64_t h = 0; h < 2; ++h) {
      EXPECT_TRUE(std::isinf(run.lse[(bb * 4 + span) * 2 + h]) && run.lse[(bb * 4 + span) * 2 + h] < 0);
      for (int64_t d = 0; d < 8; ++d) EXPECT_EQ(run.o[((bb * 4 + span) * 2 + h) * 8 + d], 0.0f);
    }
  }
  EXPECT_EQ(compare_with_reference(ref, widen(run.o), widen(run.dq), widen(run.dk), widen(run.dv), widen(run.d_rel),
                                   {1e-5, 1e-4}),
            "");
}

template <typename T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

template <typename T>
void expect_same_bits(const CpuRun<T>& a, const CpuRun<T>& b, const std::string& what) {
  EXPECT_TRUE(same_bits(a.o, b.o)) << what << " o";
  EXPECT_TRUE(same_bits(a.lse, b.lse)) << what << " lse";
  EXPECT_TRUE(same_bits(a.dq, b.dq)) << what << " dq";
  EXPECT_TRUE(same_bits(a.dk, b.dk)) << what << " dk";
  EXPECT_TRUE(same_bits(a.dv, b.dv)) << what << " dv";
  EXPECT_TRUE(same_bits(a.d_rel, b.d_rel)) << what << " d_rel";
}

// Runs f with 1 thread, then twice with 2, and checks that all three give the same bits.
template <typename F>
void expect_thread_independent(F&& f, const std::string& what) {
  const int saved_threads = omp_get_max_threads();
  omp_set_num_threads(1);
  const auto one = f();
  omp_set_num_threads(2);
  const auto two = f();
  const auto again = f();
  omp_set_num_threads(saved_threads);
  expect_same_bits(one, two, what + " (1 vs 2 threads)");
  expect_same_bits(two, again, what + " (two runs)");
}

// Repeated runs and 1 vs 2 threads give identical bits for every output, d_rel_emb included.
TEST_P(GsaCpuTarget, BitwiseIdenticalAcrossRunsAndThreads) {
  const PinTarget pin(GetParam());
  for (const std::string name : pattern_names()) {
    const AttentionPattern& pat = find_pattern(name);
    const GsaCase c{name, small_params(pat), 1025, pat.supports_causal(), 59, 3, 2, true};
    const Graph& g = case_graph(c);
    const RefProblem p = make_problem(c, g);
    const std::vector<double> d_o = make_d_o(c, g);
    expect_thread_independent([&] { return run_cpu<float>(g, p, d_o); }, c.id() + " on " + GetParam());
  }
}

// A hub: node 0 reads every node and every node reads node 0 (and itself), so row 0 and source 0 are far longer
// than the rest and run as pieces merged in a fixed order; results match the reference and do not depend on
// the thread count.
TEST_P(GsaCpuTarget, HeavyRowsAndSourcesSplitMatchReference) {
  const PinTarget pin(GetParam());
  const int64_t n = 3000;
  GraphBuilder b(n, false);
  const uint16_t self = b.relation("self");
  const uint16_t hub = b.relation("hub");
  for (int32_t i = 0; i < n; ++i) {
    b.add_edge(i, i, self);
    if (i != 0) {
      b.add_edge(0, i, hub);
      b.add_edge(i, 0, hub);
    }
  }
  const Graph g = b.finish();
  g.validate();
  const GsaHostGraph hg(g);
  const int64_t threshold = gsa_split_threshold(hg.n_nodes, static_cast<int64_t>(hg.col.size()));
  ASSERT_FALSE(gsa_split_plan(hg.row_ptr.data(), hg.n_nodes, threshold).empty()) << "row 0 should be split";
  ASSERT_FALSE(gsa_split_plan(hg.t_row_ptr.data(), hg.n_nodes, threshold).empty()) << "source 0 should be split";
  for (bool rel : {false, true}) {
    const GsaCase c{"hub", {}, n, false, 16, 2, 2, rel};
    const RefProblem p = make_problem(c, g);
    const std::vector<double> d_o = make_d_o(c, g);
    const RefResult ref = reference_attention(p, DenseMask(g), d_o);
    const CpuRun<float> run = run_cpu<float>(g, p, d_o);
    EXPECT_EQ(compare_with_reference(ref, widen(run.o), widen(run.dq), widen(run.dk), widen(run.dv),
                                     widen(run.d_rel), {1e-5, 1e-4}),
              "")
        << c.id() << " on " << GetParam();
    const CpuRun<double> run64 = run_cpu<double>(g, p, d_o);
    EXPECT_EQ(compare_with_reference(ref, widen(run64.o), widen(run64.dq), widen(run64.dk), widen(run64.dv),
                                     widen(run64.d_rel), {1e-11, 1e-9}),
              "")
        << c.id() << " fp64 on " << GetParam();
    expect_thread_independent([&] { return run_cpu<float>(g, p, d_o); }, c.id() + " on " + GetParam());
  }
}

// The kernels' vector exp: finite arguments to within fp32 / fp64 rounding of std::exp, NaN -> NaN, +inf and
// arguments past the largest finite result -> +inf, -inf and large negative arguments -> 0; tails shorter than a
// vector included (n = 37).
TEST_P(GsaCpuTarget, VectorExpIsDefinedForEveryInput) {
  const PinTarget pin(GetParam());
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  std::vector<double> xs = {0.0, 1.0, -1.0, 0.5, -0.34657, 0.34657, 10.0, -10.0, 80.0, -80.0, -86.9, 88.0,
                            -87.5, -100.0, -1e4, -1e30, -inf, 1e4, 1e30, inf, nan, -nan};
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<double> finite(-80.0, 80.0);
  while (xs.size() < 37) xs.push_back(finite(rng));
  std::vector<float> f(xs.begin(), xs.end());
  std::vector<double> g = xs;
  gsa_cpu_exp(f.data(), static_cast<int64_t>(f.size()));
  gsa_cpu_exp(g.data(), static_cast<int64_t>(g.size()));
  for (size_t i = 0; i < xs.size(); ++i) {
    const double x = xs[i];
    const std::string at = "exp(" + std::to_string(x) + ") on " + GetParam();
    if (std::isnan(x)) {
      EXPECT_TRUE(std::isnan(f[i])) << at << " fp32: " << f[i];
      EXPECT_TRUE(std::isnan(g[i])) << at << " fp64: " << g[i];
    } else if (x > 1e3) {
      EXPECT_EQ(f[i], std::numeric_limits<float>::infinity()) << at;
      EXPECT_EQ(g[i], inf) << at;
    } else if (x < -1e3) {
      EXPECT_EQ(f[i], 0.0f) << at;
      EXPECT_EQ(g[i], 0.0) << at;
    } else {
      const float xf = static_cast<float>(x);
      const double want_f = xf < -87.0f ? 0.0 : std::exp(static_cast<double>(xf));
      EXPECT_NEAR(f[i], want_f, 3e-7 * want_f) << at << " fp32";
      EXPECT_NEAR(g[i], std::exp(x), 1e-15 * std::exp(x)) << at << " fp64";
    }
  }
}

// Non-finite scores reach the softmax through the kernels without undefined behaviour: a NaN query makes its
// rows NaN and leaves the other rows exact; an infinite query does the same through inf - inf.
TEST_P(GsaCpuTarget, NonFiniteScoresStayConfined) {
  const PinTarget pin(GetParam());
  const GsaCase c{"window", {{"w", 3}}, 40, true, 16, 1, 1, false};
  const Graph g = build_pattern("window", c.n, c.causal, c.params);
  for (double bad : {std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity()}) {
    RefProblem p = make_problem(c, g);
    const RefResult clean = reference_attention(p, DenseMask(g), {});
    const int64_t row = 20;
    p.q[static_cast<size_t>(row * c.D)] = bad;
    const CpuRun<float> run = run_cpu<float>(g, p, {});
    for (int64_t u = 0; u < c.n; ++u) {
      for (int64_t d = 0; d < c.D; ++d) {
        const float x = run.o[static_cast<size_t>(u * c.D + d)];
        if (u == row) {
          EXPECT_TRUE(std::isnan(x)) << "row " << u << " with q = " << bad << " on " << GetParam();
        } else {
          EXPECT_NEAR(x, clean.o[static_cast<size_t>(u * c.D + d)], 1e-5) << "row " << u << " on " << GetParam();
        }
      }
    }
  }
}

// Pinning: every listed target can be pinned (and is then the active one); an unknown one names itself and the
// supported targets.
TEST(GsaCpuTargets, PinningSelectsAndRejects) {
  const std::vector<std::string> targets = gsa_cpu_targets();
  ASSERT_FALSE(targets.empty());
  const std::string saved = gsa_cpu_target();
  for (const std::string& t : targets) {
    gsa_cpu_pin_target(t);
    EXPECT_EQ(gsa_cpu_target(), t);
  }
  gsa_cpu_pin_target(saved);
  try {
    gsa_cpu_pin_target("AVX9000");
    FAIL() << "expected sb::Error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("'AVX9000'"), std::string::npos) << msg;
    EXPECT_NE(msg.find(targets.front()), std::string::npos) << msg;
  }
  EXPECT_EQ(gsa_cpu_target(), saved);
}

// SB_CPU_TARGET, read at first use (ctest runs this with the variable set; without it the test skips): a target
// name pins it, anything else is an error naming the value.
TEST(GsaCpuTargets, EnvironmentVariablePinsOrFails) {
  const char* env = std::getenv("SB_CPU_TARGET");
  if (env == nullptr) GTEST_SKIP() << "SB_CPU_TARGET is not set";
  const std::string want = env;
  auto iequal = [](const std::string& a, const std::string& b) {
    return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
             return std::toupper(static_cast<unsigned char>(x)) == std::toupper(static_cast<unsigned char>(y));
           });
  };
  bool known = false;
  for (const std::string& t : gsa_cpu_targets()) known = known || iequal(t, want);
  if (known) {
    EXPECT_TRUE(iequal(gsa_cpu_target(), want)) << gsa_cpu_target();
  } else {
    try {
      gsa_cpu_target();
      FAIL() << "expected sb::Error for SB_CPU_TARGET=" << want;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("SB_CPU_TARGET=" + want), std::string::npos) << e.what();
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

}  // namespace
}  // namespace sb::test
