#!/usr/bin/env bash
# Re-runs results/kernels/cpu-2core-zen4-hostblocks (README.md there) from the repository root: one build, its large
# host blocks mapped per call (SB_HOST_BLOCK_CACHE=0, "plain") against kept for reuse ("cached"), pinned to AVX2,
# ROUNDS interleaved rounds of 3 repetitions.
set -u
BIN=${BIN:-build/harness/sparsebench}
OUT=${OUT:-results/kernels/cpu-2core-zen4-hostblocks}
ROUNDS=${ROUNDS:-3}
F='(bpt.*n=8192|window.w=256.*n=8192|bigbird.*n=1024|window.w=64.*n=1024)'
for r in $(seq "$ROUNDS"); do
  for b in plain cached; do
    cache=1; [ "$b" = plain ] && cache=0
    SB_HOST_BLOCK_CACHE=$cache SB_CPU_TARGET=AVX2 "$BIN" bench kernels --benchmark_filter="$F" --benchmark_repetitions=3 \
      --benchmark_format=json > "$OUT/$b-AVX2-r$r.json"
  done
done
args=()
for r in $(seq "$ROUNDS"); do args+=(plain="$OUT/plain-AVX2-r$r.json" cached="$OUT/cached-AVX2-r$r.json"); done
python3 benchmarks/summarize_bench.py "${args[@]}" --out "$OUT/summary-AVX2.md"
