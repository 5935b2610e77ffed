#!/usr/bin/env bash
# Fuzzes one torch-free input reader with clang++ and libFuzzer + ASan + UBSan, for a bounded time:
#   scenario    scenario text -> parse, validate, point count and cap, expand (fuzz_scenario.cpp; seeds scenarios/*.json, fuzz_seeds/)
#   cli         command lines -> option parser, --set values, overrides (fuzz_cli.cpp; seeds fuzz_seeds/cli/)
#   checkpoint  checkpoint files -> envelope and info JSON (fuzz_checkpoint.cpp; seeds fuzz_seeds/checkpoint/)
# built against harness/scenario/, harness/lm/config.cpp, common/ and the harness's torch-free helpers and patterns/*.cpp only (no LibTorch).
# Exit 77 (skip) when clang's libFuzzer runtime is missing.
# usage: tests/scenarios/run_fuzz.sh [SECONDS (default 60)] [WORK_DIR (default $TMPDIR/sb_fuzz_TARGET)] [TARGET (scenario)]
set -euo pipefail
secs="${1:-60}"
target="${3:-scenario}"
work="${2:-${TMPDIR:-/tmp}/sb_fuzz_$target}"
src="$(cd "$(dirname "$0")/../.." && pwd)"
cxx="${FUZZ_CXX:-clang++}"
mkdir -p "$work/obj" "$work/corpus"

if ! command -v "$cxx" >/dev/null 2>&1; then
  echo "SKIP: $cxx not found"
  exit 77
fi
printf 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }\n' > "$work/probe.cpp"
if ! "$cxx" -fsanitize=fuzzer,address,undefined "$work/probe.cpp" -o "$work/probe" >/dev/null 2>&1; then
  echo "SKIP: $cxx cannot link -fsanitize=fuzzer (install clang's runtime, e.g. libclang-rt-14-dev)"
  exit 77
fi

flags=(-std=c++17 -O1 -g -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined -I"$src")
case "$target" in
  scenario | cli | checkpoint) ;;
  *) echo "unknown fuzz target '$target' (scenario, cli, checkpoint)"; exit 2 ;;
esac
sources=("$src/tests/scenarios/fuzz_$target.cpp" "$src/harness/scenario/scenario.cpp" "$src/harness/scenario/expand.cpp"
         "$src/common/json_guard.cpp" "$src/harness/cli/cli.cpp" "$src/harness/lm/checkpoint_format.cpp"
         "$src/common/sha256.cpp" "$src/common/limits.cpp" "$src/harness/lm/config.cpp" "$src/common/text.cpp")
for f in "$src"/patterns/*.cpp; do sources+=("$f"); done
# Recompile a source only when it or any header is newer than its object.
newest_header=$(find "$src/common" "$src/patterns" "$src/harness" -name '*.h' -printf '%T@\n' | sort -n | tail -1)
objs=()
pids=()
for f in "${sources[@]}"; do
  o="$work/obj/$(echo "$f" | sed "s|$src/||; s|/|_|g").o"
  objs+=("$o")
  if [[ ! -f "$o" || "$f" -nt "$o" ]] || (( $(printf '%.0f' "$newest_header") > $(stat -c %Y "$o") )); then
    "$cxx" "${flags[@]}" -c "$f" -o "$o" &
    pids+=($!)
    if (( ${#pids[@]} >= 2 )); then wait "${pids[0]}"; pids=("${pids[@]:1}"); fi
  fi
done
for p in "${pids[@]}"; do wait "$p"; done
"$cxx" -fsanitize=fuzzer,address,undefined "${objs[@]}" -lfmt -o "$work/fuzz_$target"

if [[ "$target" == scenario ]]; then
  cp "$src"/scenarios/*.json "$work/corpus/" 2>/dev/null || true
  find "$src/tests/scenarios/fuzz_seeds" -maxdepth 1 -type f -exec cp {} "$work/corpus/" \;
else
  cp "$src/tests/scenarios/fuzz_seeds/$target"/* "$work/corpus/" 2>/dev/null || true
fi
echo "fuzzing for ${secs}s: $work/fuzz_$target (corpus $work/corpus)"
cd "$work"
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
  "./fuzz_$target" -max_total_time="$secs" -max_len=8192 -rss_limit_mb=4096 -timeout=20 -print_final_stats=1 \
    -error_exitcode=1 -timeout_exitcode=1 corpus  # libFuzzer's default error code, 77, would read as a skip
