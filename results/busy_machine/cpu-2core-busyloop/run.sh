#!/usr/bin/env bash
# run.sh: threads 2 against threads 1 beside one busy-loop process pinned to core 1, and without it, for the main
# build (BASE) and this one (NEW), interleaved; OUT/<variant>-<load>-<round>/ are sparsebench run directories.
# usage: results/busy_machine/cpu-2core-busyloop/run.sh BASE_BIN NEW_BIN OUT ROUNDS
# Variants: A = BASE, B = BASE with OMP_WAIT_POLICY=passive, C = NEW (passive by default),
#           D = NEW with GOMP_SPINCOUNT=300000 (libgomp's default spin), E = NEW with GOMP_SPINCOUNT=10000.
set -euo pipefail
base=$1 new=$2 out=$3 rounds=$4
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
for r in $(seq 1 "$rounds"); do
  for load in busy none; do
    for v in A B C D; do
      case $v in
        A) bin=$base env=() ;;
        B) bin=$base env=(OMP_WAIT_POLICY=passive) ;;
        C) bin=$new env=() ;;
        D) bin=$new env=(GOMP_SPINCOUNT=300000) ;;
        E) bin=$new env=(GOMP_SPINCOUNT=10000) ;;
      esac
      if [[ $load == busy ]]; then
        taskset -c 1 sh -c 'while :; do :; done' &
        loop=$!
        sleep 0.3
      fi
      env "${env[@]}" "$bin" run "$here/scenario.json" --out "$out/$v-$load-$r" --no-plot --overwrite \
        > "$out/$v-$load-$r.log" 2>&1
      if [[ $load == busy ]]; then kill "$loop"; wait "$loop" 2>/dev/null || true; fi
      echo "round $r, $load, $v: load average $(cut -d' ' -f1-4 /proc/loadavg)"
    done
  done
done
