#!/bin/bash
# default model (README's 20-minute command) for 1,000 steps per SIMD target, interleaved twice, then a 300-step --profile run per target
B=${B:-build/harness/sparsebench}
O=${O:-results/train/cpu-2core-zen4-simd}
A="--pattern bpt --set k=4 --data ../shared/data/enwik8-head.bin --context 512 --layers 2 --dim 128 --heads 4 --ffn 512 --batch 4 --lr 3e-3 --warmup 100 --dropout 0 --log-every 500"
cd "$(dirname "$0")/../../.."
for r in 1 2; do for t in AVX2 AVX3; do
  SB_CPU_TARGET=$t $B train $A --steps 1000 --eval-every 0 --lens-bytes 0 --no-final-eval --out $O/$t-r$r > $O/$t-r$r.log 2>&1
done; done
for t in AVX2 AVX3; do
  SB_CPU_TARGET=$t $B train $A --steps 300 --eval-every 0 --lens-bytes 0 --no-final-eval --profile --out $O/$t-prof > $O/$t-prof.log 2>&1
done
