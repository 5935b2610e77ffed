#!/bin/bash
# Re-runs the figures of results/scaleout/cpu-2core (README.md there); run from the repository root.
B=$PWD/build/harness/sparsebench

mkdir -p /tmp/sb-scaleout
for j in 1 2; do
  uptime
  s=$(date +%s.%N)
  $B run scenarios/parallel_train.json --set train/data=../shared/data/enwik8-head.bin --jobs $j --out /tmp/sb-scaleout/jobs$j --no-plot > /tmp/sb-scaleout/jobs$j.log 2>&1
  echo "jobs $j rc=$? wall $(python3 -c "print(round($(date +%s.%N)-$s,1))") s"
done
uptime
