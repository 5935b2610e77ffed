#!/usr/bin/env python3
# Sums `ncu --csv --metrics gpu__time_duration.sum` output by kernel name: where the profiled launches' GPU time went.
# usage: python3 scripts/ncu_top_kernels.py NCU_CSV_LOG [--top N]
import csv
import sys
from collections import defaultdict


def top_kernels(lines, top=15):
    """Returns (rows, total_ns): rows of (name, launches, ns) sorted by time, from ncu's CSV lines."""
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        raise ValueError("no ncu CSV header (a line starting with \"ID\")")
    by_name = defaultdict(lambda: [0, 0.0])
    for row in csv.DictReader(lines[start:]):
        if row.get("Metric Name") != "gpu__time_duration.sum":
            continue
        value = float(row["Metric Value"].replace(",", ""))
        scale = {"nsecond": 1.0, "usecond": 1e3, "msecond": 1e6, "second": 1e9}.get(row.get("Metric Unit"), 1.0)
        name = row["Kernel Name"].split("(")[0].split("<")[0].strip()
        by_name[name][0] += 1
        by_name[name][1] += value * scale
    total = sum(v[1] for v in by_name.values())
    rows = sorted(((k, v[0], v[1]) for k, v in by_name.items()), key=lambda r: -r[2])
    return rows[:top], total


def main(argv):
    if not argv:
        print("usage: python3 scripts/ncu_top_kernels.py NCU_CSV_LOG [--top N]", file=sys.stderr)
        return 2
    top = int(argv[argv.index("--top") + 1]) if "--top" in argv else 15
    with open(argv[0], errors="replace") as f:
        lines = f.read().splitlines()
    try:
        rows, total = top_kernels(lines, top)
    except ValueError as e:
        print(f"ncu_top_kernels.py: {argv[0]}: {e}", file=sys.stderr)
        return 2
    print(f"| kernel | launches | GPU ms | share |\n|---|---:|---:|---:|")
    for name, n, ns in rows:
        print(f"| `{name[:80]}` | {n} | {ns / 1e6:.3f} | {100 * ns / total:.1f}% |")
    print(f"\n{total / 1e6:.3f} ms over all profiled launches")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
