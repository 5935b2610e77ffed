#!/usr/bin/env bash
# scripts/gpu_checks.sh without a GPU: stand-in tools record how each step is called, so the step order, the
# environment the steps get, the packing of a run cut short and the refusals are checked on any machine.
# usage: bash tests/kernels/gpu_checks_smoke.sh REPO_DIR
set -uo pipefail
repo=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "gpu_checks_smoke: $*" >&2; exit 1; }

# Stand-ins: every tool appends its name, SB_CUDA_KERNELS, SB_CUDA_TC_ROWS (when set), arguments and SB_CUDA_GRAPHS to
# calls.txt.
mkdir -p "$tmp/bin" "$tmp/build/harness" "$tmp/build/tests/kernels" "$tmp/build/kernels" "$tmp/torch/lib"
cat >"$tmp/stub" <<EOF
#!/usr/bin/env bash
echo "\$(basename "\$0") kernels=\${SB_CUDA_KERNELS:-} \${SB_CUDA_TC_ROWS:+rows=\$SB_CUDA_TC_ROWS }\$* graphs=\${SB_CUDA_GRAPHS:-}" \
  >>"$tmp/calls.txt"
case "\$(basename "\$0")" in
  sparsebench) [ "\$1" = pattern ] && for a in "\$@"; do [ "\${prev:-}" = --export ] && echo '{}' >"\$a"; prev=\$a; done ;;
  test_gsa_cuda) echo '[  PASSED  ] 12 tests.' ;;
  sleepy) sleep 30 ;;
esac
exit 0
EOF
chmod +x "$tmp/stub"
for t in nvidia-smi compute-sanitizer ncu; do cp "$tmp/stub" "$tmp/bin/$t"; done
cp "$tmp/stub" "$tmp/build/harness/sparsebench"
cp "$tmp/stub" "$tmp/build/tests/kernels/test_gsa_cuda"
cp "$tmp/stub" "$tmp/build/tests/kernels/test_gsa_op"
cp "$tmp/stub" "$tmp/build/tests/kernels/bench_gsa_cuda_tc"
cp "$tmp/stub" "$tmp/sleepy"
# python3: answers the torch query with a lib folder, and records the FlexAttention runs.
cat >"$tmp/bin/python3" <<EOF
#!/usr/bin/env bash
if [ "\$1" = -c ]; then
  case "\$2" in *torch.__file__*) echo "$tmp/torch/lib" ;; *) echo "torch 0 (stand-in)" ;; esac
  exit 0
fi
echo "python3 \$*" >>"$tmp/calls.txt"
EOF
chmod +x "$tmp/bin/python3"

PATH="$tmp/bin:$PATH" SB_BASELINE="$tmp/build/harness/sparsebench" \
  bash "$repo/scripts/gpu_checks.sh" "$tmp/build" "$tmp/out" env tests sweep tc flex >"$tmp/log" 2>&1 ||
  fail "exited $? ($(tail -3 "$tmp/log"))"
[ -f "$tmp/out/gpu.tgz" ] && [ -f "$tmp/out/summary.txt" ] || fail "no gpu.tgz and summary.txt in OUT_DIR"
for s in test_gsa_cuda test_gsa_op_cuda sweep sweep_tc_rel sweep_tc sweep_groups sweep_warp sweep_baseline tc_window \
         tc_bpt4 \
         tc_bigbird tc64_window tc64_bpt tc64_bigbird flex_1024 flex_4096 flex_16384 flex_window_4096; do
  grep -q "^$s: exit 0 after" "$tmp/out/summary.txt" || fail "summary has no line for step $s"
done
grep -q "test_gsa_cuda: \[  PASSED  \] 12 tests." "$tmp/out/summary.txt" || fail "test results missing from the summary"
# The listing is taken whole first: grep -q stopping early would cut tar off (SIGPIPE), and pipefail would fail it.
tar -tzf "$tmp/out/gpu.tgz" >"$tmp/listing" || fail "gpu.tgz does not read back"
grep -q "sweep_warp.log" "$tmp/listing" || fail "gpu.tgz lacks the step logs"
# The lane-group and warp sweeps run with SB_CUDA_KERNELS=groups and =warp, the main sweep (cuda:tc) without; steps
# not asked for do not run.
grep -q "^sparsebench kernels=groups run scenarios/gpu_bf16.json .* --set attention/relations=false" "$tmp/calls.txt" ||
  fail "sweep_groups not on lane groups without relations"
grep -q "^sparsebench kernels= run scenarios/gpu_bf16.json .*norel_tc --set attention/relations=false" \
  "$tmp/calls.txt" ||
  fail "sweep_tc not on the default kernels without relations"
grep -q "^sparsebench kernels=warp run scenarios/gpu_bf16.json" "$tmp/calls.txt" || fail "sweep_warp not on warp kernels"
grep -q "^bench_gsa_cuda_tc kernels= window w=128 4096 4" "$tmp/calls.txt" || fail "tc bench of the window missing"
# The 64-row runs get SB_CUDA_TC_ROWS=64, the 16-row ones do not.
grep -q "^bench_gsa_cuda_tc kernels= rows=64 window w=128 4096 4 graphs=" "$tmp/calls.txt" ||
  fail "tc bench of the window on 64-row tiles missing"
grep -q "^bench_gsa_cuda_tc kernels= rows=64 bpt k=4 4096 4 8 64 20 0.35 0.15 graphs=" "$tmp/calls.txt" ||
  fail "tc bench of bpt on 64-row tiles missing"
[ "$(grep -c "^bench_gsa_cuda_tc kernels= rows=64 " "$tmp/calls.txt")" = 3 ] || fail "not three 64-row tc benches"
grep -q "^sparsebench kernels= run scenarios/gpu_bf16.json --no-plot --out" "$tmp/calls.txt" || fail "main sweep missing"
grep -q "fig7_throughput\|^ncu\|^compute-sanitizer" "$tmp/calls.txt" && fail "steps not asked for ran"
# FlexAttention gets 16384 tokens per call: batch 16 at n=1024.
grep -q "flex_compare.py .*bpt4_1024.json .*--batch 16 " "$tmp/calls.txt" || fail "flex at n=1024 not at batch 16"

# ncu: the lane-group kernels with relations, then the tensor-core kernels without them, for bpt and window.
rm -rf "$tmp/out" && : >"$tmp/calls.txt"
PATH="$tmp/bin:$PATH" bash "$repo/scripts/gpu_checks.sh" "$tmp/build" "$tmp/out" ncu >"$tmp/log" 2>&1 || fail "ncu exited $?"
[ "$(grep -c '^ncu .*regex:(tc_|forward|delta|dq|dkv).*--set attention/relations=false' "$tmp/calls.txt")" = 2 ] ||
  fail "ncu of the tensor-core kernels missing ($(grep '^ncu' "$tmp/calls.txt"))"
for s in ncu_bpt ncu_window ncu_bpt_tc ncu_window_tc; do
  grep -q "^$s: exit 0 after" "$tmp/out/summary.txt" || fail "summary has no line for step $s"
done

# train: seventeen runs of the new binary (default, CUDA graphs, relations on the tiles, per-parameter AdamW) and
# four of SB_BASELINE on the carried data; graphs_eval: with and without graphs, compared (the stand-in python3
# agrees), for the quality model and MQAR; train_ncu: ncu over the new binary; campaign: scripts/gpu_campaign.sh
# over fig5_gpu.json with graphs on after graphs_eval agreed.
rm -rf "$tmp/out" && : >"$tmp/calls.txt"
mkdir -p "$tmp/build/data" && echo data >"$tmp/build/data/enwik8-head.bin"
PATH="$tmp/bin:$PATH" SB_BASELINE="$tmp/build/harness/sparsebench" SB_CAMPAIGN_DIR="$tmp/camp" SB_CAMPAIGN_BUDGET=20 \
  SB_CAMPAIGN_JOBS=2 bash "$repo/scripts/gpu_checks.sh" "$tmp/build" "$tmp/out" train graphs_eval train_ncu campaign \
  >"$tmp/log" 2>&1 || fail "train step exited $?"
[ "$(grep -c '^sparsebench kernels= train --device cuda' "$tmp/calls.txt")" = 21 ] ||
  fail "expected 21 training runs on the carried data ($(grep -c ' train ' "$tmp/calls.txt"))"
# graphs_eval's MQAR pair: a generated task, no data file, the second run on CUDA graphs.
[ "$(grep -c '^sparsebench kernels= train --task mqar .*--device cuda' "$tmp/calls.txt")" = 2 ] ||
  fail "expected the two MQAR runs of graphs_eval"
grep -q "^sparsebench kernels= train --task mqar .*graphs_task_graphs graphs=1$" "$tmp/calls.txt" ||
  fail "graphs_eval's second MQAR run is not on CUDA graphs"
grep -q "train .*--data $tmp/build/data/enwik8-head.bin .*--pattern bpt --set k=4 --dtype bfloat16 --steps 400" \
  "$tmp/calls.txt" || fail "the quality model run is missing or not on the carried data"
grep -q "^ncu .*--launch-count 300 .*train" "$tmp/calls.txt" || fail "ncu over a training run missing"
for s in train_quality_bpt4 train_quality_bpt4_graphs train_quality_bpt4_tc_rel train_quality_bpt4_baseline \
         train_paper_dense ncu_train \
         graphs_eval_eager graphs_eval_graphs graphs_eval_task_eager graphs_eval_task_graphs campaign_fig5_gpu; do
  grep -q "^$s: exit 0 after" "$tmp/out/summary.txt" || fail "summary has no line for step $s"
done
grep -q "^sparsebench kernels= train .*--checkpoint-every 200 --out .*graphs_eval_graphs graphs=1$" "$tmp/calls.txt" ||
  fail "graphs_eval's second run is not on CUDA graphs"
grep -q "^sparsebench kernels= train .*/train/quality_bpt4 .*graphs=0$" "$tmp/calls.txt" ||
  fail "the eager quality run is not asked to run without CUDA graphs (their default on CUDA)"
grep -q "^sparsebench kernels= run .*/scenarios/fig5_gpu.json --out $tmp/camp/fig5_gpu.new/run --no-plot .*--jobs 2 --set train/data=$tmp/build/data/enwik8-head.bin graphs=1$" \
  "$tmp/calls.txt" || fail "the campaign did not run fig5_gpu.json on the carried data with graphs ($(grep ' run ' "$tmp/calls.txt"))"
[ -f "$tmp/camp/fig5_gpu/records.tgz" ] && [ -f "$tmp/out/campaign_fig5_gpu.tgz" ] ||
  fail "the campaign's records were not kept"

# Two scenarios at once, each in its own directory; the generated task's gets no data file; fig5_gpu continues
# from the records the first call kept on this machine.
rm -rf "$tmp/out" && : >"$tmp/calls.txt"
PATH="$tmp/bin:$PATH" SB_CAMPAIGN_DIR="$tmp/camp" SB_CAMPAIGN_BUDGET=20 \
  SB_CAMPAIGN="scenarios/fig5_gpu.json scenarios/mqar_gpu.json" bash "$repo/scripts/gpu_checks.sh" "$tmp/build" \
  "$tmp/out" campaign >"$tmp/log" 2>&1 || fail "two campaigns exited $?"
grep -q "^sparsebench kernels= run .*/scenarios/mqar_gpu.json --out $tmp/camp/mqar_gpu.new/run --no-plot --jobs 1 \
graphs=0$" "$tmp/calls.txt" || fail "mqar_gpu.json did not run on its own, without a data file"
grep -q "^campaign fig5_gpu: .*--from $tmp/camp/fig5_gpu/records.tgz" "$tmp/out/summary.txt" ||
  fail "fig5_gpu.json did not continue from this machine's records"
for n in fig5_gpu mqar_gpu; do
  grep -q "^campaign_$n: exit 0 after" "$tmp/out/summary.txt" || fail "summary has no line for campaign_$n"
  [ -f "$tmp/out/campaign_$n.tgz" ] || fail "campaign_$n.tgz not in OUT_DIR"
done

# A step over its time limit is cut, noted, and the steps after it still run and are packed.
rm -rf "$tmp/out"
PATH="$tmp/bin:$PATH" SB_BASELINE="$tmp/sleepy" SB_GPU_SCALE=0.02 \
  bash "$repo/scripts/gpu_checks.sh" "$tmp/build" "$tmp/out" sweep >"$tmp/log" 2>&1
grep -q "^sweep_baseline: exit 124 after .* (time limit)" "$tmp/out/summary.txt" ||
  fail "a step past its limit is not noted ($(cat "$tmp/out/summary.txt"))"

# Refusals: too few arguments, and a python3 without torch.
bash "$repo/scripts/gpu_checks.sh" "$tmp/build" >"$tmp/log" 2>&1 && fail "one argument accepted"
grep -q "usage: bash scripts/gpu_checks.sh BUILD_DIR OUT_DIR" "$tmp/log" || fail "no usage line"
printf '#!/usr/bin/env bash\nexit 1\n' >"$tmp/bin/python3"
PATH="$tmp/bin:$PATH" bash "$repo/scripts/gpu_checks.sh" "$tmp/build" "$tmp/out2" env >"$tmp/log" 2>&1 &&
  fail "ran without torch"
grep -q "gpu_checks.sh: python3 cannot import torch" "$tmp/log" || fail "no message for a python3 without torch"
echo "gpu_checks_smoke: ok"
