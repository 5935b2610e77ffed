#!/usr/bin/env python3
# Crash recovery: SIGKILLs a training run and a training sweep at seeded random moments (a bounded number of times),
# resumes each until it finishes, and checks the records bit for bit against an uninterrupted run.
# usage: crash_recovery.py SPARSEBENCH WORK_DIR [SEED]
import json
import os
import random
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sbtest import TRAIN_TINY, Failure, kill_at_random, run, text_data, write  # noqa: E402

# Timings and the machine's state when each process started (the wait policy follows the load at start).
TIMING = {"tokens_per_s", "train_s", "seconds", "time", "wall_s", "timing", "samples_s", "threads_used", "cpu_share",
          "busy_machine", "busy_reasons", "contention", "omp_wait_policy"}


def strip(v):
    """A record without its timings and machine state (which differ between any two runs)."""
    if isinstance(v, dict):
        return {k: strip(x) for k, x in v.items() if k not in TIMING}
    if isinstance(v, list):
        return [strip(x) for x in v]
    return v


def metrics(d):
    return [strip(json.loads(line)) for line in open(os.path.join(d, "metrics.jsonl"))]


def finish(cmd):
    """Runs a resumed command to its end."""
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        raise Failure(f"the final resume failed (exit {p.returncode}):\n{(p.stdout + p.stderr)[-2000:]}")


def training(b, work, rng, log):
    data = text_data(os.path.join(work, "text.bin"))
    args = ["--data", data] + TRAIN_TINY + ["--steps", "60", "--log-every", "4", "--checkpoint-every", "5",
                                            "--eval-every", "10", "--dropout", "0.1"]
    ref, cut = os.path.join(work, "ref"), os.path.join(work, "cut")
    t0 = time.time()
    run(b, ["train", "--out", ref] + args, 0, timeout=300)
    took = time.time() - t0  # kill moments scale with how fast this machine (or build) runs

    def cmd():
        resume = os.path.exists(os.path.join(cut, "checkpoint.pt"))
        return [b, "train", "--out", cut] + args + (["--resume"] if resume else ["--overwrite"])
    kills = kill_at_random(cmd, rng, 6, 0.15 * took, 0.7 * took, log)
    finish(cmd())  # resumed to the end (a kill may also land after the result, during a later resume)
    if metrics(ref) != metrics(cut):
        raise Failure(f"training metrics differ after {kills} kills ({log})")
    r1, r2 = (strip(json.load(open(os.path.join(d, "result.json")))) for d in (ref, cut))
    for key in ("steps", "final_loss", "valid_bpc", "test_bpc", "evals", "status"):
        if r1[key] != r2[key]:
            raise Failure(f"result.json {key}: {r2[key]!r} after {kills} kills, {r1[key]!r} uninterrupted ({log})")
    return kills


def sweep(b, work, rng, log):
    data = text_data(os.path.join(work, "text.bin"))
    doc = {"kind": "train", "seed": 5, "model": {"layers": 1, "dim": 16, "heads": 2, "ffn": 32},
           "axes": {"patterns": [{"name": "window", "w": [2, 4, 8]}, {"name": "bpt", "k": 1}], "lengths": [32],
                    "threads": 1},
           "train": {"data": data, "steps": 12, "batch": 2, "eval_every": 6, "eval_bytes": 256}}
    s = write(os.path.join(work, "sweep.json"), json.dumps(doc))
    ref, cut = os.path.join(work, "sweep_ref"), os.path.join(work, "sweep_cut")
    t0 = time.time()
    run(b, ["run", s, "--out", ref, "--no-plot"], 0, timeout=300)
    took = time.time() - t0

    def cmd():
        return [b, "run", s, "--out", cut, "--no-plot"] + (["--resume"] if os.path.exists(cut) else [])
    kills = kill_at_random(cmd, rng, 6, 0.1 * took, 0.8 * took, log)
    finish(cmd())

    def records(d):
        lines = open(os.path.join(d, "records.jsonl")).read().split("\n")
        if lines[-1] != "":
            raise Failure(f"{d}/records.jsonl ends in a partial line")
        out = {}
        for line in lines[:-1]:
            r = json.loads(line)
            if r["point"] in out:
                raise Failure(f"point {r['point']} recorded twice after {kills} kills ({log})")
            r = strip(r)
            r.pop("train_dir", None)
            r.pop("resumed_at_steps", None)  # where a killed point continued: history, not outcome
            out[r["point"]] = r
        return out
    a, c = records(ref), records(cut)
    if a != c:
        diff = [k for k in a if a.get(k) != c.get(k)] + [k for k in c if k not in a]
        fields = sorted({f for k in diff if k in a and k in c for f in set(a[k]) | set(c[k])
                         if a[k].get(f) != c[k].get(f)})
        raise Failure(f"sweep records differ after {kills} kills at points {diff} in fields {fields} ({log})")
    if any(r["status"] != "ok" for r in c.values()):
        raise Failure("a point of the resumed sweep did not finish ok")
    return kills


def main():
    b, work = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    seed = int(sys.argv[3]) if len(sys.argv) > 3 else 2024
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    rng = random.Random(seed)
    try:
        for name, fn in (("training", training), ("sweep", sweep)):
            log = []
            kills = fn(b, work, rng, log)
            print(f"ok: {name}: {kills} kills at seed {seed}, resumed to identical records ({'; '.join(log)})")
    except Failure as e:
        print(f"FAILED: {e}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
