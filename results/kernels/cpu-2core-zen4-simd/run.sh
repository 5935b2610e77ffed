#!/usr/bin/env bash
# Re-runs results/kernels/cpu-2core-zen4-simd (README.md there) from the repository root: the AVX-512 intrinsics of
# commit 95e6b7c (the last before the Highway cores, built with its default -march=native) against this build's
# Highway cores dispatched to AVX3 and pinned to AVX2, two interleaved rounds of Google Benchmark repetitions.
set -u
OLD=${OLD:-../old95/build/harness/sparsebench}   # git worktree add ../old95 95e6b7c; cmake -DSB_CUDA=OFF; build sparsebench
NEW=${NEW:-build/harness/sparsebench}
OUT=${OUT:-results/kernels/cpu-2core-zen4-simd}
F='(bpt.*n=8192|window.*n=8192|bigbird.*n=1024|window.w=64.*n=1024)'
for r in 1 2; do
  "$OLD" bench kernels --benchmark_filter="$F" --benchmark_repetitions=3 --benchmark_format=json > "$OUT/old-r$r.json"
  SB_CPU_TARGET=AVX3 "$NEW" bench kernels --benchmark_filter="$F" --benchmark_repetitions=3 --benchmark_format=json > "$OUT/avx3-r$r.json"
  SB_CPU_TARGET=AVX2 "$NEW" bench kernels --benchmark_filter="$F" --benchmark_repetitions=3 --benchmark_format=json > "$OUT/avx2-r$r.json"
done
python3 benchmarks/summarize_bench.py old="$OUT/old-r1.json" old="$OUT/old-r2.json" avx3="$OUT/avx3-r1.json" \
  avx3="$OUT/avx3-r2.json" avx2="$OUT/avx2-r1.json" avx2="$OUT/avx2-r2.json" --out "$OUT/summary.md"
