# task_groups.py: records of generated-task runs grouped over seeds, accuracy by distance beside the graph's reach.
"""Task runs (train records with a "task"): accuracy over seeds, per distance bucket, against the reach prediction.

group_tasks(records) -> groups, each with its per-bucket accuracy summary (Student-t over seeds, and pooled answers
with a Wilson interval), the graph's reach for the bucket (fraction of sampled query positions whose key and value
arrive within the model's layers) and the prediction check:
  unreachable bucket (no sampled query reaches it): the prediction holds when pooled accuracy is not above the 95%
  binomial interval around chance ("holds (below chance)" under it: a model that cannot see the key names a value it
  can see, and in MQAR, whose values are distinct, every visible value is another key's), and fails above it;
  reachable bucket: "retrieves" when the pooled Wilson interval lies above chance (for MQAR above 1/pairs, what
  naming one of the sequence's values scores; between the two: "one of the values"), "at chance" otherwise (reach
  is necessary, not sufficient).
contrasts(groups) pairs each non-bpt group with the bpt group of nearest degree at its length and task (only within
MATCHED_RATIO of it: segtree and dense are not at matched degree), per bucket, seed by seed (bpt - other); the
buckets beyond the other pattern's reach form one family and those within it another, each Holm-corrected.
A contrast's verdict is "supports" / "contradicts" only when every run behind it passes the task gates, and its reason
says so when the leading pattern does not retrieve in that bucket (a lead at "one of the values" is not recall):
  trained    the run retrieves within its graph's reach: its accuracy pooled over the buckets every sampled query
             reaches lies above chance's 95% binomial interval for those answers (a model that learnt nothing says
             nothing about its graph). Not "at its nearest distance": with answers revealed, MQAR's nearest
             queries were its hardest (models learnt to pass over values just shown), recall_distance's its easiest.
             For MQAR the bar is 1/pairs, not chance: naming one of the sequence's values without matching keys
             scores that. MQAR records whose values repeat within a sequence (the generator before
             task.params.values) fail it: their scores above chance need no key matching. So do MQAR records whose
             answers are revealed (inputs after their queries; task.params.answers absent or "revealed"): a model
             names an answer by ruling out those already shown;
  flattened  valid accuracy gained less than FLAT_ACCURACY from the last evaluation at or before stats.FLAT_FRACTION
             of the steps to the last one (a run still learning may yet change the difference).
"""
import math
from collections import defaultdict

import stats

Z95 = 1.959963984540054
MATCHED_RATIO = 1.5  # degrees further apart than this are not a matched-degree pair
FLAT_ACCURACY = 0.03  # valid accuracy gained over the last 20% of the steps below which a task run counts as flattened


def is_task_record(r):
    return r.get("kind") == "train" and isinstance(r.get("task"), dict)


def config_of(r):
    return r.get("config_id") or r.get("point") or f"index={r.get('index')}"


def chance_interval(chance, n):
    """The 95% range of the accuracy of n independent guesses at chance."""
    half = Z95 * math.sqrt(chance * (1 - chance) / n) if n else float("inf")
    return [chance - half, chance + half]


def bucket_summary(rows, k, chance, floor=None):
    """One distance bucket over a group's seeds, with the reach prediction; `floor` is what a reached bucket must beat
    to count as retrieval (trained_floor: for MQAR naming one of the sequence's values), chance by default."""
    floor = chance if floor is None else floor
    accs, correct, answers = [], 0.0, 0
    for r in rows:
        by = r.get("accuracy_by_distance") or []
        if k < len(by) and stats.is_number(by[k].get("accuracy")):
            accs.append(by[k]["accuracy"])
            correct += by[k]["accuracy"] * by[k]["answers"]
            answers += by[k]["answers"]
    reach = [((r.get("reach") or {}).get("buckets") or [None] * (k + 1))[k] for r in rows]
    reach = next((x for x in reach if isinstance(x, dict)), {})
    first = (rows[0].get("accuracy_by_distance") or [{}] * (k + 1))[k]
    out = {"lo": first.get("lo"), "hi": first.get("hi"), "accuracy": stats.summary(accs), "answers": answers,
           "pooled_accuracy": correct / answers if answers else None,
           "pooled_ci95": stats.binomial_interval(round(correct), answers),
           "fraction_reachable": reach.get("fraction_reachable"), "min_hops": reach.get("min_hops"),
           "max_hops": reach.get("max_hops"), "per_seed": accs}
    lo, hi = chance_interval(chance, answers)
    if out["fraction_reachable"] == 0:
        if not answers or out["pooled_accuracy"] > hi:
            out["prediction"] = "fails"
        else:
            out["prediction"] = "holds" if out["pooled_accuracy"] >= lo else "holds (below chance)"
    elif out["pooled_ci95"] and out["pooled_ci95"][0] > floor:
        out["prediction"] = "retrieves"
    elif floor > chance and out["pooled_ci95"] and out["pooled_ci95"][0] > chance:
        out["prediction"] = "one of the values"  # above chance, not above naming one of the sequence's values
    else:
        out["prediction"] = "at chance"
    return out


def accuracy_flattened(evals, steps):
    """(gain, flattened) of a task run's valid accuracy over its last stretch, or None without an evaluation before it."""
    if not stats.is_number(steps) or steps <= 0:
        return None
    curve = stats.valid_curve(evals, "accuracy")
    early = [c for c in curve if c[0] <= stats.FLAT_FRACTION * steps]
    if not early or early[-1][0] >= curve[-1][0]:
        return None
    gain = curve[-1][1] - early[-1][1]
    return gain, gain < FLAT_ACCURACY


def trained_floor(r, chance):
    """The accuracy the trained gate must beat: chance, or for MQAR 1/pairs (naming one of the sequence's values)."""
    task = r.get("task") or {}
    pairs = (task.get("params") or {}).get("pairs")
    if task.get("name") == "mqar" and stats.is_number(pairs) and pairs > 0:
        return max(chance, 1 / pairs)
    return chance


def run_gates(r, chance):
    """The task gates one run fails, in words (empty: it passes)."""
    failed = []
    task = r.get("task") or {}
    params = task.get("params") or {}
    if task.get("name") == "mqar" and params.get("values") != "distinct within a sequence":
        failed.append("not trained (mqar values repeat within a sequence: scores need no key matching)")
    elif task.get("name") == "mqar" and params.get("answers") != "hidden":
        # Records before the field revealed answers too. Their models score by ruling out the values already
        # shown after earlier queries; scored again with answers hidden, all but bpt fall to one of the sequence's
        # values (results/recall_quick/README.md, "Revealed answers").
        failed.append("not trained (mqar answers revealed after their queries: scores need no key matching)")
    floor = trained_floor(r, chance)
    by = r.get("accuracy_by_distance") or []
    reach = (r.get("reach") or {}).get("buckets") or []
    within = [b for b, rb in zip(by, reach) if isinstance(b, dict) and isinstance(rb, dict) and b.get("answers") and
              stats.is_number(b.get("accuracy")) and rb.get("fraction_reachable") == 1]
    answers = sum(b["answers"] for b in within)
    if not answers:
        failed.append("not trained (no answers at a distance within its reach)")
    else:
        lo, hi = chance_interval(floor, answers)
        if sum(b["accuracy"] * b["answers"] for b in within) / answers <= hi:
            failed.append("not trained (at chance within its reach)" if floor == chance else
                          f"not trained (within its reach no better than {100 * floor:.1f}%, one of the sequence's values)")
    flat = accuracy_flattened(r.get("evals"), r.get("steps"))
    if flat is None:
        failed.append("not flattened (no valid evaluation before the last 20% of the steps)")
    elif not flat[1]:
        failed.append(f"not flattened (valid accuracy +{100 * flat[0]:.1f} points over the last 20% of the steps)")
    return failed


def passing(g, gate):
    """How many of a group's runs pass a gate ("not trained", "not flattened"), as "k/n"."""
    return f"{sum(1 for failed in g['gates'].values() if not any(f.startswith(gate) for f in failed))}/{g['n']}"


def gates_failed(runs):
    """What the runs behind one comparison fail, counted per gate ("not flattened (2 of 6 runs)")."""
    counts = defaultdict(int)
    for r, chance in runs:
        for why in run_gates(r, chance):
            counts[why.split(" (")[0]] += 1
    return [f"{why} ({n} of {len(runs)} runs)" for why, n in counts.items()]


def tokens_by_cpu(rs):
    """Tokens/s per CPU the runs name: a resumed run's seeds may have run on two machines, whose speeds do not mix."""
    by = defaultdict(list)
    for r in rs:
        if stats.is_number(r.get("tokens_per_s")):
            by[r.get("cpu") if isinstance(r.get("cpu"), str) else "?"].append(r["tokens_per_s"])
    return {cpu: stats.summary(v) for cpu, v in sorted(by.items())}


def group_tasks(records):
    rows = defaultdict(list)
    for r in records:
        if is_task_record(r) and r.get("status") == "ok":
            rows[config_of(r)].append(r)
    groups = []
    for cid, rs in rows.items():
        first = rs[0]
        task = first["task"]
        chance = task.get("chance")
        nb = min(len(r.get("accuracy_by_distance") or []) for r in rs)
        groups.append({
            "config_id": cid, "label": first.get("label", first.get("pattern")), "pattern": first.get("pattern"),
            "params": first.get("params"), "length": first.get("length"), "degree": first.get("degree"),
            "layers": first.get("layers"), "task": task.get("name"), "task_params": task.get("params"),
            "chance": chance, "seeds": [r.get("seed") for r in rs], "n": len(rs),
            "test_accuracy": stats.summary([r["test_accuracy"] for r in rs if stats.is_number(r.get("test_accuracy"))]),
            "tokens_per_s": stats.summary([r["tokens_per_s"] for r in rs if stats.is_number(r.get("tokens_per_s"))]),
            "tokens_per_s_by_cpu": tokens_by_cpu(rs),
            "per_seed": {r.get("seed"): r for r in rs},
            "gates": {r.get("seed"): run_gates(r, chance) for r in rs},
            "buckets": [bucket_summary(rs, k, chance, trained_floor(first, chance)) for k in range(nb)]})
    groups.sort(key=lambda g: (str(g["task"]), g["length"] or 0, str(g["pattern"]), g["degree"] or 0.0))
    return groups


def contrasts(groups):
    """bpt - other accuracy per bucket, paired by seed, at the nearest bpt degree (same task and length)."""
    out = []
    keyed = defaultdict(list)
    for g in groups:
        keyed[(g["task"], g["length"])].append(g)
    for (task, length), gs in sorted(keyed.items(), key=lambda kv: (str(kv[0][0]), kv[0][1] or 0)):
        bpts = [g for g in gs if g["pattern"] == "bpt" and g["degree"]]
        for g in gs:
            if g["pattern"] == "bpt" or not bpts or not g["degree"]:
                continue
            b = min(bpts, key=lambda x: abs(math.log(g["degree"] / x["degree"])))
            if abs(math.log(g["degree"] / b["degree"])) > math.log(MATCHED_RATIO):
                continue
            for k, (bb, gb) in enumerate(zip(b["buckets"], g["buckets"])):
                seeds = sorted(set(b["per_seed"]) & set(g["per_seed"]), key=stats._seed_order)

                def acc(grp, s):
                    by = grp["per_seed"][s].get("accuracy_by_distance") or []
                    return by[k]["accuracy"] if k < len(by) and stats.is_number(by[k].get("accuracy")) else None
                pairs = [(acc(b, s), acc(g, s)) for s in seeds]
                d = stats.summary([x - y for x, y in pairs if x is not None and y is not None])
                beyond = gb["fraction_reachable"] == 0
                runs = [(grp["per_seed"][s], grp["chance"]) for grp in (b, g) for s in seeds]
                out.append(dict(d, task=task, length=length, lo=gb["lo"], hi=gb["hi"], bpt=b["label"],
                                other=g["label"], other_beyond_reach=beyond, gates_failed=gates_failed(runs),
                                bpt_level=bb.get("prediction"), other_level=gb.get("prediction"),
                                family=f"{task}@{length}: bpt vs {g['label']} {'beyond' if beyond else 'within'} "
                                       "its reach", p=stats.t_test_p(d)))
    families = defaultdict(list)
    for c in out:
        families[c["family"]].append(c)
    for cs in families.values():
        for c, p in zip(cs, stats.holm([c["p"] for c in cs])):
            c["p_holm"] = p
    for c in out:
        ci = c["ci95"] or [None, None]
        c["verdict"], c["verdict_reason"] = stats.gated_verdict(ci[0], ci[1], +1, c["p_holm"], c["gates_failed"])
        # A lead is recall only where the leader retrieves: an MQAR model that names one of the sequence's values
        # beats one at chance without matching a key.
        who, level = {"supports": (c["bpt"], c["bpt_level"]),
                      "contradicts": (c["other"], c["other_level"])}.get(c["verdict"], (None, None))
        if level not in (None, "retrieves"):
            c["verdict_reason"] += f"; {who} there is at \"{level}\", not retrieval"
    return out
