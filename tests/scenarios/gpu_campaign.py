#!/usr/bin/env python3
# scripts/gpu_campaign.sh on the CPU: a scenario run within a budget packs its records without checkpoints, a run
# cut by the budget continues on another "machine" (a fresh folder) from the packed records until every point is
# done, points already recorded are not trained again, and bad arguments are refused by name.
# usage: gpu_campaign.py SPARSEBENCH SCRIPT WORK_DIR
import json
import os
import shutil
import subprocess
import sys
import tarfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "reliability"))
from sbtest import Failure, text_data, write  # noqa: E402


def campaign(script, binary, scenario, out, *extra):
    p = subprocess.run(["bash", script, binary, scenario, out, *extra], capture_output=True, text=True, timeout=900)
    return p.returncode, p.stdout + p.stderr


def packed(out):
    with tarfile.open(os.path.join(out, "records.tgz")) as t:
        return t.getnames()


def records(out):
    names = packed(out)
    with tarfile.open(os.path.join(out, "records.tgz")) as t:
        member = next((n for n in names if os.path.basename(n) == "records.jsonl" and n.count("/") <= 1), None)
        if member is None:
            return {}
        return {r["label"]: r for r in map(json.loads, t.extractfile(member).read().decode().splitlines())}


def main(binary, script, work):
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    data = text_data(os.path.join(work, "text.bin"), size=40000)
    spec = write(os.path.join(work, "c.json"), json.dumps({
        "name": "campaign", "kind": "train",
        "model": {"layers": 1, "dim": 16, "ffn": 32, "heads": 2},
        "train": {"steps": 300, "batch": 2, "eval_every": 100, "eval_bytes": 2048, "log_every": 50,
                  "checkpoint_every": 50, "lens_bytes": 0, "data": data},
        "axes": {"patterns": [{"name": "window", "w": [2, 4, 6]}], "lengths": [32], "threads": 1, "seeds": [5]}}))

    # A budget of 2 s ends the run early (or not, on a fast machine); either way what finished is packed.
    first = os.path.join(work, "m1")
    rc, out = campaign(script, binary, spec, first, "--budget", "2")
    if rc != 0:
        raise Failure(f"a budget-cut campaign should exit 0, got {rc}\n{out}")
    if any(os.path.basename(n) == "checkpoint.pt" for n in packed(first)):
        raise Failure(f"records.tgz carries a checkpoint: {packed(first)}")
    done_first = records(first)

    # The next machine starts from the packed records and finishes the rest.
    second = os.path.join(work, "m2")
    rc, out = campaign(script, binary, spec, second, "--from", os.path.join(first, "records.tgz"), "--budget", "600")
    if rc != 0:
        raise Failure(f"the continued campaign should exit 0, got {rc}\n{out}")
    done = records(second)
    if sorted(done) != ["window(w=2)", "window(w=4)", "window(w=6)"]:
        raise Failure(f"expected the three points recorded after the continuation, got {sorted(done)}\n{out}")
    if "mps: off" not in open(os.path.join(second, "campaign.txt")).read():
        raise Failure("campaign.txt does not say the MPS daemon was off (no --mps)")
    if "records: 3" not in open(os.path.join(second, "campaign.txt")).read():
        raise Failure(f"campaign.txt does not count 3 records: {open(os.path.join(second, 'campaign.txt')).read()}")
    for label, r in done_first.items():  # kept as recorded, not trained again
        if done[label].get("final_loss") != r.get("final_loss") or done[label].get("train_s") != r.get("train_s"):
            raise Failure(f"{label} was trained again on the second machine")
    if any(os.path.basename(n) == "checkpoint.pt" for n in packed(second)):
        raise Failure("records.tgz carries a checkpoint")

    # A third machine given the finished records trains nothing.
    third = os.path.join(work, "m3")
    rc, out = campaign(script, binary, spec, third, "--from", os.path.join(second, "records.tgz"))
    again = records(third)
    if rc != 0 or any(again[k].get("final_loss") != done[k].get("final_loss") for k in done):
        raise Failure(f"a finished campaign continued should change nothing (exit {rc})\n{out}")

    for args, says in ((["--budget", "soon"], "--budget: expected whole seconds > 0, got 'soon'"),
                       (["--from", os.path.join(work, "none.tgz")], "is not a file"),
                       (["--threads", "2"], "unknown option --threads (expected --budget, --shard, --from, --jobs, "
                                            "--mps, --set)")):
        rc, out = campaign(script, binary, spec, os.path.join(work, "bad"), *args)
        if rc != 2 or says not in out:
            raise Failure(f"{args}: expected exit 2 naming the problem ({says!r}), got {rc}\n{out}")
    print("gpu_campaign: ok")


if __name__ == "__main__":
    main(*sys.argv[1:4])
