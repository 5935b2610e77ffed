#!/usr/bin/env bash
# Re-runs results/kernels/cpu-2core-zen4-coltile (README.md there) from the repository root: the kernels of commit
# 287bbcf (row-group tiles, span nodes per row) against a build with the forward's column tiles, pinned to AVX2,
# ROUNDS interleaved rounds of 3 repetitions.
set -u
OLD=${OLD:-../old-287bbcf/build/harness/sparsebench}  # git worktree add ../old-287bbcf 287bbcf; cmake; build sparsebench
NEW=${NEW:-build/harness/sparsebench}
OUT=${OUT:-results/kernels/cpu-2core-zen4-coltile}
ROUNDS=${ROUNDS:-3}
F='(bpt.*n=8192|window.w=256.*n=8192|bigbird.*n=1024|window.w=64.*n=1024)'
for r in $(seq "$ROUNDS"); do
  for b in old new; do
    bin=$OLD; [ "$b" = new ] && bin=$NEW
    SB_CPU_TARGET=AVX2 "$bin" bench kernels --benchmark_filter="$F" --benchmark_repetitions=3 --benchmark_format=json \
      > "$OUT/$b-AVX2-r$r.json"
  done
done
args=()
for r in $(seq "$ROUNDS"); do args+=(old="$OUT/old-AVX2-r$r.json" new="$OUT/new-AVX2-r$r.json"); done
python3 benchmarks/summarize_bench.py "${args[@]}" --out "$OUT/summary-AVX2.md"
