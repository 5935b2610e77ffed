#!/bin/bash
# Subnormal floats in CPU training: 300 steps of a confident dense MQAR model, subnormals kept against flushed.
# usage: run.sh SPARSEBENCH CHECKPOINT OUTDIR   (CHECKPOINT: a checkpoint.pt of the model below, past full recall)
set -euo pipefail
exe=$1 ckpt=$2 out=$3
args=(--task mqar --task-vocab 32 --task-pairs 8 --task-pairs-min 1 --task-answers hidden --task-eval 256
      --attention dense --layers 3 --dim 64 --ffn 128 --heads 1 --positions absolute --dropout 0 --context 64
      --batch 64 --steps 24000 --lr 0.001 --warmup 30 --weight-decay 0.01 --eval-every 1000 --eval-batch 16
      --checkpoint-every 1000 --seed 1 --threads 1 --resume --stop-after 300)
mkdir -p "$out"
for round in 1 2 3; do  # interleaved, so a drift in the machine's speed hits both modes alike
  for mode in keep flush; do
    dir=$(mktemp -d)
    cp "$ckpt" "$dir/checkpoint.pt"
    # a stopped run writes no result.json: its record is the log's last line
    SB_DENORMALS=$mode "$exe" train "${args[@]}" --out "$dir" > "$out/$mode-r$round.log" 2>&1
    rm -rf "$dir"
  done
done
