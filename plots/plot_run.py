#!/usr/bin/env python3
# plot_run.py: draws the figures and report.md of a sparsebench run directory from its records.
"""Figures and report.md of one sparsebench run directory, drawn only from its records.

usage: python3 plots/plot_run.py RUN_DIR        (or: sparsebench plot RUN_DIR)

Reads RUN_DIR/records.jsonl (a truncated last line is ignored and reported), RUN_DIR/run.json,
RUN_DIR/graphs/*.json (pattern exports at n=64 written by the runner) and any Google Benchmark JSON
saved in RUN_DIR (e.g. `sparsebench bench kernels --benchmark_format=json > RUN_DIR/bench_kernels.json`).
Draws what the records contain, as PNG and SVG under RUN_DIR/plots/:
  throughput_vs_length  tokens/s vs sequence length (BPT paper Fig. 7)
  memory_vs_length      peak and analytic memory vs sequence length (Fig. 6)
  degree_vs_bpc         test BPC vs mean token in-degree (Fig. 5), means over seeds with 95% CI bars,
                        matched-degree pairs joined by a dotted line
  context_vs_bpc        test BPC vs context length (Table 4), means over seeds with 95% CI bars
  flops_vs_bpc          test BPC vs forward FLOPs per token (Fig. 5 by compute instead of degree)
  task_accuracy_vs_distance  task runs: accuracy per distance bucket, one panel per task and context, each
                        pattern's unreachable distances (more hops than layers) shaded in a band below
  task_accuracy_vs_length    task runs: test accuracy against the context
  task_learning_curves  task runs, one panel per configuration: every seed's valid accuracy, chance, the 80% mark
  learning_curves       one panel per configuration: every seed's valid evaluations, the 80%-of-steps mark
  context_lens          valid BPC vs the context each scored byte may see, one line per configuration
  gemm_fraction         attention FLOP rate as a fraction of a large fp32 GEMM
  graph_<pattern...>    token x node adjacency at n=64, sources coloured by node kind
and writes RUN_DIR/report.md with the tables. Points measured on a busy machine (records with busy_machine true:
another process held cores the threads needed, see the record's contention.rule) are drawn with hollow markers
and listed in report.md under "Contended points". Train records (one row per seed) are grouped by configuration
(plots/seed_groups.py, statistics in plots/stats.py); RUN_DIR/stats.json holds each group's mean, sd and 95%
interval over seeds and the paired comparisons with their verdicts against the paper's claims.
"""
import glob
import json
import math
import os
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.colors import ListedColormap  # noqa: E402

import seed_groups  # noqa: E402  (beside this file)
import stats  # noqa: E402
import task_groups  # noqa: E402

MIB = 1024.0 * 1024.0
# Up to 20 series stay distinguishable: tab20 colours with alternating markers.
plt.rcParams["axes.prop_cycle"] = matplotlib.cycler(color=plt.get_cmap("tab20").colors)
KIND_COLOURS = {"token": "#1f77b4", "span": "#d62728", "relay": "#2ca02c", "sentence": "#9467bd"}


def save(fig, out_dir, name, written):
    for ext in ("png", "svg"):
        path = os.path.join(out_dir, f"{name}.{ext}")
        fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    written.append(name)


def case_title(mode, causal):
    return f"{mode.replace('_', '+')}, {'causal' if causal else 'bidirectional'}"


def by_case(records):
    """Groups measured records by (kind, mode, causal, threads) so that one panel compares like with like."""
    groups = defaultdict(list)
    for r in records:
        groups[(r.get("kind"), r.get("mode"), bool(r.get("causal")), r.get("threads", 0))].append(r)
    return groups


def series(records, y_key):
    """label -> sorted [(length, y, record)] for records that have y_key."""
    out = defaultdict(list)
    for r in records:
        y = r.get(y_key)
        if isinstance(y, (int, float)) and not isinstance(y, bool):
            out[r.get("label", r.get("pattern"))].append((r["length"], y, r))
    for v in out.values():
        v.sort(key=lambda t: t[0])
    return out


def shared_legend(fig, axes):
    """One legend for all panels, right of the figure (series repeat across panels)."""
    seen = {}
    for ax in axes:
        for h, l in zip(*ax.get_legend_handles_labels()):
            seen.setdefault(l, h)
    if seen:
        fig.legend(list(seen.values()), list(seen.keys()), loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8)
    fig.tight_layout()


def panels(n, cols=2):
    cols = min(cols, n)
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(6.2 * cols, 4.2 * rows), squeeze=False)
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    return fig, list(axes.flat[:n])


def length_axes(ax, key, ylabel):
    """A panel against sequence length, both axes logarithmic, titled by its case."""
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("sequence length")
    ax.set_ylabel(ylabel)
    ax.set_title(f"{key[0]}: {case_title(key[1], key[2])}")
    ax.grid(True, which="both", alpha=0.3)


def contended(records):
    """Records whose timing ran on a busy machine (busy_machine true), in record order."""
    return [r for r in records if r.get("busy_machine") is True]


def mark_contended(ax, pts, marker, colour):
    """Hollow markers over the points of one series that ran on a busy machine; returns how many."""
    busy = [p for p in pts if p[2].get("busy_machine") is True]
    if busy:
        ax.plot([p[0] for p in busy], [p[1] for p in busy], ls="none", marker=marker, ms=8, mfc="white", mec=colour,
                mew=1.5, zorder=3)
    return len(busy)


def contended_note(fig, n):
    if n:
        fig.text(0.01, 0.0, f"hollow markers: {n} point(s) measured on a busy machine (report.md, Contended points)",
                 fontsize=8, va="top")


def plot_throughput(ok, out_dir, written):
    groups = {k: v for k, v in by_case(ok).items() if any("tokens_per_s" in r for r in v) and k[0] != "train"}
    if not groups:
        return
    fig, axes = panels(len(groups))
    n_busy = 0
    for ax, (key, recs) in zip(axes, sorted(groups.items(), key=str)):
        for i, (label, pts) in enumerate(sorted(series(recs, "tokens_per_s").items())):
            xs = [p[0] for p in pts]
            ys = [p[1] for p in pts]
            lo = [p[1] - p[2].get("tokens_per_s_min", p[1]) for p in pts]
            hi = [p[2].get("tokens_per_s_max", p[1]) - p[1] for p in pts]
            bars = ax.errorbar(xs, ys, yerr=[lo, hi], marker="os^vD"[i % 5], ms=3, capsize=2, label=label)
            n_busy += mark_contended(ax, pts, "os^vD"[i % 5], bars[0].get_color())
        length_axes(ax, key, "tokens / s (median, min-max)")
    fig.suptitle("Throughput vs sequence length")
    shared_legend(fig, axes)
    contended_note(fig, n_busy)
    save(fig, out_dir, "throughput_vs_length", written)


def plot_memory(ok, out_dir, written):
    groups = {k: v for k, v in by_case(ok).items() if k[0] != "train"}
    groups = {k: v for k, v in groups.items() if any(isinstance(r.get("peak_total_bytes"), (int, float)) or
                                                     r.get("analytic_bytes") for r in v)}
    if not groups:
        return
    fig, axes = panels(len(groups))
    for ax, (key, recs) in zip(axes, sorted(groups.items(), key=str)):
        measured = series(recs, "peak_total_bytes")
        analytic = series(recs, "analytic_bytes")
        colours = {}
        for label, pts in sorted(measured.items()):
            line = ax.plot([p[0] for p in pts], [p[1] / MIB for p in pts], marker="o", ms=3, label=f"{label}")[0]
            colours[label] = line.get_color()
        for label, pts in sorted(analytic.items()):
            kw = {"color": colours[label]} if label in colours else {}
            ax.plot([p[0] for p in pts], [p[1] / MIB for p in pts], ls="--", lw=1, alpha=0.7,
                    label=None if label in colours else f"{label} (analytic)", **kw)
        length_axes(ax, key, "MiB")
    fig.suptitle("Memory vs sequence length (solid: measured peak, dashed: analytic)")
    shared_legend(fig, axes)
    save(fig, out_dir, "memory_vs_length", written)


def draw_means(ax, xs, summaries, label, marker="o"):
    """A line through the means; 95% CI bars where n >= 2, hollow markers where one seed gives no interval."""
    several = [i for i, s in enumerate(summaries) if s["n"] > 1]
    line = ax.plot(xs, [s["mean"] for s in summaries], marker=marker, ms=4, markevery=several, label=label)[0]
    colour = line.get_color()
    bars = [(x, s) for x, s in zip(xs, summaries) if s["half_width"] is not None]
    if bars:
        ax.errorbar([b[0] for b in bars], [b[1]["mean"] for b in bars], yerr=[b[1]["half_width"] for b in bars],
                    fmt="none", ecolor=colour, capsize=3, lw=1)
    single = [(x, s) for x, s in zip(xs, summaries) if s["n"] == 1]
    if single:
        ax.plot([p[0] for p in single], [p[1]["mean"] for p in single], ls="none", marker=marker, ms=6,
                mfc="white", mec=colour)
    return colour


MEANS_NOTE = "mean over seeds; bars: 95% CI (Student t); hollow: one seed, no interval"


def finish_means(fig, ax, xlabel, ylabel, title, name, out_dir, written):
    """Axes, title and legend of a figure of means over seeds against a power-of-two axis, then saved."""
    ax.set_xscale("log", base=2)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(f"{title}\n({MEANS_NOTE})", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5))
    save(fig, out_dir, name, written)


def metric_name(groups):
    used = {g["metric"] for g in groups}
    if len(used) == 1:
        return used.pop().replace("_bpc", " BPC")
    return "BPC (test; valid where no test)"


def plot_degree_bpc(groups, comps, out_dir, written):
    groups = [g for g in groups if g["metric"] and g["degree"]]
    if len(groups) < 2:
        return
    lines = defaultdict(list)
    for g in groups:
        lines[(str(g["pattern"]), g["length"], g["causal"])].append(g)
    both = len({g["causal"] for g in groups}) > 1
    fig, ax = plt.subplots(figsize=(7.0, 4.8))
    for i, ((pattern, length, causal), gs) in enumerate(sorted(lines.items())):
        gs.sort(key=lambda g: g["degree"])
        suffix = (", causal" if causal else ", bidirectional") if both else ""
        draw_means(ax, [g["degree"] for g in gs], [g[g["metric"]] for g in gs],
                   f"{pattern} (context {length}{suffix})", "os^vDP"[i % 6])
    pairs = [c for c in comps if c["kind"] == "matched_degree" and c["metric"]]
    by_id = {g["config_id"]: g for g in groups}
    for k, c in enumerate(pairs):
        a, b = by_id.get(c["baseline"]["config_id"]), by_id.get(c["other"]["config_id"])
        if a and b:
            ax.plot([a["degree"], b["degree"]], [a[a["metric"]]["mean"], b[b["metric"]]["mean"]], ls=":", lw=1,
                    color="0.4", label="matched-degree pair" if k == 0 else None)
    finish_means(fig, ax, "mean token in-degree", metric_name(groups), "Degree vs BPC", "degree_vs_bpc", out_dir,
                 written)


def forward_flops_per_token(r):
    """Forward FLOPs per token of a train record's model, as model.cpp computes it: every layer projects q, k, v
    (2 d^2 each) of every node (tokens and extra nodes) and runs 4 d per attended pair; o (2 d^2) and the FFN
    (4 d d_ff) run on every node except in the last layer, where only tokens continue; then 2 d 256 for the logits.
    Dense baselines attend (T + 1) / 2 keys per token (causal). None when the record lacks a field."""
    d, f, layers, t = r.get("dim"), r.get("ffn"), r.get("layers"), r.get("length")
    g = r.get("graph") or {}
    if not all(isinstance(x, int) and x > 0 for x in (d, f, layers, t)):
        return None
    nodes = g.get("n_nodes") or t
    edges = g.get("n_edges") or t * (t + 1) // 2
    per_layer_all = nodes * (6 * d * d) + 4 * d * edges
    rest = (2 * d * d + 4 * d * f)
    total = layers * per_layer_all + (layers - 1) * nodes * rest + t * rest + t * 2 * d * 256
    return total / t


def plot_flops_bpc(groups, records, out_dir, written):
    """Figure 5 against forward FLOPs per token instead of degree: what each pattern costs to run."""
    flops = {}
    for r in records:
        v = forward_flops_per_token(r) if r.get("kind") == "train" else None
        if v:
            flops[seed_groups.config_of(r)] = v
    groups = [g for g in groups if g["metric"] and g["config_id"] in flops and g["degree"]]
    if not any(len({g["pattern"] for g in groups if g["length"] == n}) > 1 for n in {g["length"] for g in groups}):
        return  # drawn where patterns meet at one context (Figure 5), not for one pattern over contexts
    lines = defaultdict(list)
    for g in groups:
        lines[(str(g["pattern"]), g["length"])].append(g)
    fig, ax = plt.subplots(figsize=(7.0, 4.8))
    for i, ((pattern, length), gs) in enumerate(sorted(lines.items())):
        gs.sort(key=lambda g: flops[g["config_id"]])
        draw_means(ax, [flops[g["config_id"]] / 1e6 for g in gs], [g[g["metric"]] for g in gs],
                   f"{pattern} (context {length})", "os^vDP"[i % 6])
    finish_means(fig, ax, "forward MFLOP per token (projections of every node, attention, FFN, logits)",
                 metric_name(groups), "Forward compute vs BPC", "flops_vs_bpc", out_dir, written)
    return {cid: v for cid, v in flops.items()}


def plot_task_distance(tgroups, out_dir, written):
    """Accuracy per distance bucket, one panel per (task, context), each pattern's unreachable buckets shaded."""
    panels_of = defaultdict(list)
    for g in tgroups:
        if g["buckets"]:
            panels_of[(g["task"], g["length"])].append(g)
    if not panels_of:
        return
    keys = sorted(panels_of, key=lambda k: (str(k[0]), k[1] or 0))
    patterns = sorted({str(g["pattern"]) for gs in panels_of.values() for g in gs})
    fig, axes = panels(len(keys))
    for ax, key in zip(axes, keys):
        gs = panels_of[key]
        chance = gs[0]["chance"]
        ax.axhline(chance, color="0.3", ls="--", lw=1, label="chance")
        band = 0.06 / max(1, len(patterns))
        for g in gs:
            i = patterns.index(str(g["pattern"]))  # one colour, marker and band row per pattern in every panel
            ax.set_prop_cycle(color=[plt.get_cmap("tab10").colors[i % 10]])
            xs = [math.sqrt(b["lo"] * b["hi"]) for b in g["buckets"]]
            colour = draw_means(ax, xs, [b["accuracy"] for b in g["buckets"]], str(g["pattern"]), "os^vDP"[i % 6])
            # A band under the curves: where this pattern's graph reaches no sampled query within its layers.
            for b in g["buckets"]:
                if b["fraction_reachable"] == 0:
                    ax.axvspan(b["lo"] / 1.15, b["hi"] * 1.15, ymin=i * band, ymax=(i + 1) * band, color=colour,
                               alpha=0.7, lw=0)
        ax.set_xscale("log", base=2)
        ax.set_ylim(-0.02, 1.02)
        ax.set_xlabel("key-to-query distance")
        ax.set_ylabel("test accuracy on answers")
        params = "; ".join(f"{g['label']}" for g in gs if g["label"] != g["pattern"])
        ax.set_title(f"{key[0]}, context {key[1]}: bands = beyond reach ({gs[0]['layers']} layers)\n{params}",
                     fontsize=8)
        ax.grid(True, which="both", alpha=0.3)
    shared_legend(fig, axes)  # panels() already hid the grid's unused axes
    save(fig, out_dir, "task_accuracy_vs_distance", written)


def plot_task_length(tgroups, out_dir, written):
    lines = defaultdict(list)
    for g in tgroups:
        lines[(g["task"], str(g["label"]))].append(g)
    lines = {k: sorted(v, key=lambda g: g["length"]) for k, v in lines.items() if len({g["length"] for g in v}) > 1}
    if not lines:
        return
    tasks = sorted({k[0] for k in lines})
    fig, axes = panels(len(tasks))
    for ax, task in zip(axes, tasks):
        for i, ((t, label), gs) in enumerate(sorted(lines.items())):
            if t == task:
                draw_means(ax, [g["length"] for g in gs], [g["test_accuracy"] for g in gs], label, "os^vDP"[i % 6])
        ax.axhline(next(g["chance"] for (t, _), gs in lines.items() if t == task for g in gs), color="0.3", ls="--",
                   lw=1, label="chance")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("context")
        ax.set_ylabel("test accuracy on answers")
        ax.set_title(task, fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
    shared_legend(fig, axes)  # panels() already hid the grid's unused axes
    save(fig, out_dir, "task_accuracy_vs_length", written)


def plot_task_learning_curves(tgroups, out_dir, written):
    """One panel per task group: every seed's valid accuracy against the step, chance, the trained gate's bar where it
    differs (MQAR: 1/pairs), and the mark after which flattening is judged."""
    def bars(g):
        floor = task_groups.trained_floor(next(iter(g["per_seed"].values())), g["chance"])

        def decorate(ax):
            ax.axhline(g["chance"], color="0.3", ls="--", lw=0.8, label="chance")
            if floor != g["chance"]:
                ax.axhline(floor, color="0.3", ls=":", lw=0.8, label="one of the sequence's values")
            ax.set_ylim(-0.02, 1.02)
        return decorate

    cases = []
    for g in tgroups:
        runs = sorted(g["per_seed"].items(), key=lambda kv: (not isinstance(kv[0], int), kv[0] or 0))
        title = f"{g['task']}: {g['label']}, context {g['length']}: flattened {task_groups.passing(g, 'not flattened')}"
        cases.append((title, runs, bars(g)))
    draw_seed_curves(cases, lambda r: stats.valid_curve(r.get("evals"), "accuracy"), "valid accuracy on answers",
                     "Task learning curves (flattened: less than "
                     f"{100 * task_groups.FLAT_ACCURACY:.0f} points of valid accuracy gained after the mark)",
                     "task_learning_curves", out_dir, written)


def plot_context_bpc(groups, out_dir, written):
    lines = defaultdict(list)
    for g in groups:
        if g["metric"] and isinstance(g["length"], int):
            lines[(str(g["label"]), g["causal"])].append(g)
    lines = {k: sorted(v, key=lambda g: g["length"]) for k, v in lines.items() if len({g["length"] for g in v}) > 1}
    if not lines:
        return
    both = len({k[1] for k in lines}) > 1
    fig, ax = plt.subplots(figsize=(7.0, 4.8))
    for i, ((label, causal), gs) in enumerate(sorted(lines.items())):
        suffix = (" causal" if causal else " bidirectional") if both else ""
        draw_means(ax, [g["length"] for g in gs], [g[g["metric"]] for g in gs], label + suffix, "os^vDP"[i % 6])
    finish_means(fig, ax, "context length", metric_name([g for gs in lines.values() for g in gs]),
                 "Context length vs BPC", "context_vs_bpc", out_dir, written)


def draw_seed_curves(cases, curve_of, ylabel, suptitle, name, out_dir, written):
    """One panel per (title, [(seed, record)], decorate) case: every seed's curve_of(record) [(step, value)], what
    decorate(ax) adds, and the mark after which flattening is judged. Cases without a curve get no panel."""
    drawn = []
    for title, runs, decorate in cases:
        per_seed = [(seed, curve_of(r), r.get("steps")) for seed, r in runs]
        per_seed = [c for c in per_seed if c[1]]
        if per_seed:
            drawn.append((title, per_seed, decorate))
    if not drawn:
        return
    fig, axes = panels(len(drawn), cols=3)
    for ax, (title, per_seed, decorate) in zip(axes, drawn):
        for seed, pts, _ in per_seed:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=".", ms=3, lw=1,
                    label=f"seed {seed}" if seed is not None else "one run")
        decorate(ax)
        steps = [s for _, _, s in per_seed if stats.is_number(s)]
        if steps:
            ax.axvline(stats.FLAT_FRACTION * max(steps), color="0.5", ls="--", lw=0.8,
                       label=f"{stats.FLAT_FRACTION:.0%} of steps")
        ax.set_title(title, fontsize=8)
        ax.set_xlabel("step")
        ax.set_ylabel(ylabel)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=6)
    fig.suptitle(suptitle)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.4 / fig.get_figheight()))  # room for the suptitle above the panels
    save(fig, out_dir, name, written)


def plot_learning_curves(groups, records, out_dir, written):
    """One panel per group: every seed's valid evaluations, and the mark after which flattening is judged."""
    rows = seed_groups.train_rows(records)
    cases = []
    for g in groups:
        ok = [r for r in rows[g["config_id"]] if r.get("status") == "ok"]
        flat = g["flattened"]
        cases.append((f"{g['label']}, context {g['length']}: flattened {flat['count']}/{flat['of']}",
                      [(seed_groups.seed_of(r), r) for r in ok], lambda ax: None))
    draw_seed_curves(cases, lambda r: stats.valid_curve(r.get("evals")), "valid BPC",
                     f"Learning curves (flattened: less than {stats.FLAT_THRESHOLD} BPC gained after the mark)",
                     "learning_curves", out_dir, written)


def plot_context_lens(groups, out_dir, written):
    lensed = [g for g in groups if g["context_lens"]]
    if not lensed:
        return
    fig, ax = plt.subplots(figsize=(7.0, 4.8))
    for i, g in enumerate(lensed):
        cl = g["context_lens"]
        draw_means(ax, [e["context"] for e in cl], cl, f"{g['label']} (context {g['length']})", "os^vDP"[i % 6])
    finish_means(fig, ax, "bytes of context each scored byte may see", "valid BPC", "BPC vs available context",
                 "context_lens", out_dir, written)


def bench_rows(run_dir):
    """(name, n, gemm_fraction) from Google Benchmark JSON files saved in the run directory."""
    rows = []
    for path in sorted(glob.glob(os.path.join(run_dir, "*.json"))):
        if os.path.basename(path) == "run.json":
            continue
        try:
            with open(path) as f:
                doc = json.load(f)
        except (OSError, ValueError):
            continue
        if not isinstance(doc, dict) or not isinstance(doc.get("benchmarks"), list):
            continue
        for b in doc["benchmarks"]:
            frac = b.get("gemm_fraction")
            if not isinstance(frac, (int, float)) or b.get("run_type") == "aggregate":
                continue
            name = b.get("run_name", b.get("name", "?"))
            parts = name.split("/")
            n = None
            for p in parts:
                if p.startswith("n="):
                    try:
                        n = int(p[2:])
                    except ValueError:
                        pass
            series_name = "/".join(p for p in parts if not p.startswith("n=") and not p.startswith("real_time"))
            rows.append((series_name, n, float(frac)))
    return rows


def plot_gemm_fraction(ok, run_dir, out_dir, written):
    rows = bench_rows(run_dir)
    source = "bench kernels"
    if not rows:
        source = "attention records"
        for r in ok:
            if r.get("kind") == "attention" and isinstance(r.get("gemm_fraction"), (int, float)):
                mode = "fwd" if r.get("mode") == "forward" else "fwd+bwd"
                causal = " causal" if r.get("causal") else ""
                rows.append((f"{mode}{causal}/{r.get('label')}", r.get("length"), r["gemm_fraction"]))
    if not rows:
        return None
    grouped = defaultdict(list)
    for name, n, frac in rows:
        grouped[name].append((n if n is not None else 0, frac))
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    for name, v in sorted(grouped.items()):
        v.sort()
        ax.plot([p[0] for p in v], [100.0 * p[1] for p in v], marker="o", ms=3, label=name)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("sequence length")
    ax.set_ylabel("% of the fp32 GEMM FLOP rate")
    ax.set_title(f"Attention FLOP rate as a fraction of GEMM ({source})")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5))
    save(fig, out_dir, "gemm_fraction", written)
    return source


def plot_graphs(run_dir, out_dir, written):
    kinds = list(KIND_COLOURS)
    cmap = ListedColormap(["#ffffff"] + [KIND_COLOURS[k] for k in kinds])
    for path in sorted(glob.glob(os.path.join(run_dir, "graphs", "*.json"))):
        try:
            with open(path) as f:
                g = json.load(f)
        except (OSError, ValueError) as e:
            print(f"note: {path}: {e}", file=sys.stderr)
            continue
        n = g["n"]
        nodes = g["nodes"]
        kind_of = [kinds.index(nd["kind"]) + 1 if nd["kind"] in kinds else 1 for nd in nodes]
        grid = [[0] * len(nodes) for _ in range(n)]
        for src, dst, _rel in g["edges"]:
            if dst < n:
                grid[dst][src] = kind_of[src]
        fig, ax = plt.subplots(figsize=(max(4.0, 4.0 * len(nodes) / n), 4.2))
        ax.imshow(grid, cmap=cmap, vmin=0, vmax=len(kinds), interpolation="nearest", aspect="equal")
        if len(nodes) > n:
            ax.axvline(n - 0.5, color="black", lw=0.6)
        params = ",".join(f"{k}={v}" for k, v in sorted(g.get("params", {}).items()))
        ax.set_title(f"{g['pattern']}({params}) n={n} {'causal' if g.get('causal') else 'bidirectional'}", fontsize=9)
        ax.set_xlabel("source node (tokens, then extra nodes)")
        ax.set_ylabel("destination token")
        present = sorted({kinds[k - 1] for row in grid for k in row if k})
        handles = [plt.Rectangle((0, 0), 1, 1, color=KIND_COLOURS[k]) for k in present]
        ax.legend(handles, present, fontsize=7, loc="upper right", framealpha=0.8)
        save(fig, out_dir, "graph_" + os.path.splitext(os.path.basename(path))[0], written)


def fmt_mib(v):
    return f"{v / MIB:.1f}" if isinstance(v, (int, float)) and not isinstance(v, bool) else "-"


def fmt_num(v, f="{:.4f}"):
    return f.format(v) if seed_groups.number(v) is not None else "-"


def fmt_mean_sd(s):
    if not s["n"]:
        return "-"
    return fmt_num(s["mean"]) + (f" ± {fmt_num(s['sd'])}" if s["sd"] is not None else " (1 seed)")


def fmt_ci(ci, n):
    if ci is None:
        return "none (1 seed)" if n == 1 else "none (no seeds)" if n == 0 else "-"
    return f"[{fmt_num(ci[0])}, {fmt_num(ci[1])}]"


def fmt_seeds(g):
    seeds = ", ".join("seed not recorded" if s is None else str(s) for s in g["seeds"])
    lost = ", ".join(x["status"] if x["seed"] is None else f"seed {x['seed']} {x['status']}" for x in g["not_ok"])
    return f"{g['n']} ({seeds}{'; ' + lost if lost else ''})"


def quality_section(groups):
    lines = ["## Quality over seeds", "",
             "Mean ± sample sd over seeds and the two-sided 95% Student-t interval of the mean (none with one seed). "
             f"Lens drop: valid BPC with {seed_groups.LENS_SHORT} bytes of context minus with the whole context. "
             f"Flattened: runs whose valid BPC gained less than {stats.FLAT_THRESHOLD} after "
             f"{stats.FLAT_FRACTION:.0%} of their steps, of those with evaluations on both sides.", "",
             "| label | context | degree | seeds | test BPC | 95% CI | valid BPC | lens drop | flattened |",
             "|---|---|---|---|---|---|---|---|---|"]
    for g in groups:
        target = f" (target {fmt_num(g['degree_target'], '{:.1f}')})" if g["degree_target"] is not None else ""
        flat = f"{g['flattened']['count']}/{g['flattened']['of']}" if g["flattened"]["of"] else "-"
        lines.append(f"| {g['label']} | {g['length']} | {fmt_num(g['degree'], '{:.1f}')}{target} | {fmt_seeds(g)} | "
                     f"{fmt_mean_sd(g['test_bpc'])} | {fmt_ci(g['test_bpc']['ci95'], g['test_bpc']['n'])} | "
                     f"{fmt_mean_sd(g['valid_bpc'])} | {fmt_mean_sd(g['lens_drop'])} | "
                     f"{flat} |")
    return lines + [""]


def fmt_p(v):
    return "-" if v is None else ("< 0.001" if v < 0.001 else f"{v:.3f}")


VERDICT_RULE = ("Verdicts: **supports** / **contradicts** only when every run behind the comparison is flattened "
                f"(valid BPC gained less than {stats.FLAT_THRESHOLD} after {stats.FLAT_FRACTION:.0%} of its steps) and "
                f"ends at or below {stats.VALID_BPC_BOUND} valid BPC, and the difference's 95% interval excludes zero "
                f"with a Holm-adjusted p below {stats.ALPHA:.2f} within its family (one family per kind of comparison); "
                "otherwise **inconclusive**, with the reason. The raw interval and its direction (raw: supports / "
                "contradicts / unresolved) are shown beside it.")


def comparison_section(comps):
    pairs = [c for c in comps if "baseline" in c]
    lines = ["## Paired comparisons", "",
             "Difference = other − baseline, paired by seed over the seeds both have, on test BPC (valid where no "
             "test); p: two-sided paired t test; Holm p: adjusted within the comparison's family. " + VERDICT_RULE,
             "", "| comparison | baseline | other | context | degree (other / baseline) | metric | n | mean diff | "
                 "95% CI | p | Holm p | paper | raw | verdict |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for c in pairs:
        a, b = c["baseline"], c["other"]
        context = a["length"] if a["length"] == b["length"] else f"{a['length']} → {b['length']}"
        degrees = f"{fmt_num(b['degree'], '{:.1f}')} / {fmt_num(a['degree'], '{:.1f}')}"
        if "degree_ratio" in c:
            degrees += f" ({c['degree_ratio']:.2f}x)"
        lines.append(f"| {c['kind'].replace('_', ' ')} ({c['pair']}) | {a['label']} | {b['label']} | {context} | "
                     f"{degrees} | {c['metric'] or '-'} | {c['n']} | {fmt_num(c['mean'], '{:+.4f}')} | "
                     f"{fmt_ci(c['ci95'], c['n'])} | {fmt_p(c['p'])} | {fmt_p(c['p_holm'])} | {c['paper']} | "
                     f"{c['raw_verdict']} | **{c['verdict']}**: {c['verdict_reason']} |")
    claims = [c for c in comps if "baseline" not in c]
    if claims:
        lines += ["", "### One test per claim", "",
                  "Figure 5: per seed, the matched-degree difference (pattern − bpt) averaged over the pattern's "
                  "degrees, then its interval over seeds. Table 4: per seed, the least-squares slope of BPC against "
                  "log2 context (BPC per doubling), then its t-interval over seeds.", "",
                  "| claim | what | contexts | metric | n | mean | 95% CI | p | Holm p | raw | verdict |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
        for c in claims:
            what = c["difference"]
            contexts = c.get("lengths") or c.get("length")
            lines.append(f"| {c['paper']} | {what} ({c.get('label') or c.get('pattern')}) | {contexts} | "
                         f"{c['metric']} | {c['n']} | {fmt_num(c['mean'], '{:+.4f}')} | {fmt_ci(c['ci95'], c['n'])} | "
                         f"{fmt_p(c['p'])} | {fmt_p(c['p_holm'])} | {c['raw_verdict']} | **{c['verdict']}**: "
                         f"{c['verdict_reason']} |")
    return lines + [""]


def fmt_pct_ci(s):
    if not s["n"]:
        return "-"
    text = f"{100 * s['mean']:.1f}"
    return text + (f" [{100 * s['ci95'][0]:.1f}, {100 * s['ci95'][1]:.1f}]" if s["ci95"] else " (1 seed)")


def fmt_tokens(g):
    """A group's mean tokens/s, one mean per CPU where its seeds ran on more than one (named as before " (family")."""
    by_cpu = g.get("tokens_per_s_by_cpu") or {}
    if len(by_cpu) <= 1:
        return fmt_num(g["tokens_per_s"]["mean"], "{:.0f}")
    return "; ".join(f"{fmt_num(s['mean'], '{:.0f}')} on {cpu.split(' (')[0]} (n={s['n']})"
                     for cpu, s in by_cpu.items())


def task_section(tgroups, tcomps):
    lines = ["## Generated tasks", "",
             "Accuracy (%) on answer positions of held-out sequences (test split), mean over seeds with its 95% "
             "Student-t interval. Reach: the share of sampled query positions whose planted key and value both reach "
             "the query through the pattern's graph in at most `layers` hops (extra nodes included; span nodes start "
             "empty, relay and sentence nodes as their tokens' mean). Prediction (reach is necessary, not sufficient): "
             "where no query is reached, accuracy must not rise above chance: **holds** when the pooled accuracy over "
             "seeds lies in the 95% binomial interval of chance, **holds (below chance)** under it (the model names a "
             "value it can see: in MQAR always another key's), **fails** above it; where reached, **retrieves** when the "
             "pooled 95% Wilson interval lies above chance (for MQAR above 1/pairs, what naming one of the "
             "sequence's values scores; between the two, **one of the values**), **at chance** otherwise.", "",
             "Gates (a contrast's verdict needs every run behind it to pass both): **trained**, the run retrieves "
             "within its reach (accuracy pooled over the distances every query reaches, above chance's 95% "
             "interval; for MQAR above 1/pairs, what naming one of the sequence's values scores, and only with answers "
             "hidden: revealed after their queries, a model names an answer by ruling out those shown); **flattened**, "
             "valid accuracy gained less than "
             f"{100 * task_groups.FLAT_ACCURACY:.0f} points over the last 20% of the steps.", "",
             "| task | pattern | context | degree | seeds | test accuracy | chance | trained | flattened | tokens/s |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for g in tgroups:
        lines.append(f"| {g['task']} | {g['label']} | {g['length']} | {fmt_num(g['degree'], '{:.1f}')} | {g['n']} | "
                     f"{fmt_pct_ci(g['test_accuracy'])} | {100 * g['chance']:.1f} | "
                     f"{task_groups.passing(g, 'not trained')} | {task_groups.passing(g, 'not flattened')} | {fmt_tokens(g)} |")
    lines += ["", "### By distance, with the reach prediction", "",
              "| task | pattern | context | distance | accuracy | pooled answers | reach | hops min..max | prediction |",
              "|---|---|---|---|---|---|---|---|---|"]
    holds = defaultdict(lambda: [0, 0])
    for g in tgroups:
        for b in g["buckets"]:
            dist = str(b["lo"]) if b["lo"] == b["hi"] else f"{b['lo']}-{b['hi']}"
            hops = f"{b['min_hops'] if b['min_hops'] is not None else '-'}.." \
                   f"{b['max_hops'] if b['max_hops'] is not None else 'unreachable'}"
            reach = "-" if b["fraction_reachable"] is None else f"{100 * b['fraction_reachable']:.0f}%"
            lines.append(f"| {g['task']} | {g['label']} | {g['length']} | {dist} | {fmt_pct_ci(b['accuracy'])} | "
                         f"{b['answers']} | {reach} | {hops} | {b['prediction']} |")
            if b["prediction"].startswith("holds") or b["prediction"] == "fails":
                holds[(g["task"], g["length"], g["label"])][0 if b["prediction"].startswith("holds") else 1] += 1
    said = []
    for g in tgroups:
        h, f = holds.get((g["task"], g["length"], g["label"]), (0, 0))
        where = f"{g['task']} at {g['length']}, {g['label']}: "
        if h + f == 0:
            said.append(where + "every distance within reach (nothing for the prediction to rule out)")
        else:
            said.append(where + f"holds in {h} of {h + f} buckets beyond reach" +
                        ("" if not f else " (fails where accuracy leaves chance's interval: see the table)"))
    lines += ["", "Where the reach prediction holds, per pattern:", ""] + [f"- {x}" for x in said] + [""]
    if tcomps:
        lines += ["### bpt against the other patterns at matched degree, per distance", "",
                  "Difference bpt − other in accuracy, paired by seed, for patterns within "
                  f"{task_groups.MATCHED_RATIO}x of a bpt degree; per (task, context, pattern) the buckets beyond the "
                  "other pattern's reach form one family and those within it another, each Holm-corrected; verdict "
                  "supports = bpt higher.", "",
                  "| task | context | distance | other | beyond its reach | n | mean diff (points) | 95% CI | p | "
                  "Holm p | verdict |", "|---|---|---|---|---|---|---|---|---|---|---|"]
        for c in tcomps:
            dist = str(c["lo"]) if c["lo"] == c["hi"] else f"{c['lo']}-{c['hi']}"
            ci = f"[{100 * c['ci95'][0]:+.1f}, {100 * c['ci95'][1]:+.1f}]" if c["ci95"] else "-"
            lines.append(f"| {c['task']} | {c['length']} | {dist} | {c['other']} | "
                         f"{'yes' if c['other_beyond_reach'] else 'no'} | {c['n']} | "
                         f"{fmt_num(None if c['mean'] is None else 100 * c['mean'], '{:+.1f}')} | {ci} | "
                         f"{fmt_p(c['p'])} | {fmt_p(c['p_holm'])} | **{c['verdict']}**: {c['verdict_reason']} |")
        lines.append("")
    return lines + [""]


def contended_section(records):
    """report.md's list of the points timed on a busy machine, with the figures that said so."""
    busy = contended(records)
    if not busy:
        return []
    rule = next((r["contention"].get("rule") for r in busy if isinstance(r.get("contention"), dict)), None)
    lines = ["## Contended points", "",
             f"{len(busy)} of {sum(1 for r in records if 'busy_machine' in r)} timed points ran on a busy machine: "
             "their timings reflect the load, not the code (hollow markers in the figures). Rerun them on a quiet "
             "machine.", ""]
    if rule:
        lines += [f"Rule: {rule}.", ""]
    lines += ["| label | kind | mode | length | threads | tokens/s | cpu share | other runnable | run wait | why |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for r in busy:
        c = r.get("contention") if isinstance(r.get("contention"), dict) else {}

        def num(v, f):
            return f.format(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else "-"
        why = "; ".join(x for x in r.get("busy_reasons", []) if isinstance(x, str)) or "-"
        lines.append(f"| {r.get('label')} | {r.get('kind')} | {r.get('mode', '-')} | {r.get('length')} | "
                     f"{r.get('threads_used', r.get('threads'))} | {num(r.get('tokens_per_s'), '{:.0f}')} | "
                     f"{num(r.get('cpu_share'), '{:.2f}')} | {num(c.get('runnable_others'), '{:g}')} | "
                     f"{num(c.get('run_wait_share'), '{:.0%}')} | {why.replace('|', '/')} |")
    return lines + [""]


def machines_section(run, records):
    """A resumed run whose later sessions ran on another CPU or build: each such session, and which points ran on
    which CPU, since the table above names the first session's machine only and speeds compare within one CPU."""
    keys = ("cpu", "simd_target", "commit")
    later = [e for e in run.get("resumed", []) if isinstance(e, dict)
             and any(k in e and e[k] != run.get(k) for k in keys)]
    by_cpu = defaultdict(list)
    for r in records:
        if r.get("status") == "ok" and isinstance(r.get("cpu"), str):
            seed = seed_groups.seed_of(r)
            point = f"{r.get('label')} n={r.get('length')}" + (f" seed {seed}" if seed is not None else "")
            by_cpu[r["cpu"]].append(point)
    if not later and len(by_cpu) <= 1:
        return []
    lines = []
    if later:
        lines += ["Resumed on another machine or build: " + "; ".join(
            f"{e.get('time', '?')} on {e.get('cpu', '?')} ({e.get('simd_target', '?')}), commit {e.get('commit', '?')}"
            for e in later) + ".", ""]
    if len(by_cpu) > 1:
        # Only the task table averages over seeds; the other tables list each point's own tokens/s.
        means = " (the task table gives one mean per CPU)" if any(task_groups.is_task_record(r) for r in records) else ""
        lines += [f"The points ran on {len(by_cpu)} CPUs; tokens/s compare only among points of one CPU{means}:", ""]
        lines += [f"- {cpu}: {', '.join(points)}" for cpu, points in sorted(by_cpu.items())] + [""]
    return lines


def write_report(run_dir, run, records, problems, written, gemm_source, groups, comps, tgroups=(), tcomps=()):
    lines = [f"# {run.get('scenario_name', os.path.basename(os.path.abspath(run_dir)))}", ""]
    scenario = run.get("scenario", {})
    if scenario.get("description"):
        lines += [scenario["description"], ""]
    # The description is the file's prose; a run made with --set differs from it, so state what ran.
    settings = [f"`{key}` {json.dumps(scenario[key], sort_keys=True)}" for key in ("model", "train")
                if isinstance(scenario.get(key), dict)]
    if settings:
        lines += ["Settings as run (the scenario with any `--set` applied): " + "; ".join(settings) + ".", ""]
    lines += ["| field | value |", "|---|---|"]
    for key in ("kind", "started", "commit", "build_type", "compiler", "libtorch", "blas", "cpu", "simd_target",
                "hardware_threads", "usable_cpus", "omp_wait_policy", "cuda_available", "scenario_sha256"):
        if key in run:
            lines.append(f"| {key} | {run[key]} |")
    lines.append("")
    lines += machines_section(run, records)
    counts = defaultdict(int)
    for r in records:
        counts[r.get("status", "?")] += 1
    lines += ["Points: " + ", ".join(f"{v} {k}" for k, v in sorted(counts.items())), ""]
    if problems:
        lines += ["Record problems:", ""] + [f"- {p}" for p in problems] + [""]

    measured = [r for r in records if r.get("kind") in ("attention", "model")]
    if measured:
        lines += ["## Throughput and memory", "",
                  "| label | mode | causal | length | batch | degree | tokens/s | spread | peak MiB | analytic MiB | status |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in measured:
            tps = r.get("tokens_per_s")
            status = r.get("status", "?")
            if status != "ok":
                status += f": {r.get('reason', '')}"
            lines.append("| {} | {} | {} | {} | {} | {:.1f} | {} | {} | {} | {} | {} |".format(
                r.get("label"), r.get("mode"), "yes" if r.get("causal") else "no", r.get("length"), r.get("batch"),
                float(r.get("degree", 0.0)),
                (f"{tps:.0f}" + (" (busy)" if r.get("busy_machine") is True else "")) if isinstance(tps, (int, float))
                else "-",
                f"{100 * r['spread']:.1f}%" if isinstance(r.get("spread"), (int, float)) else "-",
                fmt_mib(r.get("peak_total_bytes")), fmt_mib(r.get("analytic_bytes")), status.replace("|", "/")))
        lines.append("")
    lines += contended_section(records)
    train = [r for r in records if r.get("kind") == "train" and not task_groups.is_task_record(r)]
    if train:
        lines += ["## Training runs", "",
                  "| label | context | seed | degree | degree target | steps | valid BPC | test BPC | tokens/s "
                  "| status |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for r in train:
            def num(k, f="{:.4f}"):
                v = r.get(k)
                return f.format(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else "-"
            status = r.get("status", "?")
            if status != "ok":
                status += f": {r.get('reason', '')}"
            lines.append(f"| {r.get('label')} | {r.get('length')} | {num('seed', '{}')} | {num('degree', '{:.1f}')} | "
                         f"{num('degree_target', '{:.1f}')} | {num('steps', '{}')} | {num('valid_bpc')} | "
                         f"{num('test_bpc')} | {num('tokens_per_s', '{:.0f}')} | {status.replace('|', '/')} |")
        lines.append("")
    if groups:
        lines += quality_section(groups)
    if comps:
        lines += comparison_section(comps)
    if tgroups:
        lines += task_section(tgroups, tcomps)
    if written:
        lines += ["## Figures", ""]
        if gemm_source:
            lines += [f"GEMM fraction drawn from {gemm_source}.", ""]
        lines += [f"![{name}](plots/{name}.png)" for name in written] + [""]
    with open(os.path.join(run_dir, "report.md"), "w") as f:
        f.write("\n".join(lines))


def write_json(path, doc):
    """Written whole to a temporary file and renamed, so a crash never leaves half a summary."""
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1, allow_nan=False)
        f.write("\n")
    os.replace(tmp, path)


def main(argv):
    if len(argv) != 2 or argv[1] in ("-h", "--help"):
        print(__doc__)
        return 0 if len(argv) == 2 else 2
    run_dir = argv[1]
    if not os.path.isdir(run_dir):
        print(f"plot_run.py: {run_dir}: not a directory", file=sys.stderr)
        return 2
    records, problems = seed_groups.read_records(os.path.join(run_dir, "records.jsonl"))
    for p in problems:
        print(f"warning: {p}", file=sys.stderr)
    run = {}
    try:
        with open(os.path.join(run_dir, "run.json")) as f:
            run = json.load(f)
    except (OSError, ValueError):
        pass
    out_dir = os.path.join(run_dir, "plots")
    os.makedirs(out_dir, exist_ok=True)
    ok = [r for r in records if r.get("status") == "ok"]
    groups = seed_groups.group_train(records, lambda msg: print(f"warning: {msg}", file=sys.stderr))
    comps = seed_groups.comparisons(groups)
    tgroups = task_groups.group_tasks(records)
    tcomps = task_groups.contrasts(tgroups)
    if groups or tgroups:
        doc = seed_groups.stats_document(groups, comps)
        if tgroups:
            doc["task_rule"] = task_groups.__doc__
            doc["task_groups"] = [{k: v for k, v in g.items() if k != "per_seed"} for g in tgroups]
            doc["task_contrasts"] = tcomps
        write_json(os.path.join(run_dir, "stats.json"), doc)
    written = []
    plot_throughput(ok, out_dir, written)
    plot_memory(ok, out_dir, written)
    plot_degree_bpc(groups, comps, out_dir, written)
    plot_flops_bpc(groups, records, out_dir, written)
    plot_context_bpc(groups, out_dir, written)
    plot_task_distance(tgroups, out_dir, written)
    plot_task_length(tgroups, out_dir, written)
    plot_task_learning_curves(tgroups, out_dir, written)
    plot_learning_curves(groups, records, out_dir, written)
    plot_context_lens(groups, out_dir, written)
    gemm_source = plot_gemm_fraction(ok, run_dir, out_dir, written)
    plot_graphs(run_dir, out_dir, written)
    write_report(run_dir, run, records, problems, written, gemm_source, groups, comps, tgroups, tcomps)
    print(f"plots: {len(written)} figures (PNG and SVG) in {out_dir}; report {os.path.join(run_dir, 'report.md')}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
