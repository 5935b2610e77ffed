#!/usr/bin/env bash
# The README's default 20-minute run with the kernels pinned to AVX2 and the linear layers on oneDNN (run from the repository root).
set -euo pipefail
out=results/train/cpu-2core-zen4-avx2-onednn-20min
SB_CPU_TARGET=AVX2 ${SB:-build/harness/sparsebench} train --pattern bpt --set k=4 --data ../shared/data/enwik8-head.bin \
  --context 512 --layers 2 --dim 128 --heads 4 --ffn 512 --batch 4 --lr 3e-3 --warmup 100 --dropout 0 --minutes 20 \
  --eval-every 1000 --log-every 500 --out "$out/run" 2>&1 | tee "$out/run.log"
