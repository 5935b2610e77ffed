# seed_groups.py: a run's train records grouped by configuration over seeds, and the paired comparisons (stats.json).
"""Train records (one row per seed) grouped by `config_id`, summarized over seeds, and paired for the paper's claims.

read_records(path) -> records, problems (a truncated last line ignored and reported);
group_train(records, warn) -> groups; comparisons(groups) -> comparisons; stats_document(groups, comparisons).
Records without `config_id`/`seed` (older runs) are one seed each, grouped by `point`. Comparisons are paired
by seed on test BPC, or valid BPC where the two groups share no test values:
  matched_degree  each non-bpt group against the bpt group of nearest degree at its length (paper: bpt lower)
  degree_trend    within a pattern at one length, by degree: consecutive and lowest vs highest (higher degree lower)
  context_trend   one label at several lengths: consecutive and shortest vs longest (longer context lower)
and one test per paper claim:
  matched_degree_mean  per non-bpt pattern and length, the matched-degree difference averaged over its degrees
                       seed by seed (Figure 5: bpt lower)
  context_slope        per label, each seed's least-squares slope of BPC against log2 context (Table 4: negative)
Each kind is one family: its p-values are Holm-corrected together. A verdict is "supports" / "contradicts" only when
every run behind it passes the gates (flattened, valid BPC within the bound) and its interval excludes zero after the
correction; otherwise "inconclusive" with the reason.
"""
import json
import math
import os
from collections import defaultdict

import stats

METRICS = ("test_bpc", "valid_bpc")
LENS_SHORT = 16  # the "lens drop" compares the BPC with only this many bytes of context against the full context
PAPER_SAYS = {
    "matched_degree": (+1, "bpt lower at matched degree"),
    "degree_trend": (-1, "higher degree lower BPC"),
    "context_trend": (-1, "longer context lower BPC"),
    "matched_degree_mean": (+1, "bpt lower at matched degree, averaged over degrees"),
    "context_slope": (-1, "BPC falls with log2 context (per-seed slope)"),
}


def read_records(path):
    """Records of a JSON-lines file and the problems found (a truncated last line is ignored)."""
    records, problems = [], []
    if not os.path.exists(path):
        return records, problems
    with open(path, "rb") as f:
        data = f.read().decode("utf-8", errors="replace")
    lines = data.split("\n")
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        if i == len(lines) - 1:  # no newline after it: a write cut short
            problems.append(f"{path}: line {i + 1}: truncated last line ignored ({len(line)} bytes)")
            continue
        try:
            rec = json.loads(line)
            if not isinstance(rec, dict):
                raise ValueError("not an object")
            records.append(rec)
        except ValueError:
            problems.append(f"{path}: line {i + 1}: not a JSON record, ignored")
    return records, problems


def number(v):
    return v if stats.is_number(v) else None


def config_of(r):
    return r.get("config_id") or r.get("point") or f"index={r.get('index')}"


def seed_of(r):
    return r.get("seed") if isinstance(r.get("seed"), int) and not isinstance(r.get("seed"), bool) else None


def train_rows(records):
    """config id -> that configuration's train records, in record order."""
    rows = defaultdict(list)
    for r in records:
        if r.get("kind") == "train" and not isinstance(r.get("task"), dict):  # task runs: task_groups.py
            rows[config_of(r)].append(r)
    return rows


def lens_drop(context_lens, length):
    """BPC with LENS_SHORT bytes of context minus BPC with the whole context; None when either is missing."""
    bpc = {e.get("context"): number(e.get("bpc")) for e in context_lens or [] if isinstance(e, dict)}
    if bpc.get(LENS_SHORT) is None or bpc.get(length) is None:
        return None
    return bpc[LENS_SHORT] - bpc[length]


def seed_row(r):
    flat = stats.flattened(r.get("evals"), r.get("steps"))
    return {"seed": seed_of(r), "point": r.get("point"), "test_bpc": number(r.get("test_bpc")),
            "valid_bpc": number(r.get("valid_bpc")), "lens_drop": lens_drop(r.get("context_lens"), r.get("length")),
            "flat_improvement": flat[0] if flat else None, "flattened": flat[1] if flat else None,
            "steps": r.get("steps")}


def column(rows, key):
    return [row[key] for row in rows if row[key] is not None]


def context_lens_summary(ok):
    """[{context, n, mean, sd, ci95, half_width}] over the seeds, by available context."""
    by_c = defaultdict(list)
    for r in ok:
        for e in r.get("context_lens") or []:
            if isinstance(e, dict) and number(e.get("context")) is not None and number(e.get("bpc")) is not None:
                by_c[e["context"]].append(e["bpc"])
    return [dict(context=c, **stats.summary(v)) for c, v in sorted(by_c.items())]


def summarize_group(cid, ok, not_ok):
    first = ok[0]
    rows = [seed_row(r) for r in ok]
    degrees = [number(r.get("degree")) for r in ok if number(r.get("degree")) is not None]
    flat = column(rows, "flattened")
    g = {"config_id": cid, "label": first.get("label", first.get("pattern")), "pattern": first.get("pattern"),
         "length": first.get("length"), "causal": bool(first.get("causal")), "params": first.get("params"),
         "degree": stats.mean(degrees) if degrees else None, "degree_target": number(first.get("degree_target")),
         "n": len(ok), "seeds": [row["seed"] for row in rows],
         "not_ok": [{"seed": seed_of(r), "status": r.get("status"), "reason": r.get("reason")} for r in not_ok],
         "metric": next((m for m in METRICS if column(rows, m)), None),
         "lens_drop": stats.summary(column(rows, "lens_drop")), "context_lens": context_lens_summary(ok),
         "flattened": {"count": sum(flat), "of": len(flat)}, "per_seed": rows}
    for m in METRICS:
        g[m] = stats.summary(column(rows, m))
    return g


def unique_seeds(ok, cid, warn):
    """The first record of each seed (a seed twice in one configuration is reported, not averaged in)."""
    seen, out = set(), []
    for r in ok:
        if seed_of(r) in seen:
            warn(f"train record {r.get('point')}: seed {seed_of(r)} of {cid} recorded twice; the first kept")
            continue
        seen.add(seed_of(r))
        out.append(r)
    return out


def group_train(records, warn=lambda msg: None):
    """The configurations with at least one ok train record, summarized over their seeds."""
    groups = []
    for cid, rs in train_rows(records).items():
        ok = [r for r in rs if r.get("status") == "ok"]
        if ok:
            groups.append(summarize_group(cid, unique_seeds(ok, cid, warn), [r for r in rs if r.get("status") != "ok"]))
    groups.sort(key=lambda g: (g["causal"], g["length"] or 0, str(g["pattern"]), g["degree"] or 0.0, str(g["label"])))
    return groups


def by_seed(g, metric):
    return {row["seed"]: row[metric] for row in g["per_seed"] if row[metric] is not None}


def shared_metric(a, b):
    """Test BPC when the two groups share a seed with it, else valid BPC; None when neither is."""
    for m in METRICS:
        if set(by_seed(a, m)) & set(by_seed(b, m)):
            return m
    return None


def ref(g):
    return {k: g[k] for k in ("config_id", "label", "pattern", "length", "degree", "degree_target")}


def rows_of(groups, seeds):
    """The per-seed rows of `groups` for `seeds` (the runs a comparison rests on)."""
    return [row for g in groups for row in g["per_seed"] if row["seed"] in seeds]


def claim(kind, d, groups, **fields):
    """A comparison record from a summary `d` of differences: raw interval, its t-test p and the gates."""
    sign, paper = PAPER_SAYS[kind]
    ci = d["ci95"] or [None, None]
    out = {"kind": kind, "family": kind, "paper": paper, "paper_sign": sign,
           "raw_verdict": stats.verdict(ci[0], ci[1], sign), "p": stats.t_test_p(d),
           "gates_failed": stats.run_gates(rows_of(groups, set(d.get("seeds") or [])))}
    out.update(fields)
    out.update(d)  # n, seeds, mean, sd, ci95, half_width (and dropped_seeds for pairs)
    return out


def compare(kind, base, other, pair, **extra):
    """other - base paired by seed, with the raw verdict on the paper's predicted sign of that difference."""
    metric = shared_metric(base, other) or base["metric"] or other["metric"]  # n = 0 when nothing is shared
    d = stats.paired_difference(by_seed(other, metric) if metric else {}, by_seed(base, metric) if metric else {})
    return claim(kind, d, [base, other], pair=pair, baseline=ref(base), other=ref(other), metric=metric,
                 difference="other - baseline", **extra)


def ordered_pairs(items, key):
    """Consecutive pairs with a strictly larger key, then (smallest, largest) when that is not one of them."""
    items = sorted(items, key=key)
    out = [(a, b, "consecutive") for a, b in zip(items, items[1:]) if key(b) > key(a)]
    if len(items) > 2 and key(items[-1]) > key(items[0]) and (items[0], items[-1], "consecutive") not in out:
        out.append((items[0], items[-1], "extremes"))
    return out


def bucket(groups, key):
    out = defaultdict(list)
    for g in groups:
        out[key(g)].append(g)
    return out


def matched_degree(groups):
    out = []
    with_degree = [g for g in groups if g["degree"]]
    for _, gs in sorted(bucket(with_degree, lambda g: (g["length"], g["causal"])).items()):
        bpts = [g for g in gs if g["pattern"] == "bpt"]
        for g in gs:
            if g["pattern"] == "bpt" or not bpts:
                continue
            partner = min(bpts, key=lambda b: (abs(math.log(g["degree"] / b["degree"])), b["degree"]))
            out.append(compare("matched_degree", partner, g, "nearest degree",
                               degree_ratio=g["degree"] / partner["degree"]))
    return out


def degree_trend(groups):
    out = []
    with_degree = [g for g in groups if g["degree"] is not None]
    for _, gs in sorted(bucket(with_degree, lambda g: (str(g["pattern"]), g["length"], g["causal"])).items()):
        out += [compare("degree_trend", a, b, pair) for a, b, pair in ordered_pairs(gs, lambda g: g["degree"])]
    return out


def context_trend(groups):
    out = []
    with_length = [g for g in groups if isinstance(g["length"], int)]
    for _, gs in sorted(bucket(with_length, lambda g: (str(g["label"]), g["causal"])).items()):
        out += [compare("context_trend", a, b, pair) for a, b, pair in ordered_pairs(gs, lambda g: g["length"])]
    return out


def matched_degree_mean(groups, pairs):
    """Per non-bpt pattern and length: each seed's matched-degree difference averaged over the pattern's degrees
    (only seeds present in every pair), then the interval over seeds."""
    out = []
    by_key = defaultdict(list)
    for c in pairs:
        by_key[(c["other"]["pattern"], c["other"]["length"])].append(c)
    index = {g["config_id"]: g for g in groups}
    for (pattern, length), cs in sorted(by_key.items(), key=lambda kv: (str(kv[0][0]), kv[0][1] or 0)):
        metric = cs[0]["metric"]
        if metric is None or any(c["metric"] != metric for c in cs):
            continue
        per_pair = [(by_seed(index[c["other"]["config_id"]], metric), by_seed(index[c["baseline"]["config_id"]], metric))
                    for c in cs]
        seeds = sorted(set.intersection(*[set(o) & set(b) for o, b in per_pair]), key=stats._seed_order)
        diffs = [stats.mean([o[s] - b[s] for o, b in per_pair]) for s in seeds]
        d = stats.summary(diffs)
        d["seeds"] = seeds
        used = {c["other"]["config_id"] for c in cs} | {c["baseline"]["config_id"] for c in cs}
        out.append(claim("matched_degree_mean", d, [index[u] for u in used], pattern=pattern, length=length,
                         metric=metric, pairs=len(cs), difference=f"{pattern} - bpt, mean over {len(cs)} degrees"))
    return out


def context_slope(groups):
    """Per label seen at two or more lengths: each seed's slope of BPC against log2 context (seeds with every
    length only), then the interval over seeds."""
    out = []
    with_length = [g for g in groups if isinstance(g["length"], int) and g["length"] > 0]
    for (label, causal), gs in sorted(bucket(with_length, lambda g: (str(g["label"]), g["causal"])).items()):
        gs = sorted(gs, key=lambda g: g["length"])
        if len({g["length"] for g in gs}) < 2:
            continue
        metric = next((m for m in METRICS if all(by_seed(g, m) for g in gs)), None)
        if metric is None:
            continue
        per = [by_seed(g, metric) for g in gs]
        seeds = sorted(set.intersection(*[set(p) for p in per]), key=stats._seed_order)
        xs = [math.log2(g["length"]) for g in gs]
        d = stats.summary([stats.slope(xs, [p[s] for p in per]) for s in seeds])
        d["seeds"] = seeds
        out.append(claim("context_slope", d, gs, label=label, lengths=[g["length"] for g in gs], metric=metric,
                         difference=f"{metric} per doubling of the context"))
    return out


def settle(comps):
    """Holm within each family, then each comparison's verdict from its gates, raw interval and adjusted p."""
    families = defaultdict(list)
    for c in comps:
        families[c["family"]].append(c)
    for cs in families.values():
        for c, p in zip(cs, stats.holm([c["p"] for c in cs])):
            c["p_holm"] = p
            c["family_size"] = sum(x["p"] is not None for x in cs)
    for c in comps:
        ci = c["ci95"] or [None, None]
        c["verdict"], c["verdict_reason"] = stats.gated_verdict(ci[0], ci[1], c["paper_sign"], c["p_holm"],
                                                                c["gates_failed"])
    return comps


def comparisons(groups):
    pairs = matched_degree(groups)
    return settle(pairs + degree_trend(groups) + context_trend(groups) + matched_degree_mean(groups, pairs) +
                  context_slope(groups))


def stats_document(groups, comps):
    """The machine-readable summary written to RUN_DIR/stats.json."""
    return {
        "about": "train records grouped by config_id over seeds (older records without seeds: one group per point)",
        "interval": f"two-sided {stats.CONFIDENCE:.0%} Student-t interval of the mean; null with fewer than 2 seeds",
        "comparisons_rule": "difference = other - baseline paired by seed (common seeds only), on test BPC or valid "
                            "BPC where no test is shared; raw_verdict: supports when the 95% interval excludes zero "
                            "on the paper's side, contradicts when on the other side, unresolved otherwise or with "
                            "n < 2; p: two-sided paired t test; p_holm: Holm-adjusted within the comparison's family "
                            "(its kind); verdict: supports / contradicts only when every run behind it is flattened "
                            f"and ends at or below {stats.VALID_BPC_BOUND} valid BPC and p_holm < {stats.ALPHA:.2f} "
                            "with the raw interval excluding zero, else inconclusive (verdict_reason says why)",
        "lens_drop": f"valid BPC with context {LENS_SHORT} minus valid BPC with the whole context",
        "flattened": f"valid BPC at the last eval at or before {stats.FLAT_FRACTION:.0%} of the steps minus the "
                     f"last eval's; flattened below {stats.FLAT_THRESHOLD}",
        "groups": groups,
        "comparisons": comps,
    }
