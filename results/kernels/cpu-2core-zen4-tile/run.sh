#!/usr/bin/env bash
# Re-runs results/kernels/cpu-2core-zen4-tile (README.md there) from the repository root: the per-row cores of commit
# ff08c7c against a build with row-group tiles, both pinned to AVX2 and to AVX3, two interleaved rounds. Run once with
# NEW built at e4ab8cc (every sharing group tiled; TAG=all) and once at the final rule (TAG=final).
set -u
OLD=${OLD:-../old-ff08c7c/build/harness/sparsebench}  # git worktree add ../old-ff08c7c ff08c7c; cmake; build sparsebench
NEW=${NEW:-build/harness/sparsebench}
TAG=${TAG:-final}
OUT=${OUT:-results/kernels/cpu-2core-zen4-tile}
F='(bpt.*n=8192|window.*n=8192|bigbird.*n=1024|window.w=64.*n=1024)'
suffix=$([ "$TAG" = all ] && echo a || echo b)
for r in 1 2; do
  for t in AVX2 AVX3; do
    SB_CPU_TARGET=$t "$OLD" bench kernels --benchmark_filter="$F" --benchmark_repetitions=3 --benchmark_format=json > "$OUT/old-$t-r$r-$suffix.json"
    SB_CPU_TARGET=$t "$NEW" bench kernels --benchmark_filter="$F" --benchmark_repetitions=3 --benchmark_format=json > "$OUT/$TAG-$t-r$r.json"
  done
done
for t in AVX2 AVX3; do
  python3 benchmarks/summarize_bench.py old="$OUT/old-$t-r1-$suffix.json" old="$OUT/old-$t-r2-$suffix.json" \
    "$TAG=$OUT/$TAG-$t-r1.json" "$TAG=$OUT/$TAG-$t-r2.json" --out "$OUT/summary-$TAG-$t.md"
done
