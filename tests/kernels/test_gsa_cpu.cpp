// CPU kernel tests without LibTorch, on every registered CPU backend (one per SIMD target this CPU runs, each
// named with its target): the parity table against the double reference, the reference's own finite-difference
// check, extreme and non-finite scores, empty rows, heavy rows split into pieces, row-group tiles, bitwise
// determinism, the vector exp, target pinning, the backward with and without its edge cache, the backend registry,
// and the host graph preparation.
// Run: ctest -R test_gsa_cpu (or ./test_gsa_cpu --gtest_filter=...).
#include <gtest/gtest.h>

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fmt/format.h>
#include <limits>
#include <omp.h>
#include <random>
#include <set>

#include "kernels/gsa_backend.h"
#include "kernels/gsa_cpu.h"
#include "kernels/gsa_host_graph.h"
#include "kernels/gsa_math.h"
#include "kernels/gsa_split_plan.h"
#include "common/error.h"
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

// A hub of n nodes: node 0 reads every node and every node reads node 0 (relation "hub"), each node itself ("self").
Graph hub_graph(int64_t n) {
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
  return b.finish();
}

// Kernel params with case c's shapes over a prepared graph and no arrays (what the path counters read).
GsaParams shape_params(const GsaHostGraph& hg, const GsaCase& c) {
  GsaParams p;
  p.graph = hg.view();
  p.B = c.B;
  p.N = hg.n_nodes;
  p.H = c.H;
  p.D = c.D;
  p.R = hg.n_relations;
  return p;
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
  // An empty vector's data() may be null, which memcmp must not be given even for zero bytes.
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0);
}

// Runs f with 1 thread, then twice with 2, and checks that all three give the same bits.
template <typename F>
void expect_thread_independent(F&& f, const std::string& what) {
  const int saved_threads = omp_get_max_threads();
  omp_set_num_threads(1);
  const GsaRunOutputs one = f();
  omp_set_num_threads(2);
  const GsaRunOutputs two = f();
  const GsaRunOutputs again = f();
  omp_set_num_threads(saved_threads);
  for (const GsaRunOutputs* other : {&two, &again}) {
    EXPECT_TRUE(same_bits(one.o, other->o)) << what << " o";
    EXPECT_TRUE(same_bits(one.lse, other->lse)) << what << " lse";
    EXPECT_TRUE(same_bits(one.dq, other->dq)) << what << " dq";
    EXPECT_TRUE(same_bits(one.dk, other->dk)) << what << " dk";
    EXPECT_TRUE(same_bits(one.dv, other->dv)) << what << " dv";
    EXPECT_TRUE(same_bits(one.d_rel, other->d_rel)) << what << " d_rel";
  }
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
      expect_thread_independent([&] { return run_fp32(*backend, g, p, d_o); }, where);
    }
  }
}

// Tests run once per CPU backend (parameter: the backend; test names end with its target, e.g. .../AVX2).
class GsaCpuTarget : public ::testing::TestWithParam<const GsaBackend*> {
 protected:
  const GsaBackend& backend() const { return *GetParam(); }
  std::string where() const { return backend().name(); }
  GsaRunOutputs run(const Graph& g, const RefProblem& p, const std::vector<double>& d_o, GsaDtype dtype) const {
    HostMemory mem;
    return run_on_backend(backend(), g, p, d_o, dtype, mem);
  }
  // Case c on graph g matches the double reference in fp32 and fp64, and its fp32 bits do not depend on the
  // thread count.
  void expect_matches_reference(const Graph& g, const GsaCase& c) const;
};

INSTANTIATE_TEST_SUITE_P(AllTargets, GsaCpuTarget, ::testing::ValuesIn(cpu_backends()),
                         [](const ::testing::TestParamInfo<const GsaBackend*>& info) {
                           return info.param->name().substr(4);  // "cpu:AVX2" -> "AVX2"
                         });

void GsaCpuTarget::expect_matches_reference(const Graph& g, const GsaCase& c) const {
  const RefProblem p = make_problem(c, g);
  const std::vector<double> d_o = make_d_o(c, g);
  const RefResult ref = reference_attention(p, DenseMask(g), d_o);
  for (const GsaDtypeRows& rows : gsa_dtype_rows()) {
    if (rows.dtype != GsaDtype::f32 && rows.dtype != GsaDtype::f64) continue;  // the CPU kernels' dtypes
    EXPECT_EQ(compare_run(ref, run(g, p, d_o, rows.dtype), rows), "")
        << c.id() << " " << gsa_dtype_name(rows.dtype) << " on " << where();
  }
  expect_thread_independent([&] { return run(g, p, d_o, GsaDtype::f32); }, c.id() + " on " + where());
}

// A hub: node 0 reads every node and every node reads node 0 (and itself), so row 0 and source 0 are far longer
// than the rest and run as pieces merged in a fixed order; results match the reference and do not depend on
// the thread count.
TEST_P(GsaCpuTarget, HeavyRowsAndSourcesSplitMatchReference) {
  const GsaBackendScope scope(backend());
  const int64_t n = 3000;
  const Graph g = hub_graph(n);
  g.validate();
  const GsaHostGraph hg(g);
  const int64_t threshold = gsa_split_threshold(hg.n_nodes, static_cast<int64_t>(hg.col.size()));
  ASSERT_FALSE(gsa_split_plan(hg.row_ptr.data(), hg.n_nodes, threshold).empty()) << "row 0 should be split";
  ASSERT_FALSE(gsa_split_plan(hg.t_row_ptr.data(), hg.n_nodes, threshold).empty()) << "source 0 should be split";
  for (bool rel : {false, true}) {
    const GsaCase c{"hub", {}, n, false, 16, 2, 2, rel};
    expect_matches_reference(g, c);
  }
}

// The plans a prepared graph keeps (GsaHostGraph::cpu_plans, what the op's calls read) give the same bits as plans
// made per call, on graphs that use every part of them: bpt's column tiles and split span rows, a hub's split row
// and source, with and without relation terms (whose backward plan differs).
TEST_P(GsaCpuTarget, PreparedPlansGiveTheBitsOfPlansMadePerCall) {
  const GsaBackendScope scope(backend());
  const Graph hub = hub_graph(1500);
  const GsaCase bpt{"bpt", {{"k", 2}}, 2048, false, 16, 2, 1, true};
  for (const auto& [g, c] : {std::pair<const Graph*, GsaCase>{&case_graph(bpt), bpt},
                             {&hub, GsaCase{"hub", {}, 1500, false, 16, 2, 1, true}}}) {
    const GsaHostGraph hg(*g);
    ASSERT_FALSE(hg.cpu_plans.rows.empty()) << c.id() << ": some rows should be split";
    if (c.pattern == "bpt") ASSERT_GT(hg.cpu_plans.rows.n_tiles(), 0) << c.id() << ": column tiles expected";
    if (c.pattern == "hub") ASSERT_FALSE(hg.cpu_plans.sources.empty()) << c.id() << ": source 0 should be split";
    for (bool rel : {false, true}) {
      GsaCase cr = c;
      cr.rel = rel;
      const RefProblem p = make_problem(cr, *g);
      const std::vector<double> d_o = make_d_o(cr, *g);
      HostMemory m1, m2;
      const GsaRunOutputs kept = run_on_backend(backend(), *g, p, d_o, GsaDtype::f32, m1, true);
      const GsaRunOutputs made = run_on_backend(backend(), *g, p, d_o, GsaDtype::f32, m2, false);
      const std::string what = cr.id() + " on " + where();
      EXPECT_TRUE(same_bits(kept.o, made.o)) << what << " o";
      EXPECT_TRUE(same_bits(kept.dq, made.dq)) << what << " dq";
      EXPECT_TRUE(same_bits(kept.dk, made.dk)) << what << " dk";
      EXPECT_TRUE(same_bits(kept.dv, made.dv)) << what << " dv";
      EXPECT_TRUE(same_bits(kept.d_rel, made.d_rel)) << what << " d_rel";
    }
  }
}

// Sets the CPU backward's edge-cache limit for one scope and restores it after.
class EdgeCacheLimit {
 public:
  explicit EdgeCacheLimit(int64_t bytes) : saved_(gsa_cpu_edge_cache_limit()) { gsa_cpu_set_edge_cache_limit(bytes); }
  ~EdgeCacheLimit() { gsa_cpu_set_edge_cache_limit(saved_); }
  EdgeCacheLimit(const EdgeCacheLimit&) = delete;
  EdgeCacheLimit& operator=(const EdgeCacheLimit&) = delete;

 private:
  int64_t saved_;
};

// The backward asks for the edge cache (P and dS of every edge and head) only within the limit: the workspace is
// the d(rel_emb) partials plus B * E * H * 2 elements, or the partials alone when the cache would not fit.
TEST(GsaCpu, EdgeCacheFollowsItsLimit) {
  const Graph g = build_pattern("window", 100, true, {{"w", 8}});
  const GsaHostGraph hg(g);
  const float dummy = 0.0f;
  GsaParams p;
  p.graph = hg.view();
  p.B = 2;
  p.N = 100;
  p.H = 3;
  p.D = 16;
  p.R = hg.n_relations;
  p.rel_emb = &dummy;
  const int64_t partials = std::min<int64_t>(kGsaRelChunks, p.N) * p.R * p.D;
  const int64_t cache = p.B * hg.n_edges() * p.H * 2;
  EXPECT_EQ(gsa_cpu_workspace_elems(p), partials + cache);
  {
    const EdgeCacheLimit limit(cache * 4 - 1);  // fp32: one element short
    EXPECT_EQ(gsa_cpu_workspace_elems(p), partials);
    p.dtype = GsaDtype::f64;
    EXPECT_EQ(gsa_cpu_workspace_elems(p), partials);
  }
  {
    const EdgeCacheLimit limit(cache * 8);  // exactly fp64's size
    EXPECT_EQ(gsa_cpu_workspace_elems(p), partials + cache);
    EXPECT_EQ(cpu_backends().front()->backward_workspace(p).workspace_bytes, (partials + cache) * 8);
  }
}

// With the edge cache off, the pass by source recomputes P and dS: every pattern (relations or not, heavy rows
// split) still matches the reference in fp32 and fp64 and does not depend on the thread count.
TEST_P(GsaCpuTarget, BackwardWithoutEdgeCacheMatchesReference) {
  const GsaBackendScope scope(backend());
  const EdgeCacheLimit off(0);
  for (const std::string& name : pattern_names()) {
    const AttentionPattern& pat = find_pattern(name);
    for (bool rel : {false, true}) {
      const GsaCase c{name, small_params(pat), 300, pat.supports_causal(), 16, 2, 2, rel};
      expect_matches_reference(case_graph(c), c);
    }
  }
}

// Long rows over few relations (every row reads 200 sources under 3 relations): the cores take q . r_rel from a
// per-row relation table and sum dS per relation instead of reading relation rows per edge; outputs and gradients
// (d_rel_emb included) match the reference and do not depend on the thread count.
TEST_P(GsaCpuTarget, LongRowsOverFewRelationsMatchReference) {
  const GsaBackendScope scope(backend());
  const int64_t n = 300, reach = 200;
  GraphBuilder b(n, false);
  const uint16_t rels[3] = {b.relation("near"), b.relation("mid"), b.relation("far")};
  for (int32_t i = 0; i < n; ++i) {
    for (int32_t j = 0; j < reach; ++j) {
      const int32_t src = static_cast<int32_t>((i + 7 * j) % n);
      b.add_edge(src, i, rels[j % 3]);
    }
  }
  const Graph g = b.finish();
  g.validate();
  for (const auto& [D, H] : {std::pair<int64_t, int64_t>{64, 2}, {59, 3}}) {
    const GsaCase c{"few-relations", {}, n, false, D, H, 1, true};
    expect_matches_reference(g, c);
  }
}

// Rows that each read one run of consecutive sources, with a gap between the runs: 16 extra nodes (one aligned group
// of rows, after 128 tokens that attend to themselves), the first 15 reading tokens 0..63, the last 70..79. On AVX2's
// and AVX-512's 16-row groups the union (74 columns) is within the bound, so it is taken from the runs' ends, skipping
// the gap (a skip one column too far fails here); every target matches the reference.
TEST_P(GsaCpuTarget, RunsWithAGapMatchReference) {
  const GsaBackendScope scope(backend());
  const int32_t n = 128;
  GraphBuilder b(n, false);
  const uint16_t self = b.relation("self");
  const uint16_t run = b.relation("run");
  for (int32_t i = 0; i < n; ++i) b.add_edge(i, i, self);
  for (int32_t j = 0; j < 16; ++j) {
    const int32_t u = b.add_node(NodeKind::span, 1, 0, n - 1);
    const int32_t s0 = j < 15 ? 0 : 70, s1 = j < 15 ? 64 : 80;
    for (int32_t s = s0; s < s1; ++s) b.add_edge(s, u, run);
  }
  const Graph g = b.finish();
  g.validate();
  const GsaCase c{"runs-gap", {}, n, false, 32, 2, 1, false};
  if (backend().name() == "cpu:AVX2" || backend().name() == "cpu:SSE4") {
    const GsaHostGraph hg(g);
    EXPECT_GE(gsa_cpu_forward_groups(shape_params(hg, c)).wide_rows, 8)
        << "the extra nodes should run as a wide tile on " << where();
  }
  expect_matches_reference(g, c);
}

// Rows that share most of their sources run as register tiles: window and bigbird as wide tiles (a row per lane, groups
// of 8 or 16 rows) with one table of every relation (or none), bpt k=8 as 4-row tiles with relation terms by column
// (each union column adds its rows' common relation to the key row; only columns whose rows disagree read the table),
// bpt k=64 and bigbird with relations as wide tiles by column (4-row tiles on AVX-512, which keeps wide tiles to those
// with one table); bpt's span nodes as column tiles (pieces of 4 span rows over one block of 32 tokens, merged per row
// afterwards), its lowest span nodes (2 sources each) packed into the lanes together. The backward by destination takes
// the forward's tiles (4-row and wide), relation terms alike (by column: dS summed per relation); window's sources
// take wide tiles in the backward by source, bpt's span sources column tiles (pieces of up to 4 span sources over one
// block of kGsaCpuSourceBlock tokens). Each graph must actually take its tile path on every target with vectors of 4+
// floats, and match the reference in fp32 and fp64 (gradients included) with bits independent of the thread count.
TEST_P(GsaCpuTarget, RowGroupTilesMatchReference) {
  const GsaBackendScope scope(backend());
  struct TileCase {
    GsaCase c;
    bool by_column;  // the 4-row tiles expected take relation terms by column
    enum { kNoWide, kWide, kWideByColumn } wide;  // most rows run as wide tiles (by column: not on AVX-512)
    bool source_tiles = false;  // span sources hold full blocks of kGsaCpuSourceBlock destinations
  };
  const std::vector<TileCase> cases = {
      {{"bpt", {{"k", 8}}, 600, false, 32, 2, 2, true}, true, TileCase::kNoWide},
      {{"bpt", {{"k", 8}}, 600, true, 32, 2, 1, true}, true, TileCase::kNoWide},
      {{"bpt", {{"k", 8}}, 600, false, 32, 2, 1, false}, false, TileCase::kNoWide},
      {{"bpt", {{"k", 64}}, 700, false, 32, 2, 2, true}, true, TileCase::kWideByColumn, true},
      {{"window", {{"w", 128}}, 400, false, 32, 2, 1, false}, false, TileCase::kWide},
      {{"window", {{"w", 128}}, 400, true, 32, 2, 1, true}, false, TileCase::kWide},
      {{"bigbird", {{"b", 16}, {"r", 2}}, 512, false, 32, 2, 1, true}, false, TileCase::kWideByColumn},
  };
  const bool tiles = backend().name() != "cpu:SCALAR" && backend().name() != "cpu:EMU128";
  for (const TileCase& t : cases) {
    const Graph& g = case_graph(t.c);
    const GsaHostGraph hg(g);
    const float dummy = 0.0f;
    GsaParams p = shape_params(hg, t.c);
    p.rel_emb = t.c.rel ? &dummy : nullptr;
    const GsaCpuForwardGroups groups = gsa_cpu_forward_groups(p);
    if (t.source_tiles) {  // the plan depends on the graph alone
      EXPECT_GT(hg.cpu_plans.sources.n_tiles(), 0) << t.c.id() << ": span sources' column tiles expected";
    }
    // bpt's span nodes of 32+ tokens run as column tiles: at least one per block of 32 tokens.
    const int64_t column_tiles = t.c.pattern == "bpt" ? t.c.n / kGsaCpuColumnBlock : 0;
    if (tiles) {  // tiles covering at least 3/4 of the tokens
      const int64_t tiled = 4 * (t.by_column ? groups.tiles_by_column : groups.tiles) + groups.wide_rows;
      EXPECT_GE(tiled, t.c.n * 3 / 4) << t.c.id() << " on " << where();
      const bool avx512 = backend().name() == "cpu:AVX3" || backend().name().rfind("cpu:AVX3_", 0) == 0;
      if (t.wide == TileCase::kWide || (t.wide == TileCase::kWideByColumn && !avx512)) {
        EXPECT_GE(groups.wide_rows, t.c.n / 2) << t.c.id() << " on " << where();
      }
      EXPECT_GE(groups.column_tiles, column_tiles) << t.c.id() << " on " << where();
      EXPECT_EQ(groups.column_tiles_per_row, 0) << t.c.id() << " on " << where();
      // level 1: n/2 span nodes of 2 sources, 4 to a group
      if (t.c.pattern == "bpt") EXPECT_GE(groups.packed, t.c.n / 8) << t.c.id() << " on " << where();
    } else {
      EXPECT_EQ(groups.tiles + groups.tiles_by_column + groups.column_tiles + groups.wide_tiles, 0)
          << t.c.id() << " on " << where();
      EXPECT_GE(groups.column_tiles_per_row, column_tiles) << t.c.id() << " on " << where();
    }
    expect_matches_reference(g, t.c);
  }
}

// The kernels' vector exp: finite arguments to within fp32 / fp64 rounding of std::exp, NaN -> NaN, +inf and
// arguments past the largest finite result -> +inf, -inf and large negative arguments -> 0; tails shorter than a
// vector included (n = 37).
TEST_P(GsaCpuTarget, VectorExpIsDefinedForEveryInput) {
  const GsaBackendScope scope(backend());
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
    const std::string at = "exp(" + std::to_string(x) + ") on " + where();
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
  const GsaBackendScope scope(backend());
  const GsaCase c{"window", {{"w", 3}}, 40, true, 16, 1, 1, false};
  const Graph g = build_pattern("window", c.n, c.causal, c.params);
  for (double bad : {std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity()}) {
    RefProblem p = make_problem(c, g);
    const RefResult clean = reference_attention(p, DenseMask(g), {});
    const int64_t row = 20;
    p.q[static_cast<size_t>(row * c.D)] = bad;
    const GsaRunOutputs out = run(g, p, {}, GsaDtype::f32);
    for (int64_t u = 0; u < c.n; ++u) {
      for (int64_t d = 0; d < c.D; ++d) {
        const double x = out.o[static_cast<size_t>(u * c.D + d)];
        if (u == row) {
          EXPECT_TRUE(std::isnan(x)) << "row " << u << " with q = " << bad << " on " << where();
        } else {
          EXPECT_NEAR(x, clean.o[static_cast<size_t>(u * c.D + d)], 1e-5) << "row " << u << " on " << where();
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
  EXPECT_EQ(find_gsa_backend("cpu:no-such-target"), nullptr);  // pinning such a target: PinningSelectsAndRejects
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

// CUDA backends when the build has CUDA: tensor-core tiles ("cuda:tc", the default), lane groups ("cuda") and one warp
// per edge ("cuda:warp"); SB_CUDA_KERNELS and a scope choose between them, and a wrong value is refused by name.
TEST(GsaBackends, CudaKernelsChosenByEnvironmentAndScope) {
  const GsaBackend* groups = find_gsa_backend("cuda");
  const GsaBackend* warp = find_gsa_backend("cuda:warp");
  const GsaBackend* tc = find_gsa_backend("cuda:tc");
  if (groups == nullptr) {
    EXPECT_EQ(warp, nullptr);
    EXPECT_EQ(tc, nullptr);
    EXPECT_EQ(gsa_backend_for(GsaDevice::cuda), nullptr);
    GTEST_SKIP() << "this build has no CUDA kernels";
  }
  ASSERT_NE(warp, nullptr);
  ASSERT_NE(tc, nullptr);
  const char* saved = std::getenv("SB_CUDA_KERNELS");
  const std::string before = saved != nullptr ? saved : "";
  unsetenv("SB_CUDA_KERNELS");
  EXPECT_EQ(gsa_backend_for(GsaDevice::cuda), tc);
  setenv("SB_CUDA_KERNELS", "groups", 1);
  EXPECT_EQ(gsa_backend_for(GsaDevice::cuda), groups);
  setenv("SB_CUDA_KERNELS", "warp", 1);
  EXPECT_EQ(gsa_backend_for(GsaDevice::cuda), warp);
  {
    const GsaBackendScope scope(*groups);
    EXPECT_EQ(gsa_backend_for(GsaDevice::cuda), groups);
  }
  EXPECT_EQ(gsa_backend_for(GsaDevice::cuda), warp);
  setenv("SB_CUDA_KERNELS", "tc", 1);
  EXPECT_EQ(gsa_backend_for(GsaDevice::cuda), tc);
  setenv("SB_CUDA_KERNELS", "fast", 1);
  expect_error([] { gsa_backend_for(GsaDevice::cuda); },
               "SB_CUDA_KERNELS=fast: expected tc (tensor-core tiles where they apply, the default), groups (lane "
               "groups throughout) or warp (one warp per edge)");
  if (before.empty()) unsetenv("SB_CUDA_KERNELS");
  else setenv("SB_CUDA_KERNELS", before.c_str(), 1);
}

// The online softmax the kernels share: pushing edges one by one, in blocks, or pushing two disjoint halves (in any
// order, one possibly empty) and merging them, gives the row's max, normaliser and weighted sum of values.
TEST(GsaMath, PushAndMergeGiveTheRowsSoftmax) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<double> dist(-30.0, 30.0);
  // A row of n edges: each edge's score, then its value.
  auto draw_row = [&](int n, std::vector<double>& s, std::vector<double>& val) {
    s.resize(static_cast<size_t>(n));
    val.resize(static_cast<size_t>(n));
    for (size_t i = 0; i < s.size(); ++i) {
      s[i] = dist(rng);
      val[i] = dist(rng);
    }
  };
  for (int trial = 0; trial < 50; ++trial) {
    const int n = 1 + trial % 17;
    std::vector<double> s, val;
    draw_row(n, s, val);
    double m = -std::numeric_limits<double>::infinity(), l = 0, sum = 0;
    for (double x : s) m = std::max(m, x);
    for (int i = 0; i < n; ++i) {
      l += std::exp(s[static_cast<size_t>(i)] - m);
      sum += std::exp(s[static_cast<size_t>(i)] - m) * val[static_cast<size_t>(i)];
    }
    // Push [lo, hi) into a state and its accumulator.
    auto push = [&](int lo, int hi, double& acc) {
      GsaSoftmaxState<double> st = gsa_softmax_init<double>();
      acc = 0;
      for (int i = lo; i < hi; ++i) {
        const GsaPush<double> f = gsa_push(st, s[static_cast<size_t>(i)]);
        acc = acc * f.alpha + f.weight * val[static_cast<size_t>(i)];
      }
      return st;
    };
    double acc_all = 0;
    const GsaSoftmaxState<double> all = push(0, n, acc_all);
    EXPECT_EQ(all.m, m);
    EXPECT_NEAR(all.l, l, 1e-12 * l);
    EXPECT_NEAR(acc_all / all.l, sum / l, 1e-9 * (1 + std::abs(sum / l)));
    const int cut = trial % (n + 1);  // 0 or n: one side saw nothing
    for (bool swap : {false, true}) {
      double acc_a = 0, acc_b = 0;
      GsaSoftmaxState<double> a = push(swap ? cut : 0, swap ? n : cut, acc_a);
      const GsaSoftmaxState<double> b = push(swap ? 0 : cut, swap ? cut : n, acc_b);
      const GsaMerge<double> f = gsa_merge(a, b);
      const double acc = acc_a * f.self + acc_b * f.other;
      EXPECT_EQ(a.m, m) << "trial " << trial;
      EXPECT_NEAR(a.l, l, 1e-12 * l) << "trial " << trial;
      EXPECT_NEAR(acc / a.l, sum / l, 1e-9 * (1 + std::abs(sum / l))) << "trial " << trial;
      EXPECT_NEAR(gsa_lse(a), m + std::log(l), 1e-12 * (1 + std::abs(m)));
    }
  }
  // Pushing blocks of 3 edges (the last one short: skipped entries) gives the same row.
  for (int trial = 0; trial < 20; ++trial) {
    const int n = 1 + trial % 8;
    std::vector<double> s, val;
    draw_row(n, s, val);
    GsaSoftmaxState<double> one = gsa_softmax_init<double>(), block = gsa_softmax_init<double>();
    double acc_one = 0, acc_block = 0;
    for (int i = 0; i < n; ++i) {
      const GsaPush<double> f = gsa_push(one, s[static_cast<size_t>(i)]);
      acc_one = acc_one * f.alpha + f.weight * val[static_cast<size_t>(i)];
    }
    for (int i0 = 0; i0 < n; i0 += 3) {
      double sb[3], w[3];
      bool valid[3];
      for (int j = 0; j < 3; ++j) {
        valid[j] = i0 + j < n;
        sb[j] = valid[j] ? s[static_cast<size_t>(i0 + j)] : 1e300;  // a skipped entry must not count
      }
      const double alpha = gsa_push_block<3>(block, sb, valid, w);
      acc_block *= alpha;
      for (int j = 0; j < 3; ++j) acc_block += valid[j] ? w[j] * val[static_cast<size_t>(i0 + j)] : 0.0;
      for (int j = 0; j < 3; ++j) {
        if (!valid[j]) EXPECT_EQ(w[j], 0.0);
      }
    }
    EXPECT_EQ(block.m, one.m) << "trial " << trial;
    EXPECT_NEAR(block.l, one.l, 1e-12 * one.l) << "trial " << trial;
    EXPECT_NEAR(acc_block / block.l, acc_one / one.l, 1e-9 * (1 + std::abs(acc_one / one.l))) << "trial " << trial;
  }
  // Two empty sides stay empty: no NaN from -inf - -inf.
  GsaSoftmaxState<float> a = gsa_softmax_init<float>();
  const GsaMerge<float> f = gsa_merge(a, gsa_softmax_init<float>());
  EXPECT_EQ(f.self, 0.0f);
  EXPECT_EQ(f.other, 0.0f);
  EXPECT_EQ(a.l, 0.0f);
  EXPECT_EQ(gsa_inv_norm(a), 0.0f);
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
