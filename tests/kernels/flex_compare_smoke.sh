#!/bin/bash
# benchmarks/flex_compare.py smoke test: a small causal bpt graph through the op, FlexAttention and SDPA; the script
# checks op and FlexAttention agree; here its records and the plot of them are checked. Exit 77 = skipped.
# Usage: flex_compare_smoke.sh SPARSEBENCH OPS_LIBRARY SOURCE_DIR   (PYTHON overrides python3)
set -u
sb=$1 ops=$2 src=$3 py=${PYTHON:-python3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$sb" pattern bpt --n 256 --set k=2 --causal --export "$tmp/g.json" > /dev/null || exit 1
"$py" "$src/benchmarks/flex_compare.py" "$ops" "$tmp/g.json" --out "$tmp/run" --repeats 1 --threads 1
rc=$?
[ $rc = 77 ] && exit 77
[ $rc = 0 ] || { echo "flex_compare exited $rc"; exit 1; }
n=$(grep -c '"status": "ok"' "$tmp/run/records.jsonl")
[ "$n" -ge 5 ] || { echo "expected at least 5 measured records, got $n"; exit 1; }
for m in op flex sdpa; do
  grep -q "\"method\": \"$m\"" "$tmp/run/records.jsonl" || { echo "no record of $m"; exit 1; }
done
"$sb" plot "$tmp/run" || exit 1
[ -f "$tmp/run/plots/throughput_vs_length.png" ] || { echo "no throughput plot"; exit 1; }
echo "flex_compare smoke: $n records, plot drawn"
