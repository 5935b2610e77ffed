#!/bin/bash
# Re-runs the figures of results/scaleout/cpu-2core-zen4 (README.md there) from the repository root, on an idle
# machine: run --jobs 1 against --jobs 2, one process against two data-parallel ranks, the op against plain-PyTorch
# gather/scatter attention. Every run pins the AVX2 target, as the Zen 3 figures in ../cpu-2core did.
set -u
B=$PWD/build/harness/sparsebench
D=$PWD/../shared/data/enwik8-head.bin
OUT=$PWD/results/scaleout/cpu-2core-zen4
export SB_CPU_TARGET=AVX2
lscpu | grep -E "Model name|^CPU\(s\)|^CPU family|^Model:"
for j in 1 2; do
  uptime
  rm -rf "$OUT/jobs$j"
  s=$(date +%s.%N)
  $B run scenarios/parallel_train.json --set train/data="$D" --jobs $j --out "$OUT/jobs$j" --no-plot > /dev/null 2>&1
  echo "jobs $j rc=$? wall $(python3 -c "print(round($(date +%s.%N)-$s,1))") s"
done
A="--pattern bpt --set k=4 --data $D --context 512 --steps 200 --eval-every 0 --log-every 100 --checkpoint-every 0 --no-final-eval --quiet --overwrite"
for rep in 1 2 3; do
  uptime
  $B train $A --batch 4 --threads 2 --out "$OUT/train-one" > /dev/null && python3 -c "import json;r=json.load(open('$OUT/train-one/result.json'));print('rep $rep one process, 2 threads, batch 4:', round(r['tokens_per_s']), r.get('simd_target'))"
  $B train $A --batch 2 --nproc 2 --out "$OUT/train-two2" > /dev/null && python3 -c "import json;r=json.load(open('$OUT/train-two2/result.json'));print('rep $rep two ranks, batch 2 each:', round(r['tokens_per_s']), 'allreduce_s', round(r['timing']['this_run']['allreduce_s'],2), 'world', r.get('world_size'))"
done
$B train $A --batch 4 --threads 2 --steps 300 --profile --out "$OUT/train-prof" 2>&1 | tail -15
uptime
$B pattern bpt --n 8192 --set k=4 --causal --export /tmp/bpt4-8192.json > /dev/null
/usr/bin/python3 scripts/compare_torch_gather.py build/kernels/libsparsebench_ops.so /tmp/bpt4-8192.json --threads 2
uptime
