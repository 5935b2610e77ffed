#!/usr/bin/env python3
# summarize.py: README.md's tables from records.jsonl: ms per call (median over rounds of each run's median), the
# new/old ratio on the quiet machine, t2/t1 beside the busy loop, and how many records were flagged busy.
import json
import os
import statistics
import sys
from collections import defaultdict

path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "records.jsonl")
runs = defaultdict(list)
flags = defaultdict(lambda: [0, 0])
policy = defaultdict(set)
for line in open(path):
    r = json.loads(line)
    runs[(r["variant"], r["load"], r["label"], r["mode"], r["threads"])].append(r["median_s"] * 1e3)
    if r.get("busy_machine") is not None:
        f = flags[(r["variant"], r["load"])]
        f[0] += bool(r["busy_machine"])
        f[1] += 1
    policy[(r["variant"], r["load"])].add(r.get("omp_wait_policy"))
points = sorted({(k[2], k[3]) for k in runs})
med = lambda v: statistics.median(v) if v else float("nan")
print("Quiet machine: ms per call, A = before (0d8a55f), C = now; C/A\n")
print("| point | threads | A | C | C/A |")
print("|---|---:|---:|---:|---:|")
for label, mode in points:
    for t in (1, 2):
        a, c = runs.get(("A", "none", label, mode, t), []), runs.get(("C", "none", label, mode, t), [])
        print(f"| {label} {mode.replace('_', '+')} | {t} | {med(a):.2f} ({len(a)}) | {med(c):.2f} ({len(c)}) | {med(c) / med(a):.3f} |")
print("\nBeside one busy loop pinned to core 1 (C): t2/t1\n")
print("| point | t1 | t2 | t2/t1 |")
print("|---|---:|---:|---:|")
for label, mode in points:
    t1, t2 = runs.get(("C", "busy", label, mode, 1), []), runs.get(("C", "busy", label, mode, 2), [])
    print(f"| {label} {mode.replace('_', '+')} | {med(t1):.2f} ({len(t1)}) | {med(t2):.2f} ({len(t2)}) | {med(t2) / med(t1):.2f} |")
print("\nflagged busy_machine (records that carry the flag):")
for (v, load), (n, of) in sorted(flags.items()):
    print(f"  {v}, {load}: {n} of {of}")
print("wait policy recorded:", {f"{v},{l}": sorted(map(str, p)) for (v, l), p in policy.items()})
