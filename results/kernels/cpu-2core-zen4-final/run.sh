#!/usr/bin/env bash
# Re-runs results/kernels/cpu-2core-zen4-final (README.md there) from the repository root: the kernels of commit
# 6a50d7b (the start of this work) against a build of commit 287bbcf (relation terms by column, per-row tables of a
# row's distinct relations, row blocks in the graph's block order), pinned to AVX2 and AVX3, two interleaved rounds.
set -u
OLD=${OLD:-../old-6a50d7b/build/harness/sparsebench}  # git worktree add ../old-6a50d7b 6a50d7b; cmake; build sparsebench
NEW=${NEW:-build/harness/sparsebench}
OUT=${OUT:-results/kernels/cpu-2core-zen4-final}
F='(bpt.*n=8192|window.*n=8192|bigbird.*n=1024|window.w=64.*n=1024)'
for r in 1 2; do
  for t in AVX2 AVX3; do
    SB_CPU_TARGET=$t "$OLD" bench kernels --benchmark_filter="$F" --benchmark_repetitions=3 --benchmark_format=json > "$OUT/old-$t-r$r.json"
    SB_CPU_TARGET=$t "$NEW" bench kernels --benchmark_filter="$F" --benchmark_repetitions=3 --benchmark_format=json > "$OUT/new-$t-r$r.json"
  done
done
for t in AVX2 AVX3; do
  python3 benchmarks/summarize_bench.py old="$OUT/old-$t-r1.json" old="$OUT/old-$t-r2.json" \
    new="$OUT/new-$t-r1.json" new="$OUT/new-$t-r2.json" --out "$OUT/summary-$t.md"
done
