#!/usr/bin/env python3
# make_run_seeds.py: writes the synthetic three-seed train run directory run_seeds/ used by the plot tests.
"""Writes tests/scenarios/data/run_seeds/{records.jsonl,run.json}: made-up train records, not measurements.

The BPC values are chosen so that every verdict of the paired comparisons occurs (see README.md); the other
fields follow the train record format so that plots/plot_run.py reads them as it reads a real run.
usage: python3 tests/scenarios/data/make_run_seeds.py
"""
import json
import os

STEPS = 100
EVAL_STEPS = (20, 40, 60, 80, 100)
# label, pattern, params, length, degree, degree target, {seed: test BPC or status}, lens drop, gain after 80%
GROUPS = [
    ("bpt(k=2)", "bpt", {"clip": 30, "k": 2}, 64, 10.0, None, {1: 2.50, 2: 2.52, 3: 2.49}, 0.30, 0.06),
    ("bpt(k=4)", "bpt", {"clip": 30, "k": 4}, 64, 16.0, None, {1: 2.40, 2: 2.43, 3: 2.41}, 0.35,
     {1: 0.01, 2: 0.02, 3: 0.05}),
    ("window(w=8)", "window", {"w": 8}, 64, 8.5, 10.0, {1: 2.45, 2: 2.47, 3: 2.46}, 0.08, 0.06),
    ("window(w=16)", "window", {"w": 16}, 64, 15.5, 16.0, {1: 2.55, 2: 2.59, 3: 2.56}, 0.10, 0.06),
    ("fixed(c=4,l=16)", "fixed", {"c": 4, "l": 16}, 64, 12.0, None,
     {1: 2.47, 2: "failed: the point process was killed (signal 9)", 3: "failed: the point process was killed "
      "(signal 9)"}, 0.20, 0.06),
    ("bpt(k=4)", "bpt", {"clip": 30, "k": 4}, 128, 18.0, None,
     {1: 2.38, 2: 2.44, 3: "skipped: analytic memory above memory_budget_mb"}, 0.40, 0.06),
]


def config_id(pattern, params, length):
    ps = "/".join(f"{k}={v}" for k, v in sorted(params.items()))
    return f"{pattern}/graph/{ps}/n={length}/batch=2/causal=1/threads=1/mode=train"


def evals(valid, gain):
    """Valid evaluations falling towards `valid`, `gain` BPC of it after the 80% mark."""
    return [{"kind": "eval", "split": "valid", "step": s, "bpc": round(valid + gain * ((STEPS - s) / 20) ** 1.5, 6),
             "bytes": 4096, "train_s": round(0.05 * s, 3)} for s in EVAL_STEPS]


def context_lens(valid, length, drop):
    cs = [c for c in (16, 64, 256) if c < length] + [length]
    return [{"context": c, "bpc": round(valid + drop * (1.0 - (c.bit_length() - 5) / (length.bit_length() - 5)), 6),
             "bytes": 4096} for c in cs]


def record(index, group, seed):
    label, pattern, params, length, degree, target, outcome, drop, gain = group
    cid = config_id(pattern, params, length)
    r = {"kind": "train", "index": index, "point": f"{cid}/seed={seed}", "config_id": cid, "seed": seed,
         "scenario": "fixture_seeds", "pattern": pattern, "label": label, "params": params, "attention": "graph",
         "length": length, "causal": True, "batch": 2, "layers": 1, "dim": 16, "heads": 2, "ffn": 32,
         "degree": degree, "degree_target": target, "solved_param": "w" if target else None, "device": "cpu",
         "threads": 1, "threads_used": 1, "simd_target": "AVX2", "train_dir": f"run_seeds/train/{index:04d}"}
    value = outcome[seed]
    if isinstance(value, str):
        status, reason = value.split(": ", 1)
        return dict(r, status=status, reason=reason)
    gain = gain[seed] if isinstance(gain, dict) else gain
    valid = round(value + 0.02 + 0.001 * seed, 6)
    return dict(r, status="ok", test_bpc=value, valid_bpc=valid, steps=STEPS, final_loss=round(valid * 0.693, 6),
                tokens_per_s=4000.0 + 100 * seed, evals=evals(valid, gain),
                context_lens=context_lens(valid, length, drop + 0.01 * seed))


def main():
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "run_seeds")
    os.makedirs(out, exist_ok=True)
    rows = [record(i, g, s) for i, (g, s) in enumerate((g, s) for g in GROUPS for s in (1, 2, 3))]
    with open(os.path.join(out, "records.jsonl"), "w") as f:
        f.writelines(json.dumps(r, sort_keys=True) + "\n" for r in rows)
    run = {"kind": "train", "scenario_name": "fixture_seeds", "points": len(rows),
           "scenario": {"name": "fixture_seeds", "kind": "train", "seeds": [1, 2, 3],
                        "description": "Synthetic train records over three seeds for the plot tests "
                                       "(tests/scenarios/data/make_run_seeds.py; made up, not measured)."}}
    with open(os.path.join(out, "run.json"), "w") as f:
        json.dump(run, f, indent=2, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
