#!/usr/bin/env bash
# Plot smoke test: runs plots/plot_run.py on a copy of the committed run directory tests/scenarios/data/run
# and checks that every figure its records call for exists as PNG and SVG, that report.md has its tables (records
# without seeds summarized as one seed each), that stats.json is written, and that the truncated last line of
# records.jsonl is reported. Exit 77 (skip) without python3 + matplotlib.
# usage: tests/scenarios/plot_smoke.sh SOURCE_DIR WORK_DIR
set -euo pipefail
src="$1"
work="$2"
if ! command -v python3 >/dev/null 2>&1; then
  echo "SKIP: python3 not found"
  exit 77
fi
if ! python3 -c "import matplotlib" >/dev/null 2>&1; then
  echo "SKIP: matplotlib is not installed (pip install matplotlib)"
  exit 77
fi
rm -rf "$work"
mkdir -p "$work"
cp -r "$src/tests/scenarios/data/run" "$work/run"
python3 "$src/plots/plot_run.py" "$work/run" 2> "$work/stderr.txt"
cat "$work/stderr.txt"
fail=0
for fig in throughput_vs_length memory_vs_length degree_vs_bpc context_vs_bpc gemm_fraction; do
  for ext in png svg; do
    if [[ ! -s "$work/run/plots/$fig.$ext" ]]; then
      echo "missing: plots/$fig.$ext"
      fail=1
    fi
  done
done
graphs=$(ls "$work/run/graphs" | wc -l)
pictures=$(ls "$work/run/plots" | grep -c '^graph_.*\.png$' || true)
if [[ "$pictures" -ne "$graphs" || "$graphs" -eq 0 ]]; then
  echo "expected one picture per graph export: $graphs exports, $pictures pictures"
  fail=1
fi
for heading in "## Throughput and memory" "## Training runs" "## Quality over seeds" "## Paired comparisons" "## Figures"; do
  grep -qF "$heading" "$work/run/report.md" || { echo "report.md lacks '$heading'"; fail=1; }
done
# Records without seeds are one seed each: no interval is made up for them.
grep -qF "| 8.0125 (1 seed) | none (1 seed) |" "$work/run/report.md" || { echo "report.md: one-seed groups"; fail=1; }
[[ -s "$work/run/stats.json" ]] || { echo "missing: stats.json"; fail=1; }
grep -q "truncated last line ignored" "$work/stderr.txt" || { echo "the truncated last line was not reported"; fail=1; }
[[ $fail -eq 0 ]] && echo "plot smoke test: ok ($pictures graph pictures)"
exit $fail
