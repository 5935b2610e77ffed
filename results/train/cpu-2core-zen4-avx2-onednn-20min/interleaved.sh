#!/usr/bin/env bash
# The interleaved comparison of README.md (run from the repository root): 300 profiled steps per variant, two rounds;
# each run's result.json lands in $out/<round>-<variant>/ (the committed round2-*.json are the second round's).
set -euo pipefail
out=${OUT:-/tmp/sb-matmul-ab}
one() {  # one TAG ENV...
  local tag=$1; shift
  env SB_CPU_TARGET=AVX2 "$@" ${SB:-build/harness/sparsebench} train --pattern bpt --set k=4 \
    --data ../shared/data/enwik8-head.bin --context 512 --layers 2 --dim 128 --heads 4 --ffn 512 --batch 4 --lr 3e-3 \
    --warmup 100 --dropout 0 --steps 300 --eval-every 0 --log-every 100 --no-final-eval --lens-bytes 0 --profile \
    --out "$out/$tag" --overwrite | grep -E '^profile'
}
for r in 1 2; do
  one "round$r-torch" SB_MATMUL=torch
  one "round$r-dnnl"
  one "round$r-torch_avx2" SB_MATMUL=torch OPENBLAS_CORETYPE=Haswell
  one "round$r-dnnl_avx2" ONEDNN_MAX_CPU_ISA=AVX2
done
