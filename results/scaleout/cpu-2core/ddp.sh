#!/bin/bash
# Re-runs the figures of results/scaleout/cpu-2core (README.md there); run from the repository root.
# Interleaved repeats: one process 2 threads batch 4 | two ranks batch 2 each (same global batch).
B=$PWD/build/harness/sparsebench
D=$PWD/../shared/data/enwik8-head.bin
A="--pattern bpt --set k=4 --data $D --context 512 --steps 200 --eval-every 0 --log-every 100 --checkpoint-every 0 --no-final-eval --quiet --overwrite"
mkdir -p /tmp/sb-scaleout && cd /tmp/sb-scaleout
lscpu | grep -E "Model name|^CPU\(s\)"
for rep in 1 2 3; do
  uptime
  $B train $A --batch 4 --threads 2 --out perf/one > /dev/null && python3 -c "import json;r=json.load(open('perf/one/result.json'));print('rep $rep one-process 2 threads batch 4:', round(r['tokens_per_s']), r.get('simd_target'))"
  $B train $A --batch 2 --nproc 2 --out perf/two2 > /dev/null && python3 -c "import json;r=json.load(open('perf/two2/result.json'));print('rep $rep two ranks batch 2 each:', round(r['tokens_per_s']), 'allreduce_s', round(r['timing']['this_run']['allreduce_s'],2), 'world', r.get('world_size'))"
done
$B train $A --batch 4 --threads 2 --steps 300 --profile --out perf/prof 2>&1 | tail -15
uptime
