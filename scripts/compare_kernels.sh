#!/usr/bin/env bash
# Interleaved timing of two sparsebench binaries on one kernel scenario, for the records in results/kernels/.
# Usage: compare_kernels.sh SCENARIO ROUNDS OLD_BIN NEW_BIN [OUT_DIR]; TGT pins both to a SIMD target (AVX2 unless
# given); NEW_SCENARIO gives the new side another scenario with the same points (e.g. one setting changed, with
# OLD_BIN = NEW_BIN). Keeps every round's Google Benchmark JSON (old-r1.json, new-r1.json, ...) and prints medians,
# ranges, ratios and GEMM fractions.
set -euo pipefail
SC=$1; R=$2; OLD=$3; NEW=$4; OUT=${5:-.}
for r in $(seq "$R"); do
  for v in old new; do
    bin=$OLD sc=$SC; [ "$v" = new ] && bin=$NEW sc=${NEW_SCENARIO:-$SC}
    SB_CPU_TARGET=${TGT:-AVX2} "$bin" bench kernels --scenario "$sc" --benchmark_repetitions=3 \
      --benchmark_format=json > "$OUT/$v-r$r.json" 2>/dev/null
  done
done
python3 - "$OUT" <<'PY'
import json, glob, statistics as st, sys
d = sys.argv[1]
t, frac = {}, {}
for v in ("old", "new"):
    for f in sorted(glob.glob(f"{d}/{v}-r*.json")):
        for b in json.load(open(f))["benchmarks"]:
            if b.get("run_type") != "iteration" or b.get("error_occurred") or \
                    not b["run_name"].startswith(("fwd/", "fwdbwd/")):  # skipped points carry an error
                continue
            name = b["run_name"].split("/min_time")[0]
            t.setdefault((v, name), []).append(b["real_time"])
            if "gemm_fraction" in b:  # absent where a build's benchmark does not count it
                frac.setdefault((v, name), []).append(b["gemm_fraction"])
fr = lambda v, n: f"{st.median(frac[(v, n)]):.2f}" if frac.get((v, n)) else "n/a"
names = sorted({n for _, n in t}, key=lambda n: (n.split("/")[1], n.split("/")[0]))
print("| case | old ms (median, range) | new ms (median, range) | new/old median | new/old min | GEMM fraction old -> new (median) |")
print("|---|---:|---:|---:|---:|---:|")
for n in names:
    o, w = t[("old", n)], t[("new", n)]
    print(f"| {n} | {st.median(o):.1f} ({min(o):.1f}-{max(o):.1f}) | {st.median(w):.1f} ({min(w):.1f}-{max(w):.1f}) | "
          f"{st.median(w) / st.median(o):.3f} | {min(w) / min(o):.3f} | "
          f"{fr('old', n)} -> {fr('new', n)} |")
PY
