#!/usr/bin/env bash
# Re-runs results/kernels/cpu-2core-zen4-wide (README.md there) from the repository root: a build of commit de547ec
# (4-row tiles only; the kernels are those of 4c9f3c7) against a build with the forward's wide tiles, both pinned to
# each of TARGETS, ROUNDS interleaved rounds of 3 repetitions.
set -u
OLD=${OLD:-../old-de547ec/build/harness/sparsebench}  # git worktree add ../old-de547ec de547ec; cmake; build sparsebench
NEW=${NEW:-build/harness/sparsebench}
OUT=${OUT:-results/kernels/cpu-2core-zen4-wide}
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
