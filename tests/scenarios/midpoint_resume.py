#!/usr/bin/env python3
# A training sweep killed in the middle of a point continues that point from its last checkpoint on `run --resume`
# (not from step 0), and ends with the final losses, evaluations and BPC of an uninterrupted sweep (1 thread); every
# seed of the seeds axis is its own point. usage: midpoint_resume.py SPARSEBENCH WORK_DIR
import json
import os
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "reliability"))
from sbtest import Failure, drive, run, text_data, write  # noqa: E402

STEPS = 200


def scenario(data):
    return {"name": "midpoint", "kind": "train",
            "model": {"layers": 1, "dim": 16, "ffn": 32, "heads": 2},
            "train": {"steps": STEPS, "batch": 2, "eval_every": 50, "eval_bytes": 2048, "checkpoint_every": 10, "log_every": 1,
                      "lens_bytes": 1024, "data": data},
            "axes": {"patterns": [{"name": "bpt", "k": 2}, {"name": "window", "w": 4}], "lengths": [32],
                     "threads": 1, "seeds": [5, 6]}}


def records(run_dir):
    with open(os.path.join(run_dir, "records.jsonl")) as f:
        return {r["point"]: r for r in map(json.loads, f)}


def checkpoint_step(train_dir):
    """The step of the point's metrics file's last line (the checkpoint is at most checkpoint_every behind)."""
    try:
        with open(os.path.join(train_dir, "metrics.jsonl")) as f:
            lines = [json.loads(x) for x in f if x.endswith("\n")]
    except OSError:
        return 0
    return max([r.get("step", 0) for r in lines] or [0])


def main(binary, work):
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    data = text_data(os.path.join(work, "text.bin"), size=40000)
    spec = write(os.path.join(work, "midpoint.json"), json.dumps(scenario(data)))
    run(binary, ["run", spec, "--out", os.path.join(work, "whole"), "--no-plot"], 0, timeout=600)
    whole = records(os.path.join(work, "whole"))
    if len(whole) != 4:
        raise Failure(f"expected 2 patterns x 2 seeds = 4 points, got {sorted(whole)}")
    seeds = sorted({(r["config_id"], r["seed"]) for r in whole.values()})
    if len({c for c, _ in seeds}) != 2 or sorted({s for _, s in seeds}) != [5, 6]:
        raise Failure(f"seeds axis: expected 2 configurations x seeds 5, 6, got {seeds}")

    # Kill the sweep once the second point (index 1) is past two checkpoints, then resume it.
    cut = os.path.join(work, "cut")
    proc = subprocess.Popen([binary, "run", spec, "--out", cut, "--no-plot"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    point_dir = os.path.join(cut, "train", "0001")
    deadline = time.time() + 300
    while checkpoint_step(point_dir) < 25:
        if proc.poll() is not None:
            raise Failure("the sweep finished before it could be killed in the middle of point 1")
        if time.time() > deadline:
            os.killpg(proc.pid, signal.SIGKILL)
            raise Failure("point 1 did not reach step 25 within 300 s")
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    killed_at = checkpoint_step(point_dir)
    if killed_at >= STEPS:
        raise Failure(f"point 1 had already finished (step {killed_at}) when the sweep was killed")
    out = run(binary, ["run", spec, "--out", cut, "--resume", "--no-plot"], 0, timeout=600)
    if "continuing its training from step" not in out:
        raise Failure(f"the resumed sweep did not say it continued point 1 from its checkpoint:\n{out}")
    resumed = records(cut)
    if set(resumed) != set(whole):
        raise Failure(f"point ids differ after the resume: {sorted(set(resumed) ^ set(whole))}")
    p1 = next(r for r in resumed.values() if r["index"] == 1)
    at = p1.get("resumed_at_steps") or []
    if len(at) != 1 or not (10 <= at[0] < STEPS) or at[0] % 10 != 0:
        raise Failure(f"point 1 should record one resume at a checkpoint step, got {at}")
    for pid, w in whole.items():
        r = resumed[pid]
        for key in ("final_loss", "valid_bpc", "test_bpc"):
            if abs(w[key] - r[key]) > 1e-6:
                raise Failure(f"{pid}: {key} {r[key]} after the resume, {w[key]} uninterrupted")
        if [e["bpc"] for e in w["evals"]] != [e["bpc"] for e in r["evals"]]:
            raise Failure(f"{pid}: evaluations differ after the resume")
        if [round(x["bpc"], 9) for x in w["context_lens"]] != [round(x["bpc"], 9) for x in r["context_lens"]]:
            raise Failure(f"{pid}: context lens differs after the resume")
    print(f"midpoint resume: ok (point 1 killed near step {killed_at}, resumed at step {at[0]}; "
          f"{len(whole)} points equal to the uninterrupted sweep)")


if __name__ == "__main__":
    drive(main, "usage: midpoint_resume.py SPARSEBENCH WORK_DIR")
