// CUDA kernel tests without LibTorch: the parity table on every registered CUDA backend, and on the tensor-core
// forward forced on ("cuda:tc", strict: its table rows outside bf16/fp16 without relations are "not supported"),
// against the double reference (fp32, fp64; fp16/bf16 outputs at half-precision tolerance) through device memory;
// relation embeddings on the tensor-core tiles (forced on, whatever SB_CUDA_TC_RELATIONS says) with every output and
// gradient against the reference on the rounded inputs; the forward on 64-row tiles forced on (whatever
// SB_CUDA_TC_ROWS says) against the reference and the 16-row tiles; plus determinism. Skips with a reason when there
// is no CUDA device. Run: ctest -R test_gsa_cuda
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <stdexcept>

#include "kernels/cuda/gsa_cuda.h"
#include "kernels/cuda/gsa_cuda_tc.h"
#include "kernels/gsa_backend.h"
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

// Two runs gave equal outputs and gradients (d_rel_emb included).
void expect_equal_runs(const GsaRunOutputs& a, const GsaRunOutputs& b) {
  EXPECT_EQ(a.o, b.o);
  EXPECT_EQ(a.lse, b.lse);
  EXPECT_EQ(a.dq, b.dq);
  EXPECT_EQ(a.dk, b.dk);
  EXPECT_EQ(a.dv, b.dv);
  EXPECT_EQ(a.d_rel, b.d_rel);
}

class GsaCudaTable : public ::testing::TestWithParam<std::string> {};

TEST_P(GsaCudaTable, EveryBackendMatchesDoubleReference) {
  if (!have_device()) GTEST_SKIP() << "no CUDA device";
  CudaMemory mem;
  for (const std::string& failure : run_backend_table(GetParam(), GsaDevice::cuda, mem)) ADD_FAILURE() << failure;
}

INSTANTIATE_TEST_SUITE_P(AllPatterns, GsaCudaTable, ::testing::ValuesIn(pattern_names()),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

// The tensor-core kernels forced on: dense tiles on wmma (forward, dq, dk and dv), the rest on the lane groups.
class GsaCudaTcTable : public ::testing::TestWithParam<std::string> {};

TEST_P(GsaCudaTcTable, TensorCoreForwardMatchesDoubleReference) {
  if (!have_device()) GTEST_SKIP() << "no CUDA device";
  const std::unique_ptr<GsaBackend> tc = make_gsa_cuda_tc_backend(true);
  CudaMemory mem;
  for (const std::string& failure : run_backend_table(GetParam(), {tc.get()}, mem)) ADD_FAILURE() << failure;
}

INSTANTIATE_TEST_SUITE_P(AllPatterns, GsaCudaTcTable, ::testing::ValuesIn(pattern_names()),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

// Half-precision rows whose gradients are compared too: against the reference on the rounded inputs (rounded_problem),
// so only the kernels' own rounding (P and dS to the input type for the MMAs, outputs) counts; the tolerances the
// tensor-core tests take for half types (outputs as the table, gradients as ManyTiles against the lane groups).
const std::vector<GsaDtypeRows>& half_rows_with_gradients() {
  static const std::vector<GsaDtypeRows> rows = {{GsaDtype::bf16, {5e-2, 3e-2}, false},
                                                 {GsaDtype::f16, {1e-2, 1e-2}, false}};
  return rows;
}

// max |a - b| <= tol * max(max |b|, 1e-3), or what differs.
std::string near(const std::vector<double>& a, const std::vector<double>& b, double tol) {
  const double err = max_abs_diff(a, b), bound = tol * std::max(max_abs(b), 1e-3);
  return err <= bound ? std::string() : "max error " + std::to_string(err) + " > " + std::to_string(bound);
}

// Run a against run b of the same call on other kernels: lse within 1e-3 relative (infinite where b's is), dq, dk and
// dv within grad_tol.
void expect_same_call(const GsaRunOutputs& a, const GsaRunOutputs& b, double grad_tol) {
  ASSERT_EQ(a.lse.size(), b.lse.size());
  for (size_t i = 0; i < a.lse.size(); ++i) {
    if (std::isinf(b.lse[i])) {
      EXPECT_TRUE(std::isinf(a.lse[i])) << "lse " << i;
    } else {
      EXPECT_NEAR(a.lse[i], b.lse[i], 1e-3 * std::max(1.0, std::fabs(b.lse[i]))) << "lse " << i;
    }
  }
  EXPECT_EQ(near(a.dq, b.dq, grad_tol), "") << "dq";
  EXPECT_EQ(near(a.dk, b.dk, grad_tol), "") << "dk";
  EXPECT_EQ(near(a.dv, b.dv, grad_tol), "") << "dv";
}

// Relation embeddings on the tensor-core tiles, forced on: every table row with relations (causal and not, every n, D,
// H, B), bf16 and fp16, o, lse, dq, dk, dv and d_rel_emb against the reference on the rounded inputs. Rows the tiles do
// not take (D = 59) are counted as not supported; prints how many rows ran and how many put edges on tensor cores.
class GsaCudaTcRelationTable : public ::testing::TestWithParam<std::string> {};

TEST_P(GsaCudaTcRelationTable, TensorCoreTilesWithRelationsMatchDoubleReference) {
  if (!have_device()) GTEST_SKIP() << "no CUDA device";
  const std::unique_ptr<GsaBackend> tc = make_gsa_cuda_tc_backend(true, true);
  CudaMemory mem;
  int ran = 0, on_tiles = 0;
  std::map<std::string, int> unsupported;
  for (const GsaCase& c : gsa_case_table(find_pattern(GetParam()))) {
    if (!c.rel) continue;
    const Graph& g = case_graph(c);
    const RefProblem prob = make_problem(c, g);
    ASSERT_GT(prob.R, 0) << c.id() << ": the pattern has relations";
    const std::vector<double> d_o = make_d_o(c, g);
    for (const GsaDtypeRows& rows : half_rows_with_gradients()) {
      const std::string why = tc->unsupported(problem_shape(prob, g, rows.dtype));
      if (!why.empty()) {
        unsupported[why]++;
        continue;
      }
      const RefResult ref =
          reference_attention(rounded_problem(prob, rows.dtype), DenseMask(g), rounded_to(d_o, rows.dtype));
      const GsaRunOutputs run = run_on_backend(*tc, g, prob, d_o, rows.dtype, mem);
      const GsaTcStats forward = gsa_cuda_tc_last_stats(), backward = gsa_cuda_tc_last_stats(true);
      ++ran;
      if (forward.dense_edges > 0) ++on_tiles;
      EXPECT_TRUE(forward.tensor_cores && backward.tensor_cores) << c.id() << ": ran on the lane groups whole";
      EXPECT_EQ(backward.dense_edges, forward.dense_edges) << c.id();
      EXPECT_EQ(compare_run(ref, run, rows), "") << c.id() << " " << gsa_dtype_name(rows.dtype);
    }
  }
  const std::string skipped = unsupported_summary(unsupported);
  std::printf("[ table    ] %s cuda:tc with relations: %d rows ran (%d with edges on tensor cores)%s\n",
              GetParam().c_str(), ran, on_tiles, skipped.empty() ? "" : (", not supported" + skipped).c_str());
  EXPECT_GT(ran, 0) << "no row with relations ran";
}

INSTANTIATE_TEST_SUITE_P(AllPatterns, GsaCudaTcRelationTable, ::testing::ValuesIn(pattern_names()),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

// Graphs of many tiles and unions of several 32-column chunks (window w=128: 143 columns per causal tile; bpt k=4:
// token tiles dense, span-node tiles on the lane groups), every head dimension the tensor cores take, both half
// types: outputs against the reference; lse, dq, dk and dv against the lane groups' (same rounded inputs; the table
// compares no half-precision gradients); two runs and tiles planned per call bitwise equal; the share of edges that ran
// on tensor cores as the planner says.
TEST(GsaCudaTc, ManyTilesMatchReferenceAndLaneGroupsBitwiseRepeatably) {
  if (!have_device()) GTEST_SKIP() << "no CUDA device";
  const std::unique_ptr<GsaBackend> tc = make_gsa_cuda_tc_backend(true);
  const GsaBackend* groups = find_gsa_backend("cuda");
  ASSERT_NE(groups, nullptr);
  struct Graphs {
    std::string pattern;
    Params params;
  };
  for (const Graphs& gr : {Graphs{"window", {{"w", 128}}}, Graphs{"bpt", {{"k", 4}}}}) {
    for (int64_t D : {16, 32, 64, 128}) {
      const GsaCase c{gr.pattern, gr.params, 1025, true, D, 2, 2, false};
      const Graph& g = case_graph(c);
      const RefProblem prob = make_problem(c, g);
      const std::vector<double> d_o = make_d_o(c, g);
      const RefResult ref = reference_attention(prob, DenseMask(g), {});
      for (const GsaDtypeRows& rows : gsa_dtype_rows()) {
        if (rows.dtype != GsaDtype::bf16 && rows.dtype != GsaDtype::f16) continue;
        SCOPED_TRACE(c.id() + " " + gsa_dtype_name(rows.dtype));
        const double grad_tol = rows.dtype == GsaDtype::bf16 ? 3e-2 : 1e-2;
        CudaMemory mem;
        const GsaRunOutputs a = run_on_backend(*tc, g, prob, d_o, rows.dtype, mem);
        const GsaTcStats stats = gsa_cuda_tc_last_stats();
        const GsaTcStats backward_stats = gsa_cuda_tc_last_stats(true);
        const GsaRunOutputs b = run_on_backend(*tc, g, prob, d_o, rows.dtype, mem);
        // Tiles planned per call (a graph that carries none): the same plan, the same bits.
        const GsaRunOutputs per_call = run_on_backend(*tc, g, prob, d_o, rows.dtype, mem, false);
        const GsaTcStats per_call_stats = gsa_cuda_tc_last_stats();
        const GsaRunOutputs lanes = run_on_backend(*groups, g, prob, d_o, rows.dtype, mem);
        EXPECT_EQ(compare_run(ref, a, rows), "");
        {
          SCOPED_TRACE("two runs");
          expect_equal_runs(a, b);
        }
        {
          SCOPED_TRACE("tiles planned per call");
          expect_equal_runs(a, per_call);
        }
        EXPECT_EQ(per_call_stats.dense_edges, stats.dense_edges);
        expect_same_call(a, lanes, grad_tol);
        EXPECT_TRUE(stats.tensor_cores);
        EXPECT_TRUE(backward_stats.tensor_cores);
        EXPECT_EQ(backward_stats.dense_edges, stats.dense_edges);
        EXPECT_EQ(stats.edges, g.n_edges());
        EXPECT_GT(stats.dense_edges, 0);
        if (gr.pattern == "window") EXPECT_EQ(stats.dense_edges, g.n_edges());
        if (gr.pattern == "bpt") EXPECT_LT(stats.dense_edges, g.n_edges());
      }
    }
  }
}

// Relation embeddings on the tiles of many-tile graphs (window w=128: every edge in a dense tile; bpt k=4: token tiles
// dense, span nodes on the lane groups), every D the tensor cores take, both half types: outputs against the reference
// (the forward's, as ManyTiles: the relation table compares gradients with the reference), everything against the lane
// groups ("cuda", same rounded inputs); two runs and tiles planned per call bitwise equal; the statistics say the tiles
// ran (so a silent fall-back to the lane groups fails), and the record's words say relations ran on them.
TEST(GsaCudaTc, ManyTilesWithRelationsMatchReferenceAndLaneGroupsBitwiseRepeatably) {
  if (!have_device()) GTEST_SKIP() << "no CUDA device";
  const std::unique_ptr<GsaBackend> tc = make_gsa_cuda_tc_backend(true, true);
  const GsaBackend* groups = find_gsa_backend("cuda");
  ASSERT_NE(groups, nullptr);
  struct Graphs {
    std::string pattern;
    Params params;
  };
  for (const Graphs& gr : {Graphs{"window", {{"w", 128}}}, Graphs{"bpt", {{"k", 4}}}}) {
    for (int64_t D : {16, 32, 64, 128}) {
      const GsaCase c{gr.pattern, gr.params, 1025, true, D, 2, 2, true};
      const Graph& g = case_graph(c);
      const RefProblem prob = make_problem(c, g);
      ASSERT_GT(prob.R, 0);
      const std::vector<double> d_o = make_d_o(c, g);
      const RefResult ref = reference_attention(prob, DenseMask(g), {});
      for (const GsaDtypeRows& rows : half_rows_with_gradients()) {
        SCOPED_TRACE(c.id() + " " + gsa_dtype_name(rows.dtype));
        CudaMemory mem;
        const GsaRunOutputs a = run_on_backend(*tc, g, prob, d_o, rows.dtype, mem);
        const GsaTcStats stats = gsa_cuda_tc_last_stats();
        const GsaTcStats backward_stats = gsa_cuda_tc_last_stats(true);
        const std::string words = tc->last_call();
        const GsaRunOutputs b = run_on_backend(*tc, g, prob, d_o, rows.dtype, mem);
        const GsaRunOutputs per_call = run_on_backend(*tc, g, prob, d_o, rows.dtype, mem, false);
        const GsaTcStats per_call_stats = gsa_cuda_tc_last_stats();
        const GsaRunOutputs lanes = run_on_backend(*groups, g, prob, d_o, rows.dtype, mem);
        for (const GsaDtypeRows& table_rows : gsa_dtype_rows()) {  // the table's half-type rows: outputs only
          if (table_rows.dtype == rows.dtype) EXPECT_EQ(compare_run(ref, a, table_rows), "");
        }
        {
          SCOPED_TRACE("two runs");
          expect_equal_runs(a, b);
        }
        {
          SCOPED_TRACE("tiles planned per call");
          expect_equal_runs(a, per_call);
        }
        EXPECT_EQ(per_call_stats.dense_edges, stats.dense_edges);
        const double grad_tol = rows.tol.grad_tol;
        expect_same_call(a, lanes, grad_tol);
        EXPECT_EQ(near(a.o, lanes.o, rows.tol.out_tol), "") << "o";
        EXPECT_EQ(near(a.d_rel, lanes.d_rel, grad_tol), "") << "d_rel_emb";
        EXPECT_TRUE(stats.tensor_cores);
        EXPECT_TRUE(backward_stats.tensor_cores);
        EXPECT_EQ(backward_stats.dense_edges, stats.dense_edges);
        EXPECT_EQ(stats.edges, g.n_edges());
        EXPECT_GT(stats.dense_edges, 0);
        if (gr.pattern == "window") EXPECT_EQ(stats.dense_edges, g.n_edges());
        if (gr.pattern == "bpt") EXPECT_LT(stats.dense_edges, g.n_edges());
        EXPECT_NE(words.find("relation embeddings on the tiles too"), std::string::npos) << words;
      }
    }
  }
}

// Options of 64-row plans: the default density rule, and a lower floor that puts bpt's token tiles (density ~0.19 in
// 64-row tiles) on the 64-row kernel.
GsaTileOptions wide_options(double min_density = GsaTileOptions{}.min_density) {
  GsaTileOptions o;
  o.min_density = min_density;
  o.rows = kGsaWideTileRows;
  return o;
}

// The forward on 64-row tiles forced on (prepared 64-row tiles, and tiles planned per call with 64 rows, whatever
// SB_CUDA_TC_ROWS says): every table row without relations, bf16 and fp16, o, lse and (the backward on 16-row tiles
// after it) dq, dk, dv against the reference on the rounded inputs; the statistics say the plan had 64 rows. Prints
// how many rows ran and how many ran 64-row tiles (a pattern may have none at the density rule).
class GsaCudaTcWideTable : public ::testing::TestWithParam<std::string> {};

TEST_P(GsaCudaTcWideTable, TensorCoreForwardOn64RowTilesMatchesDoubleReference) {
  if (!have_device()) GTEST_SKIP() << "no CUDA device";
  const std::unique_ptr<GsaBackend> tc = make_gsa_cuda_tc_backend(true, false, kGsaWideTileRows);
  CudaMemory mem;
  int ran = 0, on_wide = 0;
  std::map<std::string, int> unsupported;
  for (const GsaCase& c : gsa_case_table(find_pattern(GetParam()))) {
    if (c.rel) continue;
    const Graph& g = case_graph(c);
    const RefProblem prob = make_problem(c, g);
    const std::vector<double> d_o = make_d_o(c, g);
    for (const GsaDtypeRows& rows : half_rows_with_gradients()) {
      const std::string why = tc->unsupported(problem_shape(prob, g, rows.dtype));
      if (!why.empty()) {
        unsupported[why]++;
        continue;
      }
      const RefResult ref =
          reference_attention(rounded_problem(prob, rows.dtype), DenseMask(g), rounded_to(d_o, rows.dtype));
      for (bool prepared : {true, false}) {
        SCOPED_TRACE(c.id() + " " + gsa_dtype_name(rows.dtype) + (prepared ? " prepared" : " planned per call"));
        const GsaRunOutputs run = run_on_backend(*tc, g, prob, d_o, rows.dtype, mem, prepared, wide_options());
        const GsaTcStats forward = gsa_cuda_tc_last_stats(), backward = gsa_cuda_tc_last_stats(true);
        ++ran;
        if (forward.wide_tiles > 0) ++on_wide;
        EXPECT_TRUE(forward.tensor_cores && backward.tensor_cores) << "ran on the lane groups whole";
        EXPECT_EQ(forward.tile_rows, kGsaWideTileRows);
        EXPECT_EQ(backward.tile_rows, kGsaTileRows);
        EXPECT_LE(forward.wide_tiles, forward.dense_tiles);
        EXPECT_EQ(compare_run(ref, run, rows), "");
      }
    }
  }
  const std::string skipped = unsupported_summary(unsupported);
  std::printf("[ table    ] %s cuda:tc 64-row tiles: %d runs (%d with 64-row tiles)%s\n", GetParam().c_str(), ran,
              on_wide, skipped.empty() ? "" : (", not supported" + skipped).c_str());
  EXPECT_GT(ran, 0) << "no row ran";
}

INSTANTIATE_TEST_SUITE_P(AllPatterns, GsaCudaTcWideTable, ::testing::ValuesIn(pattern_names()),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

// 64-row tiles on graphs of many tiles: window w=128 (every tile a 64-row tile, 191-column unions) and bpt k=4 (token
// tiles as 64-row tiles at density floor 0.15, span nodes on the lane groups), n = 1025 and 4096, every head dimension
// the tensor cores take, both half types: outputs against the reference; o, lse, dq, dk, dv against the 16-row path
// (same rounded inputs); two runs bitwise equal, and for window tiles planned per call too; the statistics say the
// 64-row kernel ran (so a silent fall-back to 16-row tiles or the lane groups fails).
TEST(GsaCudaTc, WideTilesMatchReferenceAnd16RowTilesBitwiseRepeatably) {
  if (!have_device()) GTEST_SKIP() << "no CUDA device";
  const std::unique_ptr<GsaBackend> tc64 = make_gsa_cuda_tc_backend(true, false, kGsaWideTileRows);
  const std::unique_ptr<GsaBackend> tc16 = make_gsa_cuda_tc_backend(true, false, kGsaTileRows);
  struct Graphs {
    std::string pattern;
    Params params;
    double min_density;
  };
  for (const Graphs& gr : {Graphs{"window", {{"w", 128}}, GsaTileOptions{}.min_density},
                           Graphs{"bpt", {{"k", 4}}, 0.15}}) {
    for (int64_t n : {1025, 4096}) {
      for (int64_t D : {16, 32, 64, 128}) {
        if (n == 4096 && (D == 16 || D == 32)) continue;  // the reference's CPU time
        const GsaCase c{gr.pattern, gr.params, n, true, D, 2, 2, false};
        const Graph& g = case_graph(c);
        const RefProblem prob = make_problem(c, g);
        const std::vector<double> d_o = make_d_o(c, g);
        const RefResult ref = reference_attention(prob, DenseMask(g), {});
        for (const GsaDtypeRows& rows : gsa_dtype_rows()) {
          if (rows.dtype != GsaDtype::bf16 && rows.dtype != GsaDtype::f16) continue;
          SCOPED_TRACE(c.id() + " " + gsa_dtype_name(rows.dtype));
          const double grad_tol = rows.dtype == GsaDtype::bf16 ? 3e-2 : 1e-2;
          const GsaTileOptions wide = wide_options(gr.min_density);
          CudaMemory mem;
          const GsaRunOutputs a = run_on_backend(*tc64, g, prob, d_o, rows.dtype, mem, true, wide);
          const GsaTcStats stats = gsa_cuda_tc_last_stats();
          const GsaTcStats backward_stats = gsa_cuda_tc_last_stats(true);
          const GsaRunOutputs b = run_on_backend(*tc64, g, prob, d_o, rows.dtype, mem, true, wide);
          const GsaRunOutputs narrow = run_on_backend(*tc16, g, prob, d_o, rows.dtype, mem, true, GsaTileOptions{});
          const GsaTcStats narrow_stats = gsa_cuda_tc_last_stats();
          EXPECT_EQ(compare_run(ref, a, rows), "");
          {
            SCOPED_TRACE("two runs");
            expect_equal_runs(a, b);
          }
          if (gr.pattern == "window") {  // per call: the default rule, the same plan as prepared
            SCOPED_TRACE("tiles planned per call");
            const GsaRunOutputs per_call = run_on_backend(*tc64, g, prob, d_o, rows.dtype, mem, false);
            const GsaTcStats per_call_stats = gsa_cuda_tc_last_stats();
            expect_equal_runs(a, per_call);
            EXPECT_EQ(per_call_stats.wide_tiles, stats.wide_tiles);
          }
          EXPECT_TRUE(stats.tensor_cores);
          EXPECT_EQ(stats.tile_rows, kGsaWideTileRows);
          EXPECT_GT(stats.wide_tiles, 0) << "the 64-row kernel did not run";
          EXPECT_EQ(narrow_stats.tile_rows, kGsaTileRows);
          EXPECT_EQ(narrow_stats.wide_tiles, 0);
          EXPECT_EQ(stats.edges, g.n_edges());
          if (gr.pattern == "window") {
            EXPECT_EQ(stats.wide_tiles, (n + kGsaWideTileRows - 1) / kGsaWideTileRows);
            EXPECT_EQ(stats.dense_edges, g.n_edges());
          }
          if (gr.pattern == "bpt") EXPECT_LT(stats.dense_edges, g.n_edges());
          EXPECT_EQ(near(a.o, narrow.o, rows.tol.out_tol), "") << "o";
          expect_same_call(a, narrow, grad_tol);
          EXPECT_TRUE(backward_stats.tensor_cores);
          EXPECT_EQ(backward_stats.tile_rows, kGsaTileRows);
        }
      }
    }
  }
}

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
      expect_equal_runs(a, b);
    }
  }
}

// The default CUDA backend refuses head dimensions outside its range with the reason, before any launch.
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
    EXPECT_EQ(std::string(e.what()), "graph_attention: " + cuda->name() + " does not support " + why);
  }
}

// The strict tensor-core backend names why it leaves a call (no device needed: shapes and dtype only).
TEST(GsaCudaTc, RefusesWhatTheTensorCoresDoNotTakeWithTheReason) {
  const std::unique_ptr<GsaBackend> tc = make_gsa_cuda_tc_backend(true, false);  // relations switched off
  const std::unique_ptr<GsaBackend> lenient = make_gsa_cuda_tc_backend(false, false);
  GsaParams p;
  p.B = p.N = p.H = 1;
  p.D = 64;
  p.dtype = GsaDtype::bf16;
  EXPECT_EQ(tc->unsupported(p), "");
  p.dtype = GsaDtype::f32;
  EXPECT_EQ(tc->unsupported(p), "dtype float32 (the tensor-core forward takes float16 and bfloat16)");
  EXPECT_EQ(lenient->unsupported(p), "");  // SB_CUDA_KERNELS=tc: the lane groups take it
  p.dtype = GsaDtype::f64;
  EXPECT_EQ(tc->unsupported(p), "dtype float64 (the tensor-core forward takes float16 and bfloat16)");
  p.dtype = GsaDtype::f16;
  p.R = 3;
  EXPECT_EQ(tc->unsupported(p), "relation embeddings (the tensor-core forward takes none)");
  EXPECT_EQ(lenient->unsupported(p), "");  // the lane groups take it
  p.R = 0;
  p.D = 59;
  EXPECT_EQ(tc->unsupported(p), "head dimension D = 59 (the tensor-core forward takes 16, 32, 64 and 128)");
  EXPECT_EQ(lenient->unsupported(p), "");
  try {
    tc->forward(p, nullptr);
    ADD_FAILURE() << "expected sb::Error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "graph_attention: cuda:tc does not support head dimension D = 59 (the "
                                     "tensor-core forward takes 16, 32, 64 and 128)");
  }
}

// Relation embeddings reach the tiles only when switched on (SB_CUDA_TC_RELATIONS=1, or forced as the tables force
// it); switched off, the strict backend refuses them with today's reason and the lenient one leaves them to the lane
// groups. No device needed.
TEST(GsaCudaTc, RelationsRunOnTheTilesOnlyWhenSwitchedOn) {
  GsaParams p;
  p.B = p.N = p.H = 1;
  p.D = 64;
  p.dtype = GsaDtype::bf16;
  p.R = 3;
  const std::string off = "relation embeddings (the tensor-core forward takes none)";
  EXPECT_EQ(gsa_cuda_tc_unsupported(p, false), off);
  EXPECT_EQ(gsa_cuda_tc_unsupported(p, true), "");
  EXPECT_EQ(make_gsa_cuda_tc_backend(true, false)->unsupported(p), off);
  EXPECT_EQ(make_gsa_cuda_tc_backend(true, true)->unsupported(p), "");
  // Unset: as the environment says (off unless SB_CUDA_TC_RELATIONS=1).
  EXPECT_EQ(make_gsa_cuda_tc_backend(true)->unsupported(p), gsa_cuda_tc_relations_enabled() ? "" : off);
  EXPECT_EQ(gsa_cuda_tc_unsupported(p), gsa_cuda_tc_relations_enabled() ? "" : off);
  // Other reasons still hold with relations on.
  p.D = 59;
  EXPECT_EQ(gsa_cuda_tc_unsupported(p, true), "head dimension D = 59 (the tensor-core forward takes 16, 32, 64 and 128)");
  // The switch's values.
  EXPECT_FALSE(gsa_cuda_tc_relations_switch(nullptr));
  EXPECT_FALSE(gsa_cuda_tc_relations_switch(""));
  EXPECT_FALSE(gsa_cuda_tc_relations_switch("0"));
  EXPECT_TRUE(gsa_cuda_tc_relations_switch("1"));
  try {
    gsa_cuda_tc_relations_switch("yes");
    ADD_FAILURE() << "expected sb::Error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "SB_CUDA_TC_RELATIONS=yes: expected 1 (relation embeddings on the tensor-core "
                                     "tiles) or 0 (calls with relation embeddings on the lane groups, the default)");
  }
}

}  // namespace
}  // namespace sb::test
