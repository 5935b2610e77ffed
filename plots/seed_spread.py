#!/usr/bin/env python3
# seed_spread.py: how many seeds a task run's accuracy interval needs, from the seeds of one or more run directories.
"""Pools a task's seeds over run directories, per pattern and training configuration, and says how wide the 95%
interval of test accuracy is over all of them, how often K of them give one within +-H points, and how many seeds
the spread they show would need for +-H.

Seeds pool only when everything in the run's training configuration (train/NNNN/result.json "config") is the same
but the seed and where and how many threads it ran: a run with another weight decay or step count is another group.
The same seed twice in one group (the same run in two directories) is refused. Two estimates of "K seeds meet +-H":
  subsets   the share of the K-seed subsets of the seeds at hand whose interval is within +-H (no model)
  normal    half_width_probability with the sd of all the seeds (a plug-in: normal draws, that sd taken as true)
usage: python3 plots/seed_spread.py RUN_DIR [RUN_DIR ...] [--seeds K] [--half-width H] [--json OUT]
"""
import argparse
import itertools
import json
import os
import sys

import seed_groups
import stats
import task_groups

PER_RUN = ("seed", "out_dir", "threads", "nproc", "checkpoint_every", "log_every", "profile")


def fail(msg):
    print(f"seed_spread.py: {msg}", file=sys.stderr)
    sys.exit(2)


def load_runs(run_dir):
    """(record, training configuration) of each finished task point of one run directory."""
    path = os.path.join(run_dir, "records.jsonl")
    if not os.path.isfile(path):
        fail(f"{path}: no such file (expected a run directory)")
    records, problems = seed_groups.read_records(path)
    if problems:
        fail(problems[0])
    out = []
    for n, r in enumerate(records, 1):
        if not task_groups.is_task_record(r) or r.get("status") != "ok":
            continue
        if not stats.is_number(r.get("test_accuracy")):
            fail(f"{path}: record {n}: field test_accuracy: expected a number, got {r.get('test_accuracy')!r}")
        train_dir = r.get("train_dir")
        if not isinstance(train_dir, str):
            fail(f"{path}: record {n}: field train_dir: missing (records before it cannot be pooled)")
        result = os.path.join(run_dir, "train", os.path.basename(train_dir), "result.json")
        try:
            with open(result) as g:
                cfg = json.load(g)["config"]
        except (OSError, ValueError, KeyError) as e:
            fail(f"{result}: field config: cannot read the point's training configuration ({e})")
        out.append((r, cfg))
    return out


def group_runs(run_dirs):
    """{(label, configuration without its per-run fields): [(seed, record, run_dir)]}."""
    groups = {}
    for d in run_dirs:
        for r, cfg in load_runs(d):
            key = (r.get("label") or r.get("pattern"),
                   json.dumps({k: v for k, v in cfg.items() if k not in PER_RUN}, sort_keys=True))
            rows = groups.setdefault(key, [])
            for seed, _, other in rows:
                if seed == cfg["seed"]:
                    fail(f"{d}: {key[0]} seed {seed}: already read from {other} with the same configuration "
                         "(one run counted twice)")
            rows.append((cfg["seed"], r, d))
    return groups


def flatten(cfg, prefix=""):
    """{"model/layers": 3, ...}: a configuration's leaves by path."""
    out = {}
    for k, v in cfg.items():
        if isinstance(v, dict):
            out.update(flatten(v, f"{prefix}{k}/"))
        else:
            out[prefix + k] = v
    return out


def differing_fields(cfgs):
    """The configuration paths whose values differ between groups, leaving out what a pattern's label says."""
    flat = [flatten(c) for c in cfgs]
    keys = set().union(*flat) - {"model/pattern", "model/attention"}
    return sorted(k for k in keys if not k.startswith("model/pattern_params/") and
                  len({json.dumps(f.get(k)) for f in flat}) > 1)


def subset_share(xs, k, h):
    """(meeting, subsets): how many k-value subsets of xs have a 95% interval within +-h."""
    combos = list(itertools.combinations(xs, k))
    return sum(1 for c in combos if stats.summary(c)["half_width"] <= h), len(combos)


def spread(label, rows, k, h):
    """One group's account: per-seed accuracy (points), the interval over all seeds, and the two +-h estimates."""
    rows = sorted(rows, key=lambda row: row[0])
    xs = [100.0 * r["test_accuracy"] for _, r, _ in rows]
    s = stats.summary(xs)
    gates = {seed: task_groups.run_gates(r, r["task"].get("chance")) for seed, r, _ in rows}
    out = {"label": label, "task": rows[0][1]["task"].get("name"), "seeds": [seed for seed, _, _ in rows],
           "run_dirs": sorted({d for _, _, d in rows}), "test_accuracy_points": xs, "summary": s,
           "gates_failed": {str(seed): g for seed, g in gates.items() if g}, "k": k, "half_width": h,
           "subsets": None, "normal": None, "seeds_needed": None}
    if s["sd"] is None:
        return out
    if len(xs) >= k:
        meeting, total = subset_share(xs, k, h)
        out["subsets"] = {"meeting": meeting, "total": total}
    out["normal"] = stats.half_width_probability(s["sd"], k, h)
    out["seeds_needed"] = stats.seeds_for_half_width(s["sd"], h)
    return out


def config_words(acc):
    return ", ".join(f"{key}={v}" for key, v in acc["config"].items())


def table(accounts, k, h):
    lines = [f"| pattern | configuration | seeds | test accuracy per seed (%) | mean [95% interval] | sd | gates | "
             f"{k}-seed subsets within ±{h:g} | P(±{h:g} at {k} seeds), normal | seeds for ±{h:g} |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for a in accounts:
        s = a["summary"]
        one = s["sd"] is None
        cells = [a["label"], config_words(a) or "–", ", ".join(str(x) for x in a["seeds"]),
                 ", ".join(f"{x:.1f}" for x in a["test_accuracy_points"]),
                 f"{s['mean']:.1f} (one seed: no interval)" if one else
                 f"{s['mean']:.1f} [{s['ci95'][0]:.1f}, {s['ci95'][1]:.1f}] (±{s['half_width']:.1f})",
                 "–" if one else f"{s['sd']:.2f}",
                 f"{len(a['seeds']) - len(a['gates_failed'])}/{len(a['seeds'])} pass",
                 f"{a['subsets']['meeting']}/{a['subsets']['total']}" if a["subsets"] else "–",
                 "–" if a["normal"] is None else f"{a['normal']:.2f}",
                 "–" if a["seeds_needed"] is None else str(a["seeds_needed"])]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run_dirs", nargs="+")
    ap.add_argument("--seeds", type=int, default=3, help="seeds per interval in the +-H estimates (default 3)")
    ap.add_argument("--half-width", type=float, default=5.0, help="target half-width in accuracy points (default 5)")
    ap.add_argument("--json", help="write the accounts here too")
    a = ap.parse_args()
    if a.seeds < 2:
        fail(f"--seeds {a.seeds}: an interval needs at least 2 seeds")
    if not a.half_width > 0:
        fail(f"--half-width {a.half_width:g}: expected a positive number of points")
    groups = group_runs(a.run_dirs)
    if not groups:
        fail("no finished task runs in " + ", ".join(a.run_dirs))
    accounts = []
    differing = differing_fields([json.loads(cfg) for _, cfg in groups])
    for (label, cfg), rows in sorted(groups.items()):
        acc = spread(label, rows, a.seeds, a.half_width)
        acc["config"] = {k: v for k, v in flatten(json.loads(cfg)).items() if k in differing}
        accounts.append(acc)
    print(table(accounts, a.seeds, a.half_width))
    for acc in accounts:
        for seed, why in acc["gates_failed"].items():
            where = config_words(acc)
            print(f"{acc['label']}{f' ({where})' if where else ''} seed {seed}: {'; '.join(why)}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(accounts, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
