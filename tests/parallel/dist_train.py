#!/usr/bin/env python3
# Data-parallel training over Gloo on loopback: equivalence with one process, resume after a kill, a dying rank.
# usage: dist_train.py SPARSEBENCH WORK_DIR CASE [--no-gloo]   (exit 77: skipped, with the reason printed)
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "reliability"))
from sbtest import SKIP, Failure, run, text_data  # noqa: E402

# A tiny model; the batch is given per case (one process with 2b windows against two ranks with b each).
TINY = ["--pattern", "bpt", "--set", "k=2", "--layers", "2", "--dim", "16", "--heads", "2", "--ffn", "32",
        "--context", "32", "--lr", "0.01", "--warmup", "3", "--eval-bytes", "512", "--eval-batch", "4", "--quiet"]
TIMING = {"tokens_per_s", "train_s", "seconds"}


def untimed(rows):
    """Flat records (metrics lines, evaluations) without their timings, which differ between any two runs."""
    return [{k: v for k, v in r.items() if k not in TIMING} for r in rows]


def metrics(d, kind=None):
    rows = [json.loads(line) for line in open(os.path.join(d, "metrics.jsonl"))]
    return [r for r in rows if kind is None or r["kind"] == kind]


def result(d):
    return json.load(open(os.path.join(d, "result.json")))


def fresh(path):
    shutil.rmtree(path, ignore_errors=True)
    return path


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def compare_losses(one, two, tol, what):
    a, b = metrics(one, "train"), metrics(two, "train")
    if [r["step"] for r in a] != [r["step"] for r in b] or len(a) != 20:
        raise Failure(f"{what}: steps differ: {[r['step'] for r in a]} vs {[r['step'] for r in b]}")
    worst = max(abs(x["loss"] - y["loss"]) for x, y in zip(a, b))
    if worst > tol:
        rows = "\n".join(f"step {x['step']}: {x['loss']!r} vs {y['loss']!r}" for x, y in zip(a, b))
        raise Failure(f"{what}: per-step losses differ by up to {worst:.3g} (> {tol}):\n{rows}")
    ea, eb = metrics(one, "eval"), metrics(two, "eval")
    if len(ea) != len(eb) or any(abs(x["bpc"] - y["bpc"]) > tol for x, y in zip(ea, eb)):
        raise Failure(f"{what}: evaluations differ: {ea} vs {eb}")
    return worst


def check_two_rank_record(d, batch):
    r = result(d)
    dist = r["distributed"]
    if r["world_size"] != 2 or dist["world_size"] != 2 or dist["backend"] != "gloo":
        raise Failure(f"result.json does not record the two Gloo ranks: {json.dumps(dist)}")
    if [x["rank"] for x in dist["ranks"]] != [0, 1] or r["config"]["nproc"] != 2 or r["config"]["batch"] != batch:
        raise Failure(f"result.json ranks/config: {json.dumps(dist)} nproc={r['config']['nproc']}")


def equivalence(b, work, dtype, tol):
    """Two ranks with batch 2 each give one process with batch 4's per-step losses (same windows, same dropout)."""
    data = text_data(os.path.join(work, "text.bin"))
    args = ["--data", data, "--dtype", dtype, "--dropout", "0.1", "--steps", "20", "--log-every", "1",
            "--eval-every", "10", "--no-final-eval"] + TINY
    one, two = fresh(os.path.join(work, "one")), fresh(os.path.join(work, "two"))
    run(b, ["train", "--out", one, "--batch", "4", "--threads", "2"] + args, 0, timeout=300)
    run(b, ["train", "--out", two, "--batch", "2", "--nproc", "2"] + args, 0, timeout=300)
    worst = compare_losses(one, two, tol, f"{dtype}, one process batch 4 vs two ranks batch 2")
    check_two_rank_record(two, 2)
    if result(two)["distributed"]["launch"] != "sparsebench --nproc launcher":
        raise Failure(f"launch recorded as {result(two)['distributed']['launch']!r}")
    if sorted(os.listdir(two)) != sorted(os.listdir(one)):
        raise Failure(f"rank 0 alone writes the run: {sorted(os.listdir(two))} vs {sorted(os.listdir(one))}")
    print(f"{dtype}: 20 steps, per-step losses within {worst:.3g} (tolerance {tol})")


def torchrun(b, work):
    """Ranks started by PyTorch's own launcher (torchrun's environment, agent-hosted store); scripts/torchrun.py
    mends Debian 12's launcher, which cannot parse its own defaults under Python 3.11."""
    py = "/usr/bin/python3"
    probe = subprocess.run([py, "-c", "import torch.distributed.run, torch; print(torch.__version__.split('+')[0])"],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        print(f"skipped: {py} has no torch.distributed.run (Debian's python3-torch)")
        return SKIP
    data = text_data(os.path.join(work, "text.bin"))
    args = ["--data", data, "--dtype", "float64", "--dropout", "0", "--steps", "20", "--log-every", "1",
            "--eval-every", "10", "--no-final-eval"] + TINY
    one, two = fresh(os.path.join(work, "one")), fresh(os.path.join(work, "two"))
    run(b, ["train", "--out", one, "--batch", "4", "--threads", "2"] + args, 0, timeout=300)
    launcher_torch, build_torch = probe.stdout.strip(), result(one)["torch_version"]
    if launcher_torch.split(".")[:2] != build_torch.split(".")[:2]:  # the store protocol differs between releases
        print(f"skipped: {py}'s torchrun is torch {launcher_torch}, this build's LibTorch is {build_torch}")
        return SKIP
    launcher = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "torchrun.py")
    cmd = [py, launcher, "--no_python", "--nproc_per_node", "2", "--master_port",
           str(free_port()), b, "train", "--out", two, "--batch", "2"] + args
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        raise Failure(f"torchrun failed (exit {p.returncode}):\n{(p.stdout + p.stderr)[-3000:]}")
    worst = compare_losses(one, two, 1e-9, "torchrun, float64")
    check_two_rank_record(two, 2)
    if result(two)["distributed"]["launch"] != "torchrun environment":
        raise Failure(f"launch recorded as {result(two)['distributed']['launch']!r}")
    print(f"torchrun: 20 steps, per-step losses within {worst:.3g}")


def resume(b, work):
    """A two-rank run SIGKILLed after a checkpoint and resumed matches the uninterrupted two-rank run."""
    data = text_data(os.path.join(work, "text.bin"))
    args = ["--data", data, "--batch", "2", "--nproc", "2", "--dropout", "0.1", "--steps", "80", "--log-every", "4",
            "--checkpoint-every", "10", "--eval-every", "20"] + TINY
    ref, cut = fresh(os.path.join(work, "ref")), fresh(os.path.join(work, "cut"))
    run(b, ["train", "--out", ref] + args, 0, timeout=300)
    p = subprocess.Popen([b, "train", "--out", cut] + args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    ckpt = os.path.join(cut, "checkpoint.pt")
    deadline = time.time() + 240
    while not os.path.exists(ckpt) and p.poll() is None and time.time() < deadline:
        time.sleep(0.005)
    if p.poll() is not None:
        raise Failure(f"the run ended (exit {p.returncode}) before its first checkpoint: {p.stderr.read()[-2000:]}")
    p.send_signal(signal.SIGKILL)  # the launcher; its ranks die with it
    p.wait()
    if os.path.exists(os.path.join(cut, "result.json")):
        raise Failure("the kill landed after the run finished; make the run longer")
    killed_at = [r["step"] for r in metrics(cut, "train")]
    run(b, ["train", "--out", cut, "--resume"] + args, 0, timeout=300)
    if untimed(metrics(ref)) != untimed(metrics(cut)):
        raise Failure("metrics.jsonl of the resumed run differ from the uninterrupted run's")
    r1, r2 = result(ref), result(cut)
    r1["evals"], r2["evals"] = untimed(r1["evals"]), untimed(r2["evals"])
    for key in ("steps", "final_loss", "valid_bpc", "test_bpc", "evals", "status", "world_size"):
        if r1[key] != r2[key]:
            raise Failure(f"result.json {key}: {r2[key]!r} resumed, {r1[key]!r} uninterrupted")
    print(f"killed after the first checkpoint (logged steps then: {killed_at}); resumed run matches bit for bit")


def wait_for_progress(d, procs, timeout=240):
    """Waits until rank 0 has logged a training step (the ranks are past set-up and exchanging gradients)."""
    path = os.path.join(d, "metrics.jsonl")
    deadline = time.time() + timeout
    while time.time() < deadline:
        if os.path.exists(path) and any('"train"' in line for line in open(path)):
            return
        for p in procs:
            if p.poll() is not None:
                raise Failure(f"a rank ended (exit {p.returncode}) before training: {p.stderr.read()[-2000:]}")
        time.sleep(0.05)
    raise Failure("no training step was logged in time")


def rank_killed(b, work):
    """torchrun-style ranks (no launcher): rank 1 is SIGKILLed mid-run; rank 0 stops with a message within 60 s."""
    data = text_data(os.path.join(work, "text.bin"))
    out = fresh(os.path.join(work, "killed"))
    port = free_port()
    cmd = [b, "train", "--out", out, "--data", data, "--batch", "2", "--steps", "1000000", "--log-every", "1",
           "--checkpoint-every", "0", "--eval-every", "0"] + TINY
    procs = []
    for rank in (0, 1):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE="2",
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
    try:
        wait_for_progress(out, procs)
        procs[1].send_signal(signal.SIGKILL)
        t0 = time.time()
        try:
            procs[0].wait(timeout=60)
        except subprocess.TimeoutExpired:
            raise Failure("rank 0 still runs 60 s after rank 1 was killed (hang)")
        took = time.time() - t0
        err = procs[0].stderr.read()
        if procs[0].returncode != 1 or "rank 0 of 2" not in err or "failed" not in err:
            raise Failure(f"rank 0: exit {procs[0].returncode} after rank 1 died, expected 1 with a message:\n{err}")
        print(f"rank 0 stopped {took:.1f} s after rank 1 was killed: {err.strip().splitlines()[-1]}")
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def children(pid):
    try:
        return [int(x) for x in open(f"/proc/{pid}/task/{pid}/children").read().split()]
    except OSError:
        return []


def launcher_rank_killed(b, work):
    """`train --nproc 2`: a rank SIGKILLed mid-run makes the launcher stop the other and exit non-zero, naming it."""
    data = text_data(os.path.join(work, "text.bin"))
    out = fresh(os.path.join(work, "launcher"))
    p = subprocess.Popen([b, "train", "--out", out, "--data", data, "--batch", "2", "--nproc", "2", "--steps",
                          "1000000", "--log-every", "1", "--checkpoint-every", "0", "--eval-every", "0"] + TINY,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_for_progress(out, [p])
        ranks = children(p.pid)
        if len(ranks) != 2:
            raise Failure(f"the launcher has {len(ranks)} child processes, expected 2")
        os.kill(ranks[1], signal.SIGKILL)
        t0 = time.time()
        try:
            p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            raise Failure("the launcher still runs 60 s after rank 1 was killed (hang)")
        err = p.stderr.read()
        if p.returncode == 0 or "rank 1 of 2" not in err or "killed by signal 9" not in err:
            raise Failure(f"launcher: exit {p.returncode} after rank 1 died; expected non-zero naming it:\n{err}")
        if any(os.path.exists(f"/proc/{pid}") and open(f"/proc/{pid}/stat").read().split()[2] != "Z" for pid in ranks):
            raise Failure("a rank outlived its launcher")
        print(f"launcher exited {p.returncode} {time.time() - t0:.1f} s after rank 1 was killed")
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def no_gloo(b, work):
    """A build without Gloo refuses --nproc 2 with the reason."""
    data = text_data(os.path.join(work, "text.bin"))
    run(b, ["train", "--out", os.path.join(work, "x"), "--data", data, "--nproc", "2"] + TINY, 2,
        mentions=["--nproc 2", "no Gloo process group"])
    print("--nproc 2 refused with the reason")


CASES = {
    "equivalence_fp64": lambda b, w: equivalence(b, w, "float64", 1e-9),
    "equivalence_fp32": lambda b, w: equivalence(b, w, "float32", 1e-5),
    "torchrun": torchrun,
    "resume": resume,
    "rank_killed": rank_killed,
    "launcher_rank_killed": launcher_rank_killed,
    "no_gloo": no_gloo,
}


def main():
    if len(sys.argv) >= 2 and sys.argv[1] == "--list":
        print(";".join(CASES))
        return 0
    b, work, case = sys.argv[1], sys.argv[2], sys.argv[3]
    gloo = "--no-gloo" not in sys.argv[4:]
    if case == "no_gloo" and gloo:
        print("skipped: this build has Gloo (the refusal is checked on builds without it)")
        return SKIP
    if case != "no_gloo" and not gloo:
        print("skipped: this build has no Gloo process group (install libgloo-dev and reconfigure)")
        return SKIP
    work = os.path.join(work, case)
    os.makedirs(work, exist_ok=True)
    try:
        rc = CASES[case](b, work)
    except Failure as e:
        print(f"FAIL {case}: {e}")
        return 1
    return rc or 0


if __name__ == "__main__":
    sys.exit(main())
