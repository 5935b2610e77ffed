#!/usr/bin/env python3
"""Medians of `sparsebench bench kernels --benchmark_format=json` outputs, one column per variant, as a markdown table.

Each input is VARIANT=FILE.json (several files of one variant, e.g. interleaved rounds, pool their repetitions).
Per benchmark and variant: the median over repetitions of the time per call and of the fraction of the same-process
GEMM rate (`gemm_fraction`), the spread (max-min over median of the times), and the ratio of each
variant's median time to the first variant's.
e.g. python3 benchmarks/summarize_bench.py old=old-r1.json old=old-r2.json avx3=avx3-r1.json --out summary.md
"""
import argparse
import json
import re
import statistics
import sys
from collections import defaultdict


def load(path):
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        sys.exit(f"summarize_bench: {path}: {e}")
    if "benchmarks" not in doc:
        sys.exit(f"summarize_bench: {path}: no 'benchmarks' array (not Google Benchmark JSON)")
    return doc


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("inputs", nargs="+", help="VARIANT=FILE.json")
    ap.add_argument("--out", help="write the table here as well as to stdout")
    args = ap.parse_args()
    runs = defaultdict(lambda: defaultdict(list))  # name -> variant -> [(time_ms, gemm_fraction)]
    contexts, variants, order, labels, gemm = {}, [], [], defaultdict(dict), defaultdict(list)
    for item in args.inputs:
        if "=" not in item:
            sys.exit(f"summarize_bench: '{item}': expected VARIANT=FILE.json")
        variant, path = item.split("=", 1)
        doc = load(path)
        if variant not in variants:
            variants.append(variant)
        contexts.setdefault(variant, doc.get("context", {}))
        for b in doc["benchmarks"]:
            if b.get("run_type") != "iteration" or b.get("error_occurred"):
                continue
            # Older builds named points pattern:params (bpt:k=4), newer ones pattern(params) (bpt(k=4)).
            name = re.sub(r"^(\w+)/(\w+):([^/]+)/", r"\1/\2(\3)/", b["run_name"].split("/min_time")[0])
            if name not in order:
                order.append(name)
            scale = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}[b["time_unit"]]
            runs[name][variant].append((b["real_time"] * scale, b.get("gemm_fraction", 0.0)))
            labels[name][variant] = b.get("label", "")
            if "gemm_gflops" in b:
                gemm[variant].append(b["gemm_gflops"])
    lines = ["| variant | simd (label) | GEMM GFLOP/s (median of points) | cpu |", "|---|---|---:|---|"]
    for v in variants:
        simd = next((lab.split("simd=")[1] for lab in (labels[n].get(v, "") for n in order) if "simd=" in lab), "-")
        g = statistics.median(gemm[v]) if gemm[v] else float("nan")
        ctx = contexts[v]
        cpu = f"{ctx.get('cpu', 'cpu not named')}, {ctx.get('mhz_per_cpu', '?')} MHz x {ctx.get('num_cpus', '?')}"
        lines.append(f"| {v} | {simd} | {g:.1f} | {cpu} |")
    lines += ["", "| benchmark | " + " | ".join(f"{v} ms (spread, reps)" for v in variants) + " | "
              + " | ".join(f"{v} GEMM fraction" for v in variants) + " | "
              + " | ".join(f"{v} / {variants[0]} time" for v in variants[1:]) + " |",
              "|---|" + "---:|" * (2 * len(variants) + len(variants) - 1)]
    for name in order:
        med, cells, fr = {}, [], []
        for v in variants:
            r = runs[name].get(v, [])
            if not r:
                cells.append("-")
                fr.append("-")
                continue
            t = [x[0] for x in r]
            med[v] = statistics.median(t)
            cells.append(f"{med[v]:.1f} ({(max(t) - min(t)) / med[v] * 100:.0f}%, {len(t)})")
            fr.append(f"{statistics.median(x[1] for x in r):.2f}")
        ratios = [f"{med[v] / med[variants[0]]:.2f}" if v in med and variants[0] in med else "-" for v in variants[1:]]
        lines.append(f"| {name} | " + " | ".join(cells) + " | " + " | ".join(fr) + " | " + " | ".join(ratios) + " |")
    text = "\n".join(lines) + "\n"
    sys.stdout.write(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
