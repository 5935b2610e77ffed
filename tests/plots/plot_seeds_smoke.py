#!/usr/bin/env python3
# plot_seeds_smoke.py: plots/plot_run.py over the three-seed fixture tests/scenarios/data/run_seeds (exit 77: skip).
"""Runs plots/plot_run.py on a copy of tests/scenarios/data/run_seeds and checks the figures (PNG and SVG),
stats.json (groups, seeds, intervals, every comparison with its verdict) and report.md's sections.
The expected numbers are worked out by hand from the fixture's BPC values (see its README.md).
usage: tests/plots/plot_seeds_smoke.py SOURCE_DIR WORK_DIR
"""
import json
import os
import shutil
import subprocess
import sys

FIGURES = ("degree_vs_bpc", "context_vs_bpc", "learning_curves", "context_lens")
# (kind, baseline, other, n, mean difference, raw verdict: what the interval alone says; the fixture's runs are not
# flattened, so every final verdict is inconclusive)
COMPARISONS = [
    ("matched_degree", "bpt(k=2)@64", "fixed(c=4,l=16)@64", 1, 2.47 - 2.50, "unresolved"),
    ("matched_degree", "bpt(k=2)@64", "window(w=8)@64", 3, (-0.05 - 0.05 - 0.03) / 3, "contradicts"),
    ("matched_degree", "bpt(k=4)@64", "window(w=16)@64", 3, (0.15 + 0.16 + 0.15) / 3, "supports"),
    ("degree_trend", "bpt(k=2)@64", "bpt(k=4)@64", 3, (-0.10 - 0.09 - 0.08) / 3, "supports"),
    ("degree_trend", "window(w=8)@64", "window(w=16)@64", 3, (0.10 + 0.12 + 0.10) / 3, "contradicts"),
    ("context_trend", "bpt(k=4)@64", "bpt(k=4)@128", 2, (-0.02 + 0.01) / 2, "unresolved"),
]


def name(ref):
    return f"{ref['label']}@{ref['length']}"


def check_stats(doc, fail):
    groups = {name(g): g for g in doc["groups"]}
    want = {"bpt(k=2)@64": 3, "bpt(k=4)@64": 3, "window(w=8)@64": 3, "window(w=16)@64": 3, "fixed(c=4,l=16)@64": 1,
            "bpt(k=4)@128": 2}
    got = {k: g["n"] for k, g in groups.items()}
    if got != want:
        fail(f"stats.json groups and seed counts: {got}, expected {want}")
        return
    bpt4 = groups["bpt(k=4)@64"]
    if abs(bpt4["test_bpc"]["mean"] - 2.413333) > 1e-5 or abs(bpt4["test_bpc"]["sd"] - 0.0152753) > 1e-6:
        fail(f"bpt(k=4)@64 test BPC: {bpt4['test_bpc']}, expected mean 2.413333, sd 0.0152753")
    # half width = t(0.975, 2) * sd / sqrt(3) = 4.302653 * 0.0152753 / 1.7320508 = 0.037946
    if abs(bpt4["test_bpc"]["half_width"] - 0.037946) > 1e-5:
        fail(f"bpt(k=4)@64 95% half width {bpt4['test_bpc']['half_width']}, expected 0.037946")
    if bpt4["flattened"] != {"count": 2, "of": 3}:
        fail(f"bpt(k=4)@64 flattened {bpt4['flattened']}, expected 2 of 3")
    fixed = groups["fixed(c=4,l=16)@64"]
    if fixed["test_bpc"]["ci95"] is not None or [x["status"] for x in fixed["not_ok"]] != ["failed", "failed"]:
        fail(f"fixed: one seed must give no interval and list its failed seeds: {fixed['test_bpc']}, {fixed['not_ok']}")
    lens = groups["window(w=16)@64"]["lens_drop"]["mean"]
    if abs(lens - 0.12) > 1e-9:
        fail(f"window(w=16)@64 lens drop {lens}, expected 0.12")
    comps = [(c["kind"], name(c["baseline"]), name(c["other"]), c) for c in doc["comparisons"] if "baseline" in c]
    if sorted(c[:3] for c in comps) != sorted(c[:3] for c in COMPARISONS):
        fail(f"comparisons: {[c[:3] for c in comps]}")
        return
    for kind, base, other, n, mean, verdict in COMPARISONS:
        c = next(c[3] for c in comps if c[:3] == (kind, base, other))
        if c["n"] != n or abs(c["mean"] - mean) > 1e-9 or c["raw_verdict"] != verdict or c["metric"] != "test_bpc":
            fail(f"{kind} {base} -> {other}: n={c['n']} mean={c['mean']} {c['raw_verdict']} on {c['metric']}, "
                 f"expected n={n} mean={mean:.6f} {verdict} on test_bpc")
        if (c["ci95"] is None) != (n < 2):
            fail(f"{kind} {base} -> {other}: interval {c['ci95']} with n={n}")


def main(argv):
    if len(argv) != 3:
        print(__doc__)
        return 2
    src, work = argv[1], argv[2]
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("SKIP: matplotlib is not installed (pip install matplotlib)")
        return 77
    run = os.path.join(work, "run_seeds")
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(os.path.join(src, "tests", "scenarios", "data", "run_seeds"), run)
    proc = subprocess.run([sys.executable, os.path.join(src, "plots", "plot_run.py"), run], capture_output=True,
                          text=True)
    print(proc.stdout + proc.stderr, end="")
    problems = []
    if proc.returncode != 0 or proc.stderr.strip():
        problems.append(f"plot_run.py exited {proc.returncode} (stderr must be empty for this clean run)")
    for fig in FIGURES:
        for ext in ("png", "svg"):
            path = os.path.join(run, "plots", f"{fig}.{ext}")
            if not os.path.isfile(path) or os.path.getsize(path) == 0:
                problems.append(f"missing: plots/{fig}.{ext}")
    try:
        with open(os.path.join(run, "stats.json")) as f:
            check_stats(json.load(f), problems.append)
    except (OSError, ValueError, KeyError, TypeError) as e:
        problems.append(f"stats.json: {e!r}")
    with open(os.path.join(run, "report.md")) as f:
        report = f.read()
    for text in ("## Training runs", "## Quality over seeds", "## Paired comparisons", "## Figures",
                 "| bpt(k=4) | 64 | 16.0 | 3 (1, 2, 3) | 2.4133 ± 0.0153 | [2.3754, 2.4513] |",
                 "| fixed(c=4,l=16) | 64 | 12.0 | 1 (1; seed 2 failed, seed 3 failed) | 2.4700 (1 seed) | "
                 "none (1 seed) |",
                 "| supports | **inconclusive**: gate failed", "| contradicts | **inconclusive**",
                 "| unresolved | **inconclusive**", "### One test per claim", "![learning_curves](plots/learning_curves.png)"):
        if text not in report:
            problems.append(f"report.md lacks '{text}'")
    for p in problems:
        print(p)
    if not problems:
        print(f"plot seeds smoke test: ok ({len(FIGURES)} figures, {len(COMPARISONS)} comparisons)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
