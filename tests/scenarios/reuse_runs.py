#!/usr/bin/env python3
# `run --reuse-from RUN_DIR`: a train point whose settings, data and SIMD target match a finished run of another
# scenario's run directory copies it (record and result say where from; the numbers, CPU and threads are the
# original's) instead of training again, in one process and with --jobs 2; a point that differs in a setting that
# changes training, or in subnormal mode, trains; a missing directory is refused by name.
# usage: reuse_runs.py SPARSEBENCH WORK_DIR
import json
import os
import shutil
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "reliability"))
from sbtest import Failure, drive, run, text_data, write  # noqa: E402


def scenario(name, data, patterns, steps=40, log_every=10, checkpoint_every=20):
    return {"name": name, "kind": "train",
            "model": {"layers": 1, "dim": 16, "ffn": 32, "heads": 2},
            "train": {"steps": steps, "batch": 2, "eval_every": 20, "eval_bytes": 2048, "log_every": log_every,
                      "checkpoint_every": checkpoint_every, "lens_bytes": 1024, "data": data},
            "axes": {"patterns": patterns, "lengths": [32], "threads": 1, "seeds": [5]}}


def records(run_dir):
    with open(os.path.join(run_dir, "records.jsonl")) as f:
        return {r["label"]: r for r in map(json.loads, f)}


def main(binary, work):
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    data = text_data(os.path.join(work, "text.bin"), size=40000)
    a_spec = write(os.path.join(work, "a.json"), json.dumps(
        scenario("reuse_a", data, [{"name": "bpt", "k": 2}, {"name": "window", "w": 4}])))
    a_dir = os.path.join(work, "a")
    run(binary, ["run", a_spec, "--out", a_dir, "--no-plot"], 0, timeout=600)
    a = records(a_dir)
    # The reused run's record names the CPU that trained it, not the one that copied it: give A's run another CPU,
    # as if it had run elsewhere.
    a_result = os.path.join(a["window(w=4)"]["train_dir"], "result.json")
    with open(a_result) as f:
        result = json.load(f)
    elsewhere = "Other CPU (family 1 model 2, AVX2)"
    result["cpu"] = elsewhere
    write(a_result, json.dumps(result))

    # Another scenario: window w=4 as in A (logging and checkpoint intervals differ, which change nothing trained)
    # and window w=6, new.
    b_spec = write(os.path.join(work, "b.json"), json.dumps(
        scenario("reuse_b", data, [{"name": "window", "w": [4, 6]}], log_every=5, checkpoint_every=40)))
    for jobs in ("1", "2"):
        b_dir = os.path.join(work, f"b{jobs}")
        run(binary, ["run", b_spec, "--out", b_dir, "--no-plot", "--jobs", jobs, "--reuse-from", a_dir], 0,
            timeout=600)
        b = records(b_dir)
        same, new = b["window(w=4)"], b["window(w=6)"]
        src = a["window(w=4)"]
        origin = (same.get("reused_from") or {}).get("train_dir", "")
        if os.path.normpath(origin) != os.path.normpath(src["train_dir"]):
            raise Failure(f"--jobs {jobs}: window(w=4) should be copied from {src['train_dir']}, got {same}")
        if same.get("cpu") != elsewhere or same["reused_from"].get("cpu") != elsewhere:
            raise Failure(f"--jobs {jobs}: the reused record should name the original run's CPU, got {same}")
        if same.get("threads_used") != result["threads"]:
            raise Failure(f"--jobs {jobs}: the reused record should keep the original's threads, got {same}")
        for key in ("final_loss", "valid_bpc", "test_bpc", "steps"):
            if same[key] != src[key]:
                raise Failure(f"--jobs {jobs}: reused {key} {same[key]} differs from the original's {src[key]}")
        with open(os.path.join(same["train_dir"], "result.json")) as f:
            result = json.load(f)
        if "reused_from" not in result or not os.path.isfile(os.path.join(same["train_dir"], "metrics.jsonl")):
            raise Failure(f"--jobs {jobs}: the copied train directory lacks its metrics or its origin")
        if "reused_from" in new or new.get("status") != "ok" or new["valid_bpc"] == src["valid_bpc"]:
            raise Failure(f"--jobs {jobs}: window(w=6) has no finished run to reuse and should train, got {new}")
        with open(os.path.join(b_dir, "run.json")) as f:
            if json.load(f).get("reuse_from") != [a_dir]:
                raise Failure(f"--jobs {jobs}: run.json should record --reuse-from {a_dir}")

    # Subnormals kept (SB_DENORMALS=keep) change the numbers: a run made so is not reused by a flushing process,
    # nor is one whose result predates the field (it kept them). A's w=4 run made so: B's w=4 trains.
    with open(a_result) as f:
        kept = json.load(f)
    for how in ("kept", None):
        if how is None:
            del kept["denormals"]
        else:
            kept["denormals"] = how
        write(a_result, json.dumps(kept))
        e_dir = os.path.join(work, f"e-{how}")
        out = run(binary, ["run", b_spec, "--out", e_dir, "--no-plot", "--reuse-from", a_dir], 0, timeout=600)
        e = records(e_dir)["window(w=4)"]
        if "reused_from" in e or e.get("status") != "ok" or "reusing" in out:
            raise Failure(f"a run with subnormals {how or 'not recorded'} must not be reused by a flushing one: {e}")

    # One more step changes the training: nothing is reused.
    c_spec = write(os.path.join(work, "c.json"), json.dumps(
        scenario("reuse_c", data, [{"name": "window", "w": 4}], steps=41)))
    out = run(binary, ["run", c_spec, "--out", os.path.join(work, "c"), "--no-plot", "--reuse-from", a_dir], 0,
              timeout=600)
    c = records(os.path.join(work, "c"))["window(w=4)"]
    if "reused_from" in c or "reusing" in out:
        raise Failure(f"a point with other steps must train, not reuse: {c}")

    run(binary, ["run", c_spec, "--out", os.path.join(work, "d"), "--reuse-from", os.path.join(work, "nowhere")],
        (1, 2), mentions=[f"--reuse-from {os.path.join(work, 'nowhere')}: not a directory"])
    print("reuse runs: ok (identical point copied with --jobs 1 and 2, differing points trained, bad directory refused)")


if __name__ == "__main__":
    drive(main, "usage: reuse_runs.py SPARSEBENCH WORK_DIR")
