#!/usr/bin/env bash
# Re-runs results/train/cpu-2core-zen4-hostblocks (README.md there) from the repository root: the README's default
# 20-minute training run pinned to AVX2, then 300 steps of the same model with --profile.
set -eu
SB=${SB:-build/harness/sparsebench}
DATA=${DATA:-../shared/data/enwik8-head.bin}
OUT=${OUT:-results/train/cpu-2core-zen4-hostblocks}
tmp=$(mktemp -d)
SB_CPU_TARGET=AVX2 "$SB" train --pattern bpt --set k=4 --data "$DATA" --context 512 --minutes 20 --out "$tmp/20min"
SB_CPU_TARGET=AVX2 "$SB" train --pattern bpt --set k=4 --data "$DATA" --context 512 --steps 300 --eval-every 0 \
  --checkpoint-every 0 --no-final-eval --profile --out "$tmp/profile"
cp "$tmp/20min/result.json" "$OUT/result-20min.json"
cp "$tmp/20min/metrics.jsonl" "$OUT/metrics-20min.jsonl"
cp "$tmp/profile/result.json" "$OUT/result-profile.json"
rm -rf "$tmp"
