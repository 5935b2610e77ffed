#!/usr/bin/env bash
# Runs (part of) a scenario on a machine lent for a few minutes and packs its records to take home: within a time
# budget, resumable on the next machine from the records the last one packed.
# usage: bash scripts/gpu_campaign.sh SPARSEBENCH SCENARIO OUT_DIR [--budget SECONDS (480)] [--shard I/N]
#          [--from RECORDS.tgz] [--jobs N] [--mps] [--set path=value ...]
#   --jobs N: points at once (run --jobs). Small models leave most of a GPU idle, but processes on one GPU take turns
#   unless the CUDA MPS daemon shares it: --mps starts one for the campaign where nvidia-cuda-mps-control is present
#   and a CUDA context then opens (else the campaign goes on without, saying so), and stops it at the end.
#   Finished points travel as records (records.jsonl, run.json, each point's result.json and metrics.jsonl);
#   checkpoints never do, so a point cut by the budget starts again on the next machine. OUT_DIR/records.tgz holds
#   the run directory without checkpoints; OUT_DIR/campaign.txt says how many points are done.
set -uo pipefail
[ $# -ge 3 ] || { echo "usage: bash scripts/gpu_campaign.sh SPARSEBENCH SCENARIO OUT_DIR [--budget S] [--shard I/N] [--from RECORDS.tgz] [--set path=value ...]" >&2; exit 2; }
sb=$(realpath "$1")
scenario=$(realpath "$2")
out=$(realpath -m "$3")
shift 3
budget=480
mps=0
from=""
shard=""
extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --budget) budget="$2"; shift ;;
    --shard) shard="$2"; extra+=(--shard "$2"); shift ;;
    --from) from=$(realpath "$2"); shift ;;
    --set) extra+=(--set "$2"); shift ;;
    --jobs) extra+=(--jobs "$2"); shift ;;
    --mps) mps=1 ;;
    *) echo "gpu_campaign.sh: unknown option $1 (expected --budget, --shard, --from, --jobs, --mps, --set)" >&2
       exit 2 ;;
  esac
  shift
done
[[ "$budget" =~ ^[0-9]+$ ]] && [ "$budget" -gt 0 ] || { echo "gpu_campaign.sh: --budget: expected whole seconds > 0, got '$budget'" >&2; exit 2; }
[ -x "$sb" ] || { echo "gpu_campaign.sh: SPARSEBENCH '$sb' is not an executable" >&2; exit 2; }
[ -f "$scenario" ] || { echo "gpu_campaign.sh: SCENARIO '$scenario' is not a file" >&2; exit 2; }
[ -z "$from" ] || [ -f "$from" ] || { echo "gpu_campaign.sh: --from '$from' is not a file" >&2; exit 2; }
mkdir -p "$out"
run="$out/run"
resume=()
if [ -n "$from" ]; then
  mkdir -p "$run"
  tar -C "$run" -xzf "$from" || { echo "gpu_campaign.sh: --from '$from' does not unpack" >&2; exit 2; }
fi
# A shard writes under RUN/shard-I-of-N; a run resumes where its own run.json already is.
own="$run"
[ -z "$shard" ] || own="$run/shard-${shard%%/*}-of-${shard##*/}"
[ -f "$own/run.json" ] && resume=(--resume)
mps_note="off"
# A caller running several campaigns at once starts one daemon for all of them (SB_MPS_SHARED=1, its pipe exported).
if [ "$mps" = 1 ] && [ "${SB_MPS_SHARED:-0}" = 1 ] && [ -n "${CUDA_MPS_PIPE_DIRECTORY:-}" ]; then
  mps_note="on (the caller's daemon)"
elif [ "$mps" = 1 ]; then
  mps_note="not available (no nvidia-cuda-mps-control)"
  if command -v nvidia-cuda-mps-control >/dev/null; then
    export CUDA_MPS_PIPE_DIRECTORY="$out/mps_pipe" CUDA_MPS_LOG_DIRECTORY="$out/mps_log"
    mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
    probe='import torch; torch.zeros(1, device="cuda").sum().item()'
    if nvidia-cuda-mps-control -d && timeout 60 python3 -c "$probe" 2>/dev/null; then
      mps_note="on"
      trap 'echo quit | nvidia-cuda-mps-control >/dev/null 2>&1' EXIT
    else
      echo quit | nvidia-cuda-mps-control >/dev/null 2>&1
      unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
      mps_note="failed to start or to open a context (see $out/mps_log)"
    fi
  fi
fi
# The run stops (SIGINT: points end as a kill would leave them) when the budget is spent; what finished is packed.
t0=$SECONDS
timeout --signal=INT --kill-after=30 "$budget" "$sb" run "$scenario" --out "$run" --no-plot ${resume[@]+"${resume[@]}"} \
  ${extra[@]+"${extra[@]}"} >"$out/run.log" 2>&1
rc=$?
pack() {
  mkdir -p "$run"  # a run cut before it wrote anything still packs (an empty archive)
  tar -C "$run" --exclude='checkpoint.pt' --exclude='*.tmp' --exclude='.points' -czf "$out/records.tgz" . 2>/dev/null
}
pack
done_points=$( { cat "$own/records.jsonl" 2>/dev/null || true; } | grep -c '"config_id"' || true)
{
  echo "scenario: $scenario"
  echo "exit: $rc after $((SECONDS - t0)) s$([ "$rc" = 124 ] || [ "$rc" = 130 ] && echo ' (budget spent: continue with --from)')"
  echo "records: $done_points"
  echo "mps: $mps_note"
  echo "packed: $(du -k "$out/records.tgz" | cut -f1) KiB"
} | tee "$out/campaign.txt"
# 124/130: the budget ended the run; the records are what finished, to be continued elsewhere.
case "$rc" in 0|1|124|130) exit 0 ;; *) exit "$rc" ;; esac
