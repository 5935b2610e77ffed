// CPU graph-attention cores written once over Google Highway and compiled for every SIMD target (SSE4, AVX2,
// AVX-512 on x86-64; NEON on ARM; EMU128 everywhere); gsa_cpu.cpp picks one at run time. fp32 and fp64 share
// the code. Rows (destination rows, or sources in the backward by source) go in groups of kGsaCpuRowGroup and
// their edges in segments of a few chunks of N edges (N = lanes of the target). Per (segment, head, row): the
// chunks' N scores are N dot products over D reduced together by a fixed transpose-add tree (no per-edge
// horizontal sum), then one max, one rescale and one vector-exp pass over the segment, then the accumulation
// with the accumulator held in registers over the whole segment. A group whose rows share most of their sources
// (window, bigbird blocks, bpt's tokens; also sources sharing destinations in the backward) runs instead as a
// register tile over the union of its sources, so each key, value or query row loaded serves all its rows
// (forward_tile, dq_tile, dkv_tile); the forward tile of bpt takes relation terms by column
// (TileRelations::pays_by_column). The forward and both backwards first try groups of one or two vectors' lanes
// of rows (16 on AVX2 and AVX-512, 8 on SSE4 and NEON) as wide tiles (forward_wide, dq_wide, dkv_wide): a row (or
// source) per lane, so scores, dP and the outputs (dq, dk, dv) accumulate as GEMM-like register blocks of broadcast
// key, value, query or dO elements against vectors of rows; groups that do not tile that way run as above. Other
// rows with at least twice as many edges as distinct relations take q . r_rel from a table of their relations
// (row_relations) instead of reading a relation row per edge. The backward by destination can store P and dS of
// every edge and head (the edge cache) for the backward by source.
// Every output element is produced by one fixed sequence of operations that depends only on the graph (row groups,
// and whether a group runs as a tile, are fixed by it), so results are bitwise identical across runs and thread
// counts (they differ between targets, whose lane counts differ).
// The paths, one part each (kernels/cpu/), with what each measured when it came in: new/old time, interleaved
// against the commit before it, B=1, H=8, D=64, n=8192 unless named, 2-core AMD EPYC Zen 4 pinned to AVX2 (records
// and AVX3/SSE4 figures in results/kernels/cpu-2core-zen4-<dir>/, the story in kernels/README.md):
//   gsa_simd_helpers-inl.h  exp, dot groups by transpose tree, register axpy. Against the hand-written AVX-512
//                           intrinsics they replaced, dispatched to AVX3: 0.79-0.99 in 9 of 10 cases (simd).
//   gsa_rows-inl.h          row groups and the per-row forward; per-row tables of a row's relations (colrel).
//   gsa_tiles-inl.h         4-row register tiles over a group's source union: window 256 0.69 fwd, 0.73 fwd+bwd,
//                           bigbird n=1024 0.70/0.76 (tile); relation terms by column: bpt k=4/16/64 fwd
//                           0.77/0.88/0.85 (colrel); the union merged once per call: bpt k=4 0.95 (union).
//   gsa_wide-inl.h          wide tiles, a row per lane: window 256 0.70 fwd, 0.80 fwd+bwd, bigbird 0.70/0.77, bpt
//                           k=16/64 fwd 0.85/0.79 (wide); packed short rows: bpt k=4 fwd 0.94-0.97 (plans).
//   gsa_forward-inl.h       forward drivers: the graph's block order with the above, bpt k=1/4/16/64 fwd
//                           0.77/0.72/0.74/0.87 (final); column tiles of span nodes: bpt k=1/4 fwd 0.87/0.85
//                           (coltile); prefetch of value and next key rows: bpt k=4 0.96-0.98, k=16 0.91-0.96.
//   gsa_backward_dst-inl.h  dq per row, tile and wide tile; the edge cache of P and dS: bpt k=16 0.95-0.97, window
//                           256 0.86-0.87 fwd+bwd (AMD EPYC); wide tiles: bpt k=16/64 0.83/0.78, window 256 0.86
//                           (bwd); relation terms by column in 4-row tiles: bpt k=4 0.95-0.97 (dqcol).
//   gsa_backward_src-inl.h  dk, dv per source, tile and wide tile from the edge cache; runs of consecutive sources:
//                           window 256 0.94 fwd, 0.96 fwd+bwd (runs); column tiles of heavy sources: bpt k=16/64
//                           0.975/0.980 (srctiles).
// Left out: SSSE3 (SSE4 covers the same machines) and SVE, whose sizeless vectors cannot be array elements, which
// the cores' register blocks are (ARM builds run NEON; tests/kernels/cross_compile_aarch64.py checks they compile).
#ifndef HWY_DISABLED_TARGETS
#define HWY_DISABLED_TARGETS (HWY_SSSE3 | HWY_SVE | HWY_SVE2 | HWY_SVE_256 | HWY_SVE2_128)
#endif
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/gsa_cpu_simd.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <hwy/highway.h>

#include "kernels/cpu/gsa_backward_src-inl.h"

HWY_BEFORE_NAMESPACE();
namespace sb {
namespace HWY_NAMESPACE {
namespace {

template <typename T>
void exp_inplace(void* x, int64_t n) {
  const hn::ScalableTag<T> d;
  T* xt = static_cast<T*>(x);
  const int64_t nl = static_cast<int64_t>(hn::Lanes(d));
  int64_t i = 0;
  for (; i + nl <= n; i += nl) hn::StoreU(vexp(d, hn::LoadU(d, xt + i)), d, xt + i);
  if (i < n) {
    HWY_ALIGN T buf[kMaxLanes * 2] = {};
    std::memcpy(buf, xt + i, static_cast<size_t>(n - i) * sizeof(T));
    hn::Store(vexp(d, hn::Load(d, buf)), d, buf);
    std::memcpy(xt + i, buf, static_cast<size_t>(n - i) * sizeof(T));
  }
}

template <typename T>
constexpr GsaCpuCores cores_for() {
  return {forward_rows<T>, forward_piece<T>, delta_rows<T>, dq_rows<T>, dq_piece<T>, dkv_rows<T>, dkv_piece<T>,
          exp_inplace<T>, forward_groups<T>, forward_tile_pieces<T>, group_kind<T>, dq_tile_pieces<T>,
          dkv_tile_pieces<T>};
}

}  // namespace

const GsaCpuTargetCores* target_cores() {
  static const GsaCpuTargetCores cores{hwy::TargetName(HWY_TARGET), cores_for<float>(), cores_for<double>()};
  return &cores;
}

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace sb
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace sb {

HWY_EXPORT(target_cores);

GsaCpuTargetList gsa_cpu_runnable_targets() {
  GsaCpuTargetList list;
#if (HWY_TARGETS & (HWY_TARGETS - 1)) == 0
  list.cores[list.count++] = HWY_STATIC_DISPATCH(target_cores)();
#else
  // Lowest bit first: Highway numbers better targets with lower bits.
  for (int64_t left = hwy::SupportedTargets() & HWY_TARGETS; left != 0; left &= left - 1) {
    const int64_t target = left & -left;
    hwy::ChosenTarget one;  // a private chooser, so picking a target never changes Highway's global choice
    one.Update(target);
    list.cores[list.count++] = HWY_DISPATCH_TABLE(target_cores)[one.GetIndex()]();
  }
#endif
  return list;
}

}  // namespace sb
#endif  // HWY_ONCE
