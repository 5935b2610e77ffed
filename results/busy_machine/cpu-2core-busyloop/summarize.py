#!/usr/bin/env python3
# summarize.py: the table of README.md from records.jsonl (ms per call: median over rounds of each run's median).
import json
import os
import statistics
import sys
from collections import defaultdict

path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "records.jsonl")
runs = defaultdict(list)
flags = defaultdict(lambda: [0, 0])
for line in open(path):
    r = json.loads(line)
    runs[(r["variant"], r["load"], r["label"], r["mode"], r["threads"])].append(r["median_s"] * 1e3)
    if "busy_machine" in r:
        f = flags[(r["load"], r["threads"])]
        f[0] += r["busy_machine"]
        f[1] += 1
variants = sorted({k[0] for k in runs})
points = sorted({(k[2], k[3]) for k in runs})
for load in ("busy", "none"):
    print(f"\n{load}: ms per call (t1, t2) and t2/t1, median over rounds (rounds)\n")
    print("| point | " + " | ".join(f"{v} t1 | {v} t2 | {v} t2/t1" for v in variants) + " |")
    print("|---|" + "---:|" * (3 * len(variants)))
    for label, mode in points:
        cells = []
        for v in variants:
            t1, t2 = runs.get((v, load, label, mode, 1)), runs.get((v, load, label, mode, 2))
            if not t1 or not t2:
                cells += ["", "", ""]
                continue
            a, b = statistics.median(t1), statistics.median(t2)
            cells += [f"{a:.1f} ({len(t1)})", f"{b:.1f} ({len(t2)})", f"{b / a:.2f}"]
        print(f"| {label} {mode.replace('_', '+')} | " + " | ".join(cells) + " |")
print("\nflagged busy_machine (records of this build):")
for (load, t), (n, of) in sorted(flags.items()):
    print(f"  {load}, threads {t}: {n} of {of}")
