#!/usr/bin/env bash
# Runs, or continues where it stopped, the seeded quality sweeps (Figure 5, then Table 4) into results/, N points at
# a time, and draws their plots and reports. Safe to kill and rerun: finished points are kept, an interrupted one
# continues from its last checkpoint.
# usage: bash scripts/quality_runs.sh [--jobs N (2)] [--only fig5_degree_bpc|table4_context] [-- extra `run` arguments]
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${SPARSEBENCH:-build/harness/sparsebench}
jobs=2
only=""
extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --jobs) jobs="$2"; shift ;;
    --only) only="$2"; shift ;;
    --) shift; extra=("$@"); break ;;
    *) echo "quality_runs.sh: unknown option $1 (expected --jobs N, --only NAME, -- run arguments)" >&2; exit 2 ;;
  esac
  shift
done
# Every run of these sweeps so far used the AVX2 kernels; runs continued on another machine (one with AVX-512, say)
# keep that target, so every seed and point of a sweep ran the same kernels. SB_CPU_TARGET=... overrides it.
export SB_CPU_TARGET=${SB_CPU_TARGET:-AVX2}
[ -x "$bin" ] || { echo "quality_runs.sh: $bin not found; build first (bash scripts/setup.sh --no-run)" >&2; exit 2; }
for name in fig5_degree_bpc table4_context; do
  [ -n "$only" ] && [ "$only" != "$name" ] && continue
  out=results/$name/cpu-2core-seeds
  resume=()
  [ -f "$out/run.json" ] && resume=(--resume)
  # Table 4's context 512 is Figure 5's bpt k=64 (same settings and seeds): its finished runs are copied, not retrained.
  reuse=()
  [ "$name" = table4_context ] && [ -d results/fig5_degree_bpc/cpu-2core-seeds/train ] &&
    reuse=(--reuse-from results/fig5_degree_bpc/cpu-2core-seeds)
  "$bin" run "scenarios/$name.json" --out "$out" --jobs "$jobs" --no-plot "${resume[@]}" "${reuse[@]}" "${extra[@]}"
  "$bin" plot "$out"
done
