#!/usr/bin/env bash
# run.sh: the busy-machine scenario (../cpu-2core-busyloop/scenario.json) on a quiet machine, the main build before
# the busy-machine work (BASE) against this one (NEW) interleaved, then NEW beside one busy loop pinned to core 1;
# appends every point to OUT/records.jsonl. usage: run.sh BASE_BIN NEW_BIN OUT ROUNDS
set -euo pipefail
base=$1 new=$2 out=$3 rounds=$4
here=$(cd "$(dirname "$0")" && pwd)
sc="$here/../cpu-2core-busyloop/scenario.json"
mkdir -p "$out"
collect() {  # variant load round dir
  python3 - "$@" >> "$out/records.jsonl" <<'PY'
import json, sys
v, load, r, d = sys.argv[1:5]
for line in open(f"{d}/records.jsonl"):
    x = json.loads(line)
    keep = {k: x.get(k) for k in ("label", "mode", "threads", "threads_used", "samples_s", "median_s", "cpu_share",
                                  "busy_machine", "busy_reasons", "contention", "omp_wait_policy", "status")}
    print(json.dumps({"variant": v, "load": load, "round": int(r), **keep}))
PY
}
for r in $(seq 1 "$rounds"); do
  for v in A C; do
    bin=$base; [[ $v == C ]] && bin=$new
    "$bin" run "$sc" --out "$out/$v-none-$r" --no-plot --overwrite > "$out/$v-none-$r.log" 2>&1
    collect $v none $r "$out/$v-none-$r"
    echo "round $r, none, $v: load average $(cut -d' ' -f1-4 /proc/loadavg)"
  done
done
for r in $(seq 1 "$rounds"); do
  taskset -c 1 sh -c 'while :; do :; done' &
  loop=$!
  sleep 0.3
  "$new" run "$sc" --out "$out/C-busy-$r" --no-plot --overwrite > "$out/C-busy-$r.log" 2>&1
  kill "$loop"; wait "$loop" 2>/dev/null || true
  collect C busy $r "$out/C-busy-$r"
  echo "round $r, busy, C: load average $(cut -d' ' -f1-4 /proc/loadavg)"
done
