// Forward timing of the lane groups ("cuda") beside the tensor-core forward ("cuda:tc") on one graph, bf16, through
// the plain launchers (no LibTorch): ms per call (CUDA events, after warm-up), tokens/s, the share of edges on tensor
// cores, the host planning time per call, forward+backward times, and the largest output difference between the two.
// With SB_CUDA_TC_ROWS=64 also the forward on 64-row tiles (prepared and per call; the backward on 16-row tiles) and
// its difference from the 16-row tiles'.
// Run: build/tests/kernels/bench_gsa_cuda_tc window w=128 4096 4 [H=8 D=64 iters=20 min_density=0.35
// min_density_64=min_density]
#include <cuda_runtime.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/gsa_cuda_tc.h"
#include "kernels/gsa_backend.h"
#include "kernels/gsa_host_graph.h"
#include "kernels/gsa_tile_plan.h"
#include "patterns/pattern.h"
#include "tests/kernels/gsa_cases.h"

namespace {

void ok(cudaError_t err, const char* what) {
  if (err != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(err));
    std::exit(1);
  }
}

template <typename T>
T* upload(const std::vector<T>& v) {
  T* p = nullptr;
  ok(cudaMalloc(&p, std::max<size_t>(1, v.size() * sizeof(T))), "cudaMalloc");
  if (!v.empty()) ok(cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice), "upload");
  return p;
}

using sb::test::bf16_to_f32;
using sb::test::f32_to_bf16;

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: %s PATTERN PARAM=VALUE|- N B [H] [D] [ITERS] [MIN_DENSITY] [MIN_DENSITY_64]\n",
                 argv[0]);
    return 2;
  }
  const std::string pattern = argv[1];
  sb::Params params;
  if (std::string(argv[2]) != "-") sb::parse_param_assignment(argv[2], params);
  const int64_t n = std::atoll(argv[3]), B = std::atoll(argv[4]);
  const int64_t H = argc > 5 ? std::atoll(argv[5]) : 8, D = argc > 6 ? std::atoll(argv[6]) : 64;
  const int iters = argc > 7 ? std::atoi(argv[7]) : 20;
  sb::GsaTileOptions options;
  if (argc > 8) options.min_density = std::atof(argv[8]);
  const sb::Graph g = sb::build_pattern(pattern, n, true, params);
  const sb::GsaHostGraph hg(g);
  const int64_t N = hg.n_nodes;

  const auto t0 = std::chrono::steady_clock::now();
  const sb::GsaTilePlan plan = sb::gsa_tile_plan(hg.row_ptr.data(), hg.col.data(), N, options);
  const double plan_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  const bool wide = sb::gsa_tile_rows_from_env() == sb::kGsaWideTileRows;  // SB_CUDA_TC_ROWS=64: 64-row runs too
  sb::GsaTileOptions wide_options = options;
  wide_options.rows = sb::kGsaWideTileRows;
  if (argc > 9) wide_options.min_density = std::atof(argv[9]);
  const auto t1 = std::chrono::steady_clock::now();
  const sb::GsaTilePlan wide_plan =
      wide ? sb::gsa_tile_plan(hg.row_ptr.data(), hg.col.data(), N, wide_options) : sb::GsaTilePlan{};
  const double wide_plan_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t1).count();

  double executed = 0.0;  // tile elements of the dense tiles (16 rows x union each)
  for (int64_t i = 0; i < plan.n_dense(); ++i) {
    executed += static_cast<double>(sb::kGsaTileRows * (plan.union_ptr[i + 1] - plan.union_ptr[i]));
  }
  sb::GsaParams p;
  p.graph.row_ptr = upload(hg.row_ptr);
  p.graph.col = upload(hg.col);
  p.graph.rel = upload(hg.rel);
  p.graph.t_row_ptr = upload(hg.t_row_ptr);
  p.graph.t_col = upload(hg.t_col);
  p.graph.t_edge = upload(hg.t_edge);
  p.graph.rows = sb::gsa_schedule_view(upload(hg.row_schedule.data), N, hg.row_schedule.n_pieces,
                                       hg.row_schedule.n_split);
  p.graph.srcs = sb::gsa_schedule_view(upload(hg.src_schedule.data), N, hg.src_schedule.n_pieces,
                                       hg.src_schedule.n_split);
  p.graph.n_nodes = N;
  p.graph.n_edges = hg.n_edges();
  p.dtype = sb::GsaDtype::bf16;
  p.B = B;
  p.N = N;
  p.H = H;
  p.D = D;
  p.scale = 1.0 / std::sqrt(static_cast<double>(D));
  const sb::GsaStrides strides{N * H * D, H * D, D};
  p.q_strides = p.k_strides = p.v_strides = p.o_strides = strides;
  std::mt19937_64 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const size_t size = static_cast<size_t>(B * N * H * D);
  std::vector<uint16_t> x(size);
  for (auto& e : x) e = f32_to_bf16(normal(rng));
  p.q = upload(x);
  for (auto& e : x) e = f32_to_bf16(normal(rng));
  p.k = upload(x);
  for (auto& e : x) e = f32_to_bf16(normal(rng));
  p.v = upload(x);
  uint16_t* o = nullptr;
  float* lse = nullptr;
  ok(cudaMalloc(&o, size * 2), "o");
  ok(cudaMalloc(&lse, static_cast<size_t>(B * N * H) * 4), "lse");
  p.o = o;
  p.lse = lse;

  const sb::GsaBackend* lanes = sb::find_gsa_backend("cuda");
  // Per-call plans with 16 and 64 rows whatever SB_CUDA_TC_ROWS says.
  const std::unique_ptr<sb::GsaBackend> tc = sb::make_gsa_cuda_tc_backend(false, std::nullopt, sb::kGsaTileRows);
  const std::unique_ptr<sb::GsaBackend> tc64 =
      sb::make_gsa_cuda_tc_backend(false, std::nullopt, sb::kGsaWideTileRows);
  const int64_t ws = lanes->forward_workspace_bytes(p);
  void* workspace = nullptr;
  ok(cudaMalloc(&workspace, std::max<int64_t>(1, ws)), "workspace");
  p.workspace = workspace;
  p.workspace_bytes = ws;

  std::printf("%s %s causal n=%lld nodes=%lld edges=%lld B=%lld H=%lld D=%lld bf16: %lld of %lld tiles dense, "
              "%.1f%% of edges on tensor cores (min density %.2f, their density %.2f), host plan %.2f ms\n",
              pattern.c_str(), argv[2], static_cast<long long>(n), static_cast<long long>(N),
              static_cast<long long>(hg.n_edges()), static_cast<long long>(B), static_cast<long long>(H),
              static_cast<long long>(D), static_cast<long long>(plan.n_dense()), static_cast<long long>(plan.n_tiles),
              100.0 * static_cast<double>(plan.dense_edges) / std::max<double>(1.0, static_cast<double>(hg.n_edges())),
              options.min_density, static_cast<double>(plan.dense_edges) / std::max<double>(1.0, executed), plan_ms);
  // The dense tiles a prepared graph carries (TorchGraph::from_host on CUDA), and none (planned per call).
  const sb::GsaPackedTiles packed =
      sb::gsa_pack_tiles(plan, hg.row_schedule.data, hg.row_schedule.n_pieces, hg.row_schedule.n_split);
  const sb::GsaTileView prepared = sb::gsa_tile_view(upload(packed.data), packed);
  const sb::GsaPackedTiles src_packed =
      sb::gsa_pack_tiles(sb::gsa_tile_plan(hg.t_row_ptr.data(), hg.t_col.data(), N, options), hg.src_schedule.data,
                         hg.src_schedule.n_pieces, hg.src_schedule.n_split);
  const sb::GsaTileView src_prepared = sb::gsa_tile_view(upload(src_packed.data), src_packed);
  sb::GsaTileView wide_prepared;
  if (wide) {
    const sb::GsaPackedTiles wide_packed =
        sb::gsa_pack_tiles(wide_plan, hg.row_schedule.data, hg.row_schedule.n_pieces, hg.row_schedule.n_split);
    wide_prepared = sb::gsa_tile_view(upload(wide_packed.data), wide_packed);
    std::printf("  64-row plan (min density %.2f): %lld of %lld 64-row tiles dense, %lld 16-row tiles after them, %.1f%% "
                "of edges on tensor cores, host plan %.2f ms\n", wide_options.min_density,
                static_cast<long long>(wide_plan.n_wide),
                static_cast<long long>(wide_plan.n_tiles),
                static_cast<long long>(wide_plan.n_dense() - wide_plan.n_wide),
                100.0 * static_cast<double>(wide_plan.dense_edges) /
                    std::max<double>(1.0, static_cast<double>(hg.n_edges())),
                wide_plan_ms);
  }
  std::vector<std::vector<uint16_t>> outs;
  struct Run {
    const sb::GsaBackend* backend;
    const char* what;
    bool tiles;
    bool wide;  // the forward on 64-row tiles (prepared ones with `tiles`)
  };
  std::vector<Run> runs = {Run{lanes, "", false, false}, Run{tc.get(), "prepared", true, false},
                           Run{tc.get(), "per call", false, false}};
  if (wide) {
    runs.push_back(Run{tc64.get(), "64 prep.", true, true});
    runs.push_back(Run{tc64.get(), "64 call", false, true});
  }
  for (const Run& run : runs) {
    const sb::GsaBackend* b = run.backend;
    p.graph.tiles = run.tiles ? prepared : sb::GsaTileView{};
    p.graph.src_tiles = run.tiles ? src_prepared : sb::GsaTileView{};
    p.graph.wide_tiles = run.tiles && run.wide ? wide_prepared : sb::GsaTileView{};
    for (int i = 0; i < 3; ++i) b->forward(p, nullptr);
    ok(cudaDeviceSynchronize(), "warm-up");
    cudaEvent_t start, stop;
    cudaEventCreate(&start);
    cudaEventCreate(&stop);
    cudaEventRecord(start);
    for (int i = 0; i < iters; ++i) b->forward(p, nullptr);
    cudaEventRecord(stop);
    ok(cudaEventSynchronize(stop), "timing");
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    ms /= static_cast<float>(iters);
    std::printf("  %-8s %-9s forward %8.3f ms  %8.2fM tokens/s  %7.2f TFLOP/s on edges (4 E H D B)\n",
                b->name().c_str(), run.what, ms, static_cast<double>(B * n) / (ms * 1e3),
                4.0 * static_cast<double>(hg.n_edges() * H * D * B) / (ms * 1e9));
    outs.emplace_back(size);
    ok(cudaMemcpy(outs.back().data(), o, size * 2, cudaMemcpyDeviceToHost), "o to host");
    if (!run.tiles && b != lanes) continue;  // backward per call: the forward's figure says enough
    // Forward + backward (the backward's workspaces as the backend asks).
    const sb::GsaWorkspace need = b->backward_workspace(p);
    sb::GsaParams pb = p;
    pb.d_o = p.v;  // any [B, N, H, D] bf16 tensor serves as the output gradient
    pb.d_o_strides = pb.dq_strides = pb.dk_strides = pb.dv_strides = strides;
    void *dq = nullptr, *dk = nullptr, *dv = nullptr, *delta = nullptr, *bws = nullptr;
    ok(cudaMalloc(&dq, size * 2), "dq");
    ok(cudaMalloc(&dk, size * 2), "dk");
    ok(cudaMalloc(&dv, size * 2), "dv");
    ok(cudaMalloc(&delta, std::max<int64_t>(1, need.delta_bytes)), "delta");
    ok(cudaMalloc(&bws, std::max<int64_t>(1, need.workspace_bytes)), "workspace");
    pb.dq = dq;
    pb.dk = dk;
    pb.dv = dv;
    pb.delta = delta;
    auto step = [&] {
      b->forward(p, nullptr);
      sb::GsaParams q = pb;
      q.workspace = bws;
      q.workspace_bytes = need.workspace_bytes;
      b->backward(q, nullptr);
    };
    for (int i = 0; i < 2; ++i) step();
    ok(cudaDeviceSynchronize(), "warm-up (backward)");
    cudaEventRecord(start);
    for (int i = 0; i < iters; ++i) step();
    cudaEventRecord(stop);
    ok(cudaEventSynchronize(stop), "timing (backward)");
    cudaEventElapsedTime(&ms, start, stop);
    ms /= static_cast<float>(iters);
    std::printf("  %-8s %-9s fwd+bwd %8.3f ms  %8.2fM tokens/s\n", b->name().c_str(), run.what, ms,
                static_cast<double>(B * n) / (ms * 1e3));
    for (void* ptr : {dq, dk, dv, delta, bws}) cudaFree(ptr);
  }
  double diff = 0.0;
  for (size_t i = 0; i < size; ++i) {
    diff = std::max(diff, std::fabs(static_cast<double>(bf16_to_f32(outs[0][i])) - bf16_to_f32(outs[1][i])));
  }
  std::printf("  max |o(cuda) - o(cuda:tc)| = %.3g, per call bitwise equal to prepared: %s\n", diff,
              outs[1] == outs[2] ? "yes" : "NO");
  if (wide) {
    double wide_diff = 0.0;
    for (size_t i = 0; i < size; ++i) {
      wide_diff =
          std::max(wide_diff, std::fabs(static_cast<double>(bf16_to_f32(outs[1][i])) - bf16_to_f32(outs[3][i])));
    }
    std::printf("  max |o(16-row tiles) - o(64-row tiles)| = %.3g, 64-row per call bitwise equal to prepared: %s\n",
                wide_diff, outs[3] == outs[4] ? "yes" : "NO");
  }
  return 0;
}
