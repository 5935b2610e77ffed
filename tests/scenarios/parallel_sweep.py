#!/usr/bin/env python3
# Parallel and sharded sweeps end to end: `run --jobs 2`, `--shard 0/2` + `--shard 1/2` + `merge` give the point set of
# a one-process run (ids, configs, graph fingerprints); merging other scenarios is refused; missing points are
# reported; a killed point process is recorded as failed while the others finish; a stopped sweep leaves whole
# records and resumes. usage: parallel_sweep.py SPARSEBENCH WORK_DIR
import json
import os
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "reliability"))
from sbtest import Failure, drive, run, text_data, write  # noqa: E402

# The fields that describe a point (point_to_json): they must not depend on how the sweep was split.
DESCRIPTION = ["point", "index", "scenario", "kind", "pattern", "label", "attention", "params", "degree_target",
               "length", "tokens", "batch", "causal", "threads", "mode", "layers", "dim", "heads", "ffn", "degree",
               "graph", "analytic_bytes", "status"]


def records(run_dir):
    out = []
    with open(os.path.join(run_dir, "records.jsonl")) as f:
        for n, line in enumerate(f, 1):
            if not line.endswith("\n"):
                raise Failure(f"{run_dir}/records.jsonl: line {n} is not whole")
            out.append(json.loads(line))
    return out


def point_set(run_dir):
    recs = records(run_dir)
    by_id = {}
    for r in recs:
        if r["point"] in by_id:
            raise Failure(f"{run_dir}: point {r['point']} recorded twice")
        by_id[r["point"]] = {k: r.get(k) for k in DESCRIPTION}
    return by_id


def same_points(a, b, what):
    pa, pb = point_set(a), point_set(b)
    if set(pa) != set(pb):
        raise Failure(f"{what}: point ids differ: only in one {sorted(set(pa) - set(pb))}, "
                      f"only in the other {sorted(set(pb) - set(pa))}")
    for k in pa:
        if pa[k] != pb[k]:
            raise Failure(f"{what}: point {k} differs:\n{pa[k]}\n{pb[k]}")


def children(pid):
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def wait_children(pid, n, timeout=120):
    t0 = time.time()
    while time.time() - t0 < timeout:
        kids = children(pid)
        if len(kids) >= n:
            return kids
        time.sleep(0.05)
    raise Failure(f"no {n} point processes appeared within {timeout} s")


def main(binary, work):
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    data = text_data(os.path.join(work, "text.bin"))
    scenario = write(os.path.join(work, "tiny.json"), json.dumps({
        "name": "tiny_sweep", "kind": "train", "seed": 2,
        "model": {"layers": 1, "dim": 16, "ffn": 32, "heads": 2},
        "train": {"data": data, "steps": 4, "batch": 2, "eval_every": 0, "eval_bytes": 512, "log_every": 2},
        "axes": {"patterns": [{"name": "window", "w": [4, 8]}, {"name": "bpt", "k": 2}, {"name": "star"}],
                 "lengths": [32, 64], "causal": True}}))
    w = lambda *p: os.path.join(work, *p)  # noqa: E731

    run(binary, ["run", scenario, "--out", w("one"), "--no-plot"], 0, ["8 points: 6 to run, 2 to skip"], timeout=300)
    out = run(binary, ["run", scenario, "--out", w("par"), "--no-plot", "--jobs", "2"], 0,
              ["up to 2 points at once"], timeout=300)
    same_points(w("one"), w("par"), "--jobs 2 against one process")
    cpus = len(os.sched_getaffinity(0))
    for r in records(w("par")):
        if r["status"] == "ok" and r["threads_used"] != max(1, cpus // 2):
            raise Failure(f"--jobs 2 on {cpus} CPUs: a point ran {r['threads_used']} threads")
        if r["jobs"] != 2:
            raise Failure(f"record says jobs {r['jobs']}")
    if not os.path.exists(w("par", "logs", "point-0000.log")):
        raise Failure("no log of point 0")

    run(binary, ["run", scenario, "--out", w("sh"), "--no-plot", "--shard", "0/2"], 0, ["shard 0/2"], timeout=300)
    run(binary, ["run", scenario, "--out", w("sh"), "--no-plot", "--shard", "1/2", "--jobs", "2"], 0, ["shard 1/2"],
        timeout=300)
    s0, s1 = w("sh", "shard-0-of-2"), w("sh", "shard-1-of-2")
    ids0, ids1 = set(point_set(s0)), set(point_set(s1))
    if ids0 & ids1 or not ids0 or not ids1:
        raise Failure(f"shards overlap or one is empty: {sorted(ids0)} / {sorted(ids1)}")
    run(binary, ["merge", s0, s1, "--out", w("merged"), "--no-plot"], 0, ["merge: complete", "8 of 8 points"])
    same_points(w("one"), w("merged"), "two shards merged against one process")

    # Missing points: shard 1 not given.
    out = run(binary, ["merge", s0, "--out", w("half"), "--no-plot"], 1, ["INCOMPLETE", f"{len(ids1)} missing"])
    for i in ids1:
        if f"missing: {i}\n" not in out:
            raise Failure(f"point {i} of the absent shard is not reported missing:\n{out}")

    # Another scenario (one override) is refused, naming both directories.
    run(binary, ["run", scenario, "--set", "train/steps=3", "--out", w("other"), "--no-plot", "--shard", "1/2"], 0,
        timeout=300)
    run(binary, ["merge", s0, w("other", "shard-1-of-2"), "--out", w("mixed"), "--no-plot"], 2,
        ["hold runs of different scenarios", s0, w("other", "shard-1-of-2")])
    if os.path.exists(w("mixed", "records.jsonl")):
        raise Failure("a refused merge wrote records")
    run(binary, ["run", scenario, "--jobs", "0", "--out", w("x")], 2, ["--jobs: expected an integer in [1, 1024], got 0"])
    timing = write(w("timing.json"), json.dumps({"kind": "attention", "axes": {"patterns": [{"name": "window", "w": 3}],
                                                                              "lengths": [16]}}))
    run(binary, ["run", timing, "--jobs", "auto", "--dry-run"], 0, ["times its points, so they run one at a time"])
    run(binary, ["run", timing, "--jobs", "2", "--dry-run"], 0, ["warning: --jobs 2: kind attention times its points"])
    run(binary, ["run", scenario, "--shard", "auto", "--out", w("x"), "--no-plot"], 2,
        ["--shard auto: SLURM_ARRAY_TASK_ID is not set"], env={k: v for k, v in os.environ.items()
                                                               if not k.startswith("SLURM_")})

    # A point process killed (as by the out-of-memory killer): recorded failed; the other points still finish.
    p = subprocess.Popen([binary, "run", scenario, "--out", w("crash"), "--no-plot", "--jobs", "2"],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    victim = wait_children(p.pid, 1)[0]
    os.kill(victim, signal.SIGKILL)
    out = p.communicate(timeout=300)[0]
    if p.returncode != 1:
        raise Failure(f"a sweep with a killed point exited {p.returncode}, not 1:\n{out[-2000:]}")
    recs = records(w("crash"))
    failed = [r for r in recs if r["status"] == "failed"]
    if len(recs) != 8 or len(failed) != 1 or "killed by signal 9" not in failed[0]["reason"]:
        raise Failure(f"after killing one point process: {len(recs)} records, failed: {failed}\n{out[-2000:]}")

    # The sweep itself stopped (SIGTERM): running points end unrecorded, records stay whole, --resume finishes.
    p = subprocess.Popen([binary, "run", scenario, "--out", w("stop"), "--no-plot", "--jobs", "2"],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    kids = wait_children(p.pid, 2)
    p.send_signal(signal.SIGTERM)
    t0 = time.time()
    out = p.communicate(timeout=60)[0]
    stop_s = time.time() - t0
    if p.returncode != 128 + signal.SIGTERM:
        raise Failure(f"a stopped sweep exited {p.returncode}:\n{out[-2000:]}")
    for k in kids:
        if os.path.exists(f"/proc/{k}") and "Z" not in open(f"/proc/{k}/stat").read().split()[2]:
            raise Failure(f"point process {k} still runs after the sweep stopped")
    if "stopped by signal 15" not in out:
        raise Failure(f"no stop message:\n{out[-2000:]}")
    done = len(records(w("stop")))
    if done >= 8:
        raise Failure("the stop came too late to test anything")
    run(binary, ["run", scenario, "--out", w("stop"), "--no-plot", "--jobs", "2", "--resume"], 0,
        [f"{done} already recorded"], timeout=300)
    same_points(w("one"), w("stop"), "stopped and resumed against one process")
    print(f"parallel sweep: ok (SIGTERM ended the sweep in {stop_s:.1f} s, leaving {done} whole records)")
    return 0


if __name__ == "__main__":
    drive(main, __doc__ or "usage: parallel_sweep.py SPARSEBENCH WORK_DIR")
