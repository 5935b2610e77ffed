#!/usr/bin/env bash
# Runs the GPU checks and measurements in one go on a CUDA machine: CUDA tests, compute-sanitizer, the bf16 op sweep,
# Figure 7 in bf16, the op against FlexAttention and SDPA, and an ncu report of the forward kernel.
# usage: bash scripts/gpu_checks.sh BUILD_DIR OUT_DIR [STEP ...]
#   BUILD_DIR: a CUDA build against the LibTorch of this machine's python3 (targets sparsebench, test_gsa_cuda,
#   test_gsa_op, sparsebench_ops). One built on another machine is configured with
#   -DCMAKE_GTEST_DISCOVER_TESTS_DISCOVERY_MODE=PRE_TEST and may bring libraries this one lacks in BUILD_DIR/lib.
#   OUT_DIR receives gpu.tgz (everything, re-packed after each step, so a run cut short keeps what finished) and
#   summary.txt. STEP: env tests sanitizer sweep tc fig7 flex ncu train graphs_eval train_ncu campaign (default: all
#   but campaign, in that order); each step has its own time limit, which SB_GPU_SCALE multiplies (default 1,
#   fractions allowed).
#   ncu: every kernel of one forward+backward call, with relations (lane groups) and without (tensor-core tiles);
#   sweep: scenarios/gpu_bf16.json on the default kernels (cuda:tc), with relation embeddings on the tiles
#   (SB_CUDA_TC_RELATIONS=1), then without relation embeddings on cuda:tc and on the lane groups
#   (SB_CUDA_KERNELS=groups), and bpt and window on one warp per edge;
#   tc: bench_gsa_cuda_tc (lane groups beside tensor-core tiles, plain launchers) on window, bpt and bigbird, and
#   again with SB_CUDA_TC_ROWS=64 (16- beside 64-row tiles).
#   train: the quality model and the paper's model trained for tens to hundreds of steps (tokens/s, CUDA graphs,
#   --profile, fp32 losses under each AdamW and SB_BASELINE's); train_ncu: the kernels of the quality model's steps
#   under ncu. Their data is SB_TRAIN_DATA (default BUILD_DIR/data/enwik8-head.bin, else
#   ../shared/data/enwik8-head.bin).
#   graphs_eval: the quality model in float32 and an MQAR model with evaluations and checkpoints between CUDA-graph
#   replays, against the same runs without graphs (their evaluations must agree); campaign: scripts/gpu_campaign.sh
#   over each scenario of SB_CAMPAIGN (space-separated, run at once; default scenarios/fig5_gpu.json) for
#   SB_CAMPAIGN_BUDGET seconds (default 300), SB_CAMPAIGN_JOBS points at once each (default 1; with SB_CAMPAIGN_MPS=1
#   under one CUDA MPS daemon where it starts), continuing from SB_CAMPAIGN_DIR/NAME (default /tmp/sb_campaign, kept
#   between calls on one machine) or else from SB_CAMPAIGN_FROM (records of another machine, one per scenario, "-"
#   for none); CUDA graphs on when graphs_eval passed in this call (or SB_CUDA_GRAPHS says so). OUT_DIR receives
#   campaign_NAME.tgz per scenario.
set -uo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 2 ] || { echo "usage: bash scripts/gpu_checks.sh BUILD_DIR OUT_DIR [STEP ...]" >&2; exit 2; }
build=$(realpath "$1")
out=$(realpath -m "$2")
shift 2
steps=${*:-env tests sanitizer sweep tc fig7 flex ncu train graphs_eval train_ncu}
scale=${SB_GPU_SCALE:-1}
work=$(mktemp -d /tmp/sb_gpu.XXXXXX)
mkdir -p "$out"
torch_lib=$(python3 -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib"))') || {
  echo "gpu_checks.sh: python3 cannot import torch; the build must run against that LibTorch" >&2; exit 1; }
# BUILD_DIR/lib, when present, holds libraries the build machine linked that this one lacks (fmt, Highway); the
# CUDA runtime comes from the NVIDIA wheels beside torch, as torch's own libraries take it.
nvidia_libs=$(find "$(dirname "$(dirname "$torch_lib")")/nvidia" -maxdepth 3 -type d -name lib 2>/dev/null | tr '\n' ':')
export LD_LIBRARY_PATH="$build/lib:$torch_lib:$nvidia_libs${LD_LIBRARY_PATH:-}"
sb="$build/harness/sparsebench"
summary="$work/summary.txt"
: >"$summary"

# Checkpoints never travel: a training run's final one is hundreds of MB, past what comes back from a GPU machine.
pack() { tar -C "$work" --exclude=checkpoint.pt -czf "$out/gpu.tgz" . && cp "$summary" "$out/summary.txt"; }
# step NAME SECONDS COMMAND...: runs COMMAND under a time limit, logs to NAME.log, notes the outcome in the summary.
step() {
  local name=$1 limit=$2
  shift 2
  local t0=$SECONDS
  timeout "$(awk -v l="$limit" -v s="$scale" 'BEGIN { printf "%.3f", l * s }')" "$@" >"$work/$name.log" 2>&1
  local rc=$?
  echo "$name: exit $rc after $((SECONDS - t0)) s$([ $rc = 124 ] && echo ' (time limit)')" | tee -a "$summary"
  [ "${PACK:-1}" = 0 ] || pack
  return 0
}
wants() { [[ " $steps " == *" $1 "* ]]; }

if wants env; then
  {
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
    python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name())'
    nproc; grep -m1 'model name' /proc/cpuinfo
    git log -1 --format='commit %H' 2>/dev/null || true
    ldd "$sb" | grep 'not found' || echo "all libraries found"
  } >"$work/env.txt" 2>&1
  cat "$work/env.txt" >>"$summary"
fi
# Correctness first, all at once (they time nothing): the CUDA tests and compute-sanitizer over the parity table,
# which forces split rows and sources (threshold 8), so the pieces and their merges are covered too.
checks=()
if wants tests; then
  PACK=0 step test_gsa_cuda 120 "$build/tests/kernels/test_gsa_cuda" --gtest_brief=1 &
  PACK=0 step test_gsa_op_cuda 120 "$build/tests/kernels/test_gsa_op" --gtest_brief=1 --gtest_filter='*Cuda*' &
  checks+=(test_gsa_cuda test_gsa_op_cuda)
fi
if wants sanitizer; then
  # SANITIZERS and SANITIZER_FILTER narrow the tools and tests (racecheck over the whole table takes minutes).
  for tool in ${SANITIZERS:-memcheck racecheck}; do
    PACK=0 step "sanitizer_$tool" 120 compute-sanitizer --tool "$tool" --error-exitcode 9 \
      "$build/tests/kernels/test_gsa_cuda" --gtest_brief=1 \
      --gtest_filter="${SANITIZER_FILTER:-*bpt*:*window*:*BitwiseIdentical*}" &
    checks+=("sanitizer_$tool")
  done
fi
wait
for c in "${checks[@]}"; do
  grep -h -E '^\[  (PASSED|FAILED) |^\[  SKIPPED|ERROR SUMMARY|RACECHECK SUMMARY|SYNCCHECK SUMMARY|INITCHECK SUMMARY' "$work/$c.log" | sed "s/^/$c: /" >>"$summary"
done
pack
if wants sweep; then
  # The issue's op-alone targets: bf16, 16384 tokens per call, causal, 1024..65536; then bpt and window again on
  # the warp-per-edge kernels, in the same session, for the comparison.
  step sweep 170 "$sb" run scenarios/gpu_bf16.json --no-plot --out "$work/gpu_bf16"
  # With relation embeddings on the tensor-core tiles too (opt-in until the tests above pass on a GPU).
  SB_CUDA_TC_RELATIONS=1 step sweep_tc_rel 170 "$sb" run scenarios/gpu_bf16.json --no-plot --out "$work/gpu_bf16_tc_rel"
  # Without relation embeddings: cuda:tc, then the lane groups, same machine.
  norel=(--set attention/relations=false --set 'axes/patterns=[{"name":"bpt","k":4},{"name":"window","w":128},'\
'{"name":"bigbird","b":64,"r":3}]')
  step sweep_tc 170 "$sb" run scenarios/gpu_bf16.json --no-plot --out "$work/gpu_bf16_norel_tc" "${norel[@]}"
  SB_CUDA_KERNELS=groups step sweep_groups 170 "$sb" run scenarios/gpu_bf16.json --no-plot \
    --out "$work/gpu_bf16_norel_groups" "${norel[@]}"
  SB_CUDA_KERNELS=warp step sweep_warp 120 "$sb" run scenarios/gpu_bf16.json --no-plot --out "$work/gpu_bf16_warp" \
    --set 'axes/patterns=[{"name":"bpt","k":4},{"name":"window","w":128}]'
  # SB_BASELINE: another sparsebench binary (e.g. an earlier commit's) swept here too, for a same-machine comparison.
  if [ -n "${SB_BASELINE:-}" ]; then
    step sweep_baseline 170 "$SB_BASELINE" run scenarios/gpu_bf16.json --no-plot --out "$work/gpu_bf16_baseline"
  fi
fi
if wants tc; then
  # Forward and forward+backward of both kernel families on one graph, 4 x 4096 (and bpt at 16384), bf16, H=8, D=64.
  tc_bench="$build/tests/kernels/bench_gsa_cuda_tc"
  step tc_window 60 "$tc_bench" window w=128 4096 4
  step tc_bpt4 60 "$tc_bench" bpt k=4 4096 4
  step tc_bpt4_16384 60 "$tc_bench" bpt k=4 16384 1
  step tc_bpt16 60 "$tc_bench" bpt k=16 4096 4
  step tc_bigbird 60 "$tc_bench" bigbird - 4096 4
  # The forward on 64-row tiles beside the 16-row ones (SB_CUDA_TC_ROWS=64, opt-in until timed here); bpt's 64-row
  # token tiles (density ~0.19) run as 64-row tiles only with the 64-row density floor at 0.15.
  for args in "window w=128 4096 4" "bpt k=4 4096 4 8 64 20 0.35 0.15" "bigbird - 4096 4"; do
    SB_CUDA_TC_ROWS=64 step "tc64_${args%% *}" 60 "$tc_bench" $args  # word splitting wanted
  done
fi
if wants fig7; then
  step fig7 120 "$sb" run scenarios/fig7_throughput.json --set device=cuda --set axes/dtypes=bfloat16 \
    --set memory_budget_mb=120000 \
    --set 'axes/patterns=[{"name":"dense","attention":"dense","label":"Transformer","max_length":32768},{"name":"bpt","k":4}]' \
    --no-plot --out "$work/fig7_bf16"
fi
if wants flex; then
  for n in 1024 4096 16384; do
    "$sb" pattern bpt --n "$n" --set k=4 --causal --export "$work/bpt4_$n.json" >/dev/null
    step "flex_$n" 90 python3 benchmarks/flex_compare.py "$build/kernels/libsparsebench_ops.so" "$work/bpt4_$n.json" \
      --out "$work/flex" --device cuda --dtype bfloat16 --batch $((16384 / n)) --repeats 20
    rm -f "$work/bpt4_$n.json"
  done
  # The issue's window target: w=128 at n=4096, the op (cuda:tc) beside FlexAttention's BlockMask of the same graph.
  "$sb" pattern window --n 4096 --set w=128 --causal --export "$work/window128_4096.json" >/dev/null
  step flex_window_4096 90 python3 benchmarks/flex_compare.py "$build/kernels/libsparsebench_ops.so" \
    "$work/window128_4096.json" --out "$work/flex" --device cuda --dtype bfloat16 --batch 4 --repeats 20
  rm -f "$work/window128_4096.json"
fi
if wants ncu; then
  # Every kernel of one forward+backward call at n=16384 (bpt k=4, then window 128): time, bandwidth, occupancy
  # and stall reasons, as text and as reports for the Nsight Compute GUI. First with relation embeddings (the lane
  # groups), then without (_tc: the tensor-core kernels tc_*, which take none yet, beside the lane groups they leave
  # rows to).
  for variant in "" _tc; do
    kernels='regex:(forward|delta|dq|dkv|drel)_.*kernel'
    relations=true
    [ "$variant" = _tc ] && kernels='regex:(tc_|forward|delta|dq|dkv).*kernel' relations=false
    for pat in '{"name":"bpt","k":4}' '{"name":"window","w":128}'; do
      name=$(echo "$pat" | sed 's/.*"name":"\([a-z]*\)".*/\1/')$variant
      step "ncu_$name" 120 ncu --clock-control none --kernel-name "$kernels" \
        --launch-count 12 --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy \
        --section LaunchStats --section WarpStateStats --section SchedulerStats -o "$work/ncu_$name" -f \
        "$sb" run scenarios/gpu_bf16.json --set "axes/patterns=[$pat]" --set 'axes/lengths=[16384]' \
        --set "attention/relations=$relations" --set axes/modes=forward_backward --set repeats=1 --set warmup=0 \
        --no-plot --out "$work/ncu_point_$name"
      step "ncu_${name}_details" 60 ncu --import "$work/ncu_$name.ncu-rep" --page details
    done
  done
fi
data=${SB_TRAIN_DATA:-$build/data/enwik8-head.bin}
[ -f "$data" ] || data=../shared/data/enwik8-head.bin
quality=(--layers 2 --dim 128 --heads 4 --ffn 512 --dropout 0 --context 512 --batch 8)
paper=(--layers 12 --dim 512 --heads 8 --ffn 2048 --dropout 0)
quiet=(--device cuda --eval-every 0 --checkpoint-every 0 --no-final-eval --lens-bytes 0 --data "$data" --overwrite)
if wants train; then
  # train_run NAME BINARY ARGS...: one training run into $work/train/NAME (packed without its checkpoint).
  train_run() {
    local name=$1 bin=$2
    shift 2
    # Eager unless the run asks for CUDA graphs (the default on CUDA since they were verified).
    SB_CUDA_GRAPHS=${SB_CUDA_GRAPHS:-0} step "train_$name" 120 "$bin" train "${quiet[@]}" --out "$work/train/$name" "$@"
  }
  # Most wanted first, so a slot that ends early keeps them: the default step (fused AdamW, no host reads inside a
  # step), CUDA graphs, fp32 losses under each update, the paper's model, the profiles; then the per-parameter AdamW
  # and SB_BASELINE (another build) on the runs they are compared on.
  q_bf16=("${quality[@]}" --pattern bpt --set k=4 --dtype bfloat16 --steps 400 --log-every 100)
  q_fp32=("${quality[@]}" --pattern bpt --set k=4 --dtype float32 --steps 200 --log-every 1)
  p_dense=("${paper[@]}" --pattern dense --attention dense --positions absolute --context 512 --batch 64 --dtype bfloat16
           --steps 60 --log-every 20)
  p_bpt=("${paper[@]}" --pattern bpt --set k=64 --context 512 --batch 64 --dtype bfloat16 --steps 40 --log-every 20)
  train_run quality_bpt4 "$sb" "${q_bf16[@]}"
  SB_CUDA_GRAPHS=1 train_run quality_bpt4_graphs "$sb" "${q_bf16[@]}"
  train_run quality_fp32 "$sb" "${q_fp32[@]}"
  SB_OPTIMIZER=per_parameter train_run quality_fp32_per_parameter "$sb" "${q_fp32[@]}"
  SB_CUDA_GRAPHS=1 train_run quality_fp32_graphs "$sb" "${q_fp32[@]}"
  train_run paper_dense "$sb" "${p_dense[@]}"
  SB_CUDA_GRAPHS=1 train_run paper_dense_graphs "$sb" "${p_dense[@]}"
  train_run paper_bpt64 "$sb" "${p_bpt[@]}"
  SB_CUDA_GRAPHS=1 train_run paper_bpt64_graphs "$sb" "${p_bpt[@]}"
  # Relation embeddings on the tensor-core tiles (opt-in): the models train with relations, so this is what decides
  # whether training sees the tiles.
  SB_CUDA_TC_RELATIONS=1 SB_CUDA_GRAPHS=1 train_run quality_bpt4_tc_rel "$sb" "${q_bf16[@]}"
  SB_CUDA_TC_RELATIONS=1 SB_CUDA_GRAPHS=1 train_run paper_bpt64_tc_rel "$sb" "${p_bpt[@]}"
  train_run quality_profile "$sb" "${quality[@]}" --pattern bpt --set k=4 --dtype bfloat16 --steps 200 \
    --log-every 100 --profile
  train_run quality_window9 "$sb" "${quality[@]}" --pattern window --set w=9 --dtype bfloat16 --steps 400 --log-every 100
  SB_CUDA_GRAPHS=1 train_run quality_window9_graphs "$sb" "${quality[@]}" --pattern window --set w=9 \
    --dtype bfloat16 --steps 400 --log-every 100
  train_run paper_bpt64_8192 "$sb" "${paper[@]}" --pattern bpt --set k=64 --context 8192 --batch 4 --dtype bfloat16 \
    --steps 20 --log-every 10
  train_run paper_profile "$sb" "${p_bpt[@]}" --profile
  SB_OPTIMIZER=per_parameter train_run quality_bpt4_per_parameter "$sb" "${q_bf16[@]}"
  if [ -n "${SB_BASELINE:-}" ]; then
    for run in quality_bpt4 quality_fp32 paper_dense paper_bpt64; do
      case $run in
        quality_bpt4) args=("${q_bf16[@]}") ;;
        quality_fp32) args=("${q_fp32[@]}") ;;
        paper_dense) args=("${p_dense[@]}") ;;
        paper_bpt64) args=("${p_bpt[@]}") ;;
      esac
      train_run "${run}_baseline" "$SB_BASELINE" "${args[@]}"
    done
  fi
fi
graphs_ok=0
if wants graphs_eval; then
  # 600 float32 steps with 6 evaluations and 3 checkpoints between replays, with and without graphs: the graphs must
  # neither change an evaluation nor be broken by one (fp32 replays matched eager steps exactly before).
  g_args=("${quality[@]}" --pattern bpt --set k=4 --dtype float32 --steps 600 --log-every 100 --eval-every 100
          --eval-bytes 65536 --lens-bytes 0 --data "$data" --device cuda --overwrite)
  # The same for a generated task (its answer mask is one more static input of the graph): MQAR, valid loss.
  t_args=(--task mqar --task-vocab 32 --task-pairs 8 --task-eval 128 --pattern bpt --set k=4 --context 512 --batch 8
          --layers 2 --dim 64 --ffn 128 --heads 2 --dropout 0 --dtype float32 --steps 600 --lr 0.003 --warmup 30
          --log-every 100 --eval-every 100 --eval-batch 8 --device cuda --overwrite)
  SB_CUDA_GRAPHS=0 step graphs_eval_eager 120 "$sb" train "${g_args[@]}" --checkpoint-every 200 \
    --out "$work/train/graphs_eval_eager"
  SB_CUDA_GRAPHS=1 step graphs_eval_graphs 120 "$sb" train "${g_args[@]}" --checkpoint-every 200 \
    --out "$work/train/graphs_eval_graphs"
  SB_CUDA_GRAPHS=0 step graphs_eval_task_eager 120 "$sb" train "${t_args[@]}" --checkpoint-every 200 \
    --out "$work/train/graphs_task_eager"
  SB_CUDA_GRAPHS=1 step graphs_eval_task_graphs 120 "$sb" train "${t_args[@]}" --checkpoint-every 200 \
    --out "$work/train/graphs_task_graphs"
  if python3 - "$work/train/graphs_eval_eager/result.json" "$work/train/graphs_eval_graphs/result.json" \
      "$work/train/graphs_task_eager/result.json" "$work/train/graphs_task_graphs/result.json" >>"$summary" 2>&1 <<'PY'
import json, sys
ok_all = True
for name, key, fa, fb in (("graphs_eval", "bpc", *sys.argv[1:3]), ("graphs_eval task", "loss", *sys.argv[3:5])):
    try:
        a, b = (json.load(open(f)) for f in (fa, fb))
    except (OSError, ValueError) as e:
        print(f"{name}: no result ({e})")
        ok_all = False
        continue
    ea, eb = a.get("evals", []), b.get("evals", [])
    worst = max((abs(x[key] - y[key]) / abs(x[key]) for x, y in zip(ea, eb)), default=float("inf"))
    ok = len(ea) == len(eb) > 0 and worst <= 1e-5 and b.get("cuda_graphs") == "captured"
    print(f"{name}: {len(ea)} and {len(eb)} evaluations, largest relative difference in {key} {worst:.3g}, "
          f"graphs {b.get('cuda_graphs')}, tokens/s {a.get('tokens_per_s', 0):.0f} eager, "
          f"{b.get('tokens_per_s', 0):.0f} graphs: {'agree' if ok else 'DISAGREE'}")
    ok_all = ok_all and ok
sys.exit(0 if ok_all else 1)
PY
  then graphs_ok=1; fi
  pack
fi
if wants train_ncu; then
  # 300 kernels of the quality model after its first 6000 (past warm-up), each timed alone: where a CUDA step goes.
  if command -v ncu >/dev/null; then
    step ncu_train 150 ncu --clock-control none --metrics gpu__time_duration.sum --csv --launch-skip 6000 \
      --launch-count 300 "$sb" train "${quiet[@]}" --out "$work/train/ncu" "${quality[@]}" --pattern bpt --set k=4 \
      --dtype bfloat16 --steps 100 --log-every 50
  fi
  pack
fi
if wants campaign; then
  # Quality runs in the time left: graphs when graphs_eval agreed in this call (or SB_CUDA_GRAPHS says so). Several
  # scenarios in SB_CAMPAIGN run at once, each in its own directory, sharing one MPS daemon.
  camp_env=()
  [ -z "${SB_CUDA_GRAPHS:-}" ] && camp_env=(SB_CUDA_GRAPHS=$graphs_ok)
  camp_root=${SB_CAMPAIGN_DIR:-/tmp/sb_campaign}
  read -r -a camp_list <<<"${SB_CAMPAIGN:-scenarios/fig5_gpu.json}"
  read -r -a camp_from <<<"${SB_CAMPAIGN_FROM:-}"
  if [ "${SB_CAMPAIGN_MPS:-0}" = 1 ] && [ ${#camp_list[@]} -gt 1 ] &&
     command -v nvidia-cuda-mps-control >/dev/null; then
    export CUDA_MPS_PIPE_DIRECTORY="$camp_root/mps_pipe" CUDA_MPS_LOG_DIRECTORY="$camp_root/mps_log"
    mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
    if nvidia-cuda-mps-control -d; then
      export SB_MPS_SHARED=1
      echo "campaign: one MPS daemon for ${#camp_list[@]} scenarios" >>"$summary"
    else
      unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
    fi
  fi
  pids=()
  for i in "${!camp_list[@]}"; do
    scen=${camp_list[$i]}
    name=$(basename "$scen" .json)
    camp_dir="$camp_root/$name"
    camp_args=(--budget "${SB_CAMPAIGN_BUDGET:-300}" --jobs "${SB_CAMPAIGN_JOBS:-1}")
    # Generated tasks take no data file.
    grep -q '"task"' "$scen" || camp_args+=(--set "train/data=$data")
    [ "${SB_CAMPAIGN_MPS:-0}" = 1 ] && camp_args+=(--mps)
    # The records this machine packed last (an earlier call), else those brought from another machine.
    if [ -f "$camp_dir/records.tgz" ]; then camp_args+=(--from "$camp_dir/records.tgz")
    elif [ -n "${camp_from[$i]:-}" ] && [ "${camp_from[$i]}" != - ]; then camp_args+=(--from "${camp_from[$i]}"); fi
    echo "campaign $name: SB_CUDA_GRAPHS=${SB_CUDA_GRAPHS:-${camp_env[*]#SB_CUDA_GRAPHS=}} ${camp_args[*]}" >>"$summary"
    rm -rf "$camp_dir.new"
    # Not scaled: the campaign ends itself at its budget and packs; a cut would lose what finished.
    PACK=0 scale=1 step "campaign_$name" $((${SB_CAMPAIGN_BUDGET:-300} + 60)) env ${camp_env[@]+"${camp_env[@]}"} \
      bash scripts/gpu_campaign.sh "$sb" "$scen" "$camp_dir.new" "${camp_args[@]}" &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do wait "$pid"; done
  [ "${SB_MPS_SHARED:-0}" = 1 ] && echo quit | nvidia-cuda-mps-control >/dev/null 2>&1
  for scen in "${camp_list[@]}"; do
    name=$(basename "$scen" .json)
    camp_dir="$camp_root/$name"
    if [ -f "$camp_dir.new/records.tgz" ]; then rm -rf "$camp_dir" && mv "$camp_dir.new" "$camp_dir"; fi
    cat "$camp_dir/campaign.txt" >>"$summary" 2>/dev/null
    cp "$camp_dir/records.tgz" "$out/campaign_$name.tgz" 2>/dev/null
    cp "$camp_dir/run.log" "$work/campaign_${name}_run.log" 2>/dev/null
  done
fi
pack
cat "$summary"
