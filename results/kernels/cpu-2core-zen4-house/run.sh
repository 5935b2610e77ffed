#!/usr/bin/env bash
# Re-runs results/kernels/cpu-2core-zen4-house (README.md there) from the repository root: the kernels of commit
# 0d8a55f (before the house split) against a build of 652c84a, pinned to AVX3 and AVX2, three interleaved rounds.
set -eu
OLD=${OLD:-../old-0d8a55f/build/harness/sparsebench}  # git worktree add ../old-0d8a55f 0d8a55f; cmake; build sparsebench
NEW=${NEW:-build/harness/sparsebench}
OUT=${OUT:-results/kernels/cpu-2core-zen4-house}
for t in AVX3 AVX2; do
  mkdir -p "$OUT/$t"
  TGT=$t bash scripts/compare_kernels.sh "$OUT/scenario.json" 3 "$OLD" "$NEW" "$OUT/$t" > "$OUT/summary-$t.md"
done
