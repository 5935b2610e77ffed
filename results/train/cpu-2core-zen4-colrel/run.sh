#!/bin/bash
# default model (README's 20-minute command) for 1,000 steps with the kernels pinned to AVX2: commit 6a50d7b against
# this build (per-row tables of a row's distinct relations: bpt's span nodes), interleaved twice, then a 300-step
# --profile run of each
OLD=${OLD:-../old-6a50d7b/build/harness/sparsebench}
NEW=${NEW:-build/harness/sparsebench}
O=${O:-results/train/cpu-2core-zen4-colrel}
A="--pattern bpt --set k=4 --data ../shared/data/enwik8-head.bin --context 512 --layers 2 --dim 128 --heads 4 --ffn 512 --batch 4 --lr 3e-3 --warmup 100 --dropout 0 --log-every 500"
cd "$(dirname "$0")/../../.."
for r in 1 2; do for v in old new; do
  b=$OLD; [ $v = new ] && b=$NEW
  SB_CPU_TARGET=AVX2 $b train $A --steps 1000 --eval-every 0 --lens-bytes 0 --no-final-eval --out $O/$v-r$r > $O/$v-r$r.log 2>&1
done; done
for v in old new; do
  b=$OLD; [ $v = new ] && b=$NEW
  SB_CPU_TARGET=AVX2 $b train $A --steps 300 --eval-every 0 --lens-bytes 0 --no-final-eval --profile --out $O/$v-prof > $O/$v-prof.log 2>&1
done
