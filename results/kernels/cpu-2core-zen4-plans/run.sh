#!/usr/bin/env bash
# cmp2.sh SCENARIO FILTER ROUNDS "ENV1 bin1" "ENV2 bin2" ...: interleaved; prints median and min per variant and ratios vs first
SC=$1; F=$2; R=$3; shift 3
D=$(mktemp -d /tmp/cmp2XXXX)
for r in $(seq $R); do
  i=0
  for v in "$@"; do
    env SB_CPU_TARGET=${TGT:-AVX2} $v bench kernels --scenario $SC --benchmark_filter="$F" --benchmark_repetitions=3 --benchmark_format=json > $D/b$i-r$r.json 2>/dev/null
    i=$((i+1))
  done
done
python3 - "$D" "$#" <<'PY'
import json,sys,glob,statistics as st
d=sys.argv[1]; n=int(sys.argv[2])
res=[{} for _ in range(n)]
for i in range(n):
  for f in glob.glob(f"{d}/b{i}-r*.json"):
    for b in json.load(open(f))["benchmarks"]:
      if b.get("run_type")!="iteration": continue
      res[i].setdefault(b["run_name"],[]).append(b["real_time"])
for name in res[0]:
  m=[st.median(res[i][name]) for i in range(n)]
  mn=[min(res[i][name]) for i in range(n)]
  print(f"{name[:40]:40s} med " + " ".join(f"{x:7.2f}" for x in m) + " min " + " ".join(f"{x:7.2f}" for x in mn) + " | med-r " + " ".join(f"{m[i]/m[0]:.3f}" for i in range(1,n)) + " min-r " + " ".join(f"{mn[i]/mn[0]:.3f}" for i in range(1,n)))
PY
