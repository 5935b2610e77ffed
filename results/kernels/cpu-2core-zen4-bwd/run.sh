#!/usr/bin/env bash
# Re-runs results/kernels/cpu-2core-zen4-bwd (README.md there) from the repository root: a build of commit 3d0e77a
# (wide tiles in the forward and, with one relation table, in the backward by destination) against a build with
# the backward's wide tiles by column, the backward by source's wide tiles and the blocked relation gradients, both
# pinned to each of TARGETS, ROUNDS interleaved rounds of 3 repetitions.
set -u
OLD=${OLD:-../old-3d0e77a/build/harness/sparsebench}  # git worktree add ../old-3d0e77a 3d0e77a; cmake; build sparsebench
NEW=${NEW:-build/harness/sparsebench}
OUT=${OUT:-results/kernels/cpu-2core-zen4-bwd}
ROUNDS=${ROUNDS:-3}
TARGETS=${TARGETS:-AVX2 AVX3 SSE4}
F='(bpt.*n=8192|window.*n=8192|bigbird.*n=1024|window.w=64.*n=1024)'
for r in $(seq "$ROUNDS"); do
  for t in $TARGETS; do
    SB_CPU_TARGET=$t "$OLD" bench kernels --benchmark_filter="$F" --benchmark_repetitions=3 --benchmark_format=json > "$OUT/old-$t-r$r.json"
    SB_CPU_TARGET=$t "$NEW" bench kernels --benchmark_filter="$F" --benchmark_repetitions=3 --benchmark_format=json > "$OUT/new-$t-r$r.json"
  done
done
for t in $TARGETS; do
  args=()
  for r in $(seq "$ROUNDS"); do args+=(old="$OUT/old-$t-r$r.json" new="$OUT/new-$t-r$r.json"); done
  python3 benchmarks/summarize_bench.py "${args[@]}" --out "$OUT/summary-$t.md"
done
