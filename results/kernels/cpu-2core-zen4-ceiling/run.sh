#!/usr/bin/env bash
# Re-runs results/kernels/cpu-2core-zen4-ceiling (README.md there) from the repository root: graph attention on the
# dense graph beside window 256 and bpt k=4/16/64, and LibTorch's dense attention, three rounds pinned to AVX2 and
# one dispatched to the CPU's best target, Google Benchmark repetitions of 3 each.
set -euo pipefail
BIN=${BIN:-build/harness/sparsebench}
OUT=${OUT:-results/kernels/cpu-2core-zen4-ceiling}
for r in 1 2 3; do
  SB_CPU_TARGET=AVX2 "$BIN" bench kernels --scenario "$OUT/sc_ceiling.json" --benchmark_filter='^fwd' \
    --benchmark_repetitions=3 --benchmark_format=json > "$OUT/avx2-r$r.json"
done
"$BIN" bench kernels --scenario "$OUT/sc_ceiling.json" --benchmark_filter='^fwd' --benchmark_repetitions=3 \
  --benchmark_format=json > "$OUT/avx3-r1.json"
python3 benchmarks/summarize_bench.py avx2="$OUT/avx2-r1.json" avx2="$OUT/avx2-r2.json" avx2="$OUT/avx2-r3.json" \
  avx3="$OUT/avx3-r1.json" --out "$OUT/summary.md"
