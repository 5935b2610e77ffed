#!/usr/bin/env python3
# scripts/slurm/sweep.sbatch on a one-node Slurm cluster brought up on localhost (scripts/slurm/local_cluster.sh): a
# two-task array sweep plus its dependent merge job give a complete merged run. Skips (77) without slurm-wlm + munge
# or when the daemons cannot start here. usage: slurm_sweep.py SPARSEBENCH SOURCE_DIR WORK_DIR
import json
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "reliability"))
from sbtest import SKIP, Failure, drive, text_data, write  # noqa: E402


def stop(cluster):
    """Stops the daemons by their pid files: SIGTERM, then SIGKILL after 10 s."""
    pids = []
    for f in ("slurmd.pid", "slurmctld.pid", "munge/pid"):
        try:
            pids.append(int(open(os.path.join(cluster, f)).read().strip()))
        except (OSError, ValueError):
            pass
    for sig in (15, 9):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except OSError:
                pass
        t0 = time.time()
        while time.time() - t0 < 10 and any(alive(p) for p in pids):
            time.sleep(0.1)


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except OSError:
        return False


def main(binary, source, work):
    binary, source, work = (os.path.abspath(p) for p in (binary, source, work))
    for tool in ("sbatch", "squeue", "slurmctld", "slurmd", "munged"):
        if not shutil.which(tool) and not os.path.exists(f"/usr/sbin/{tool}"):
            print(f"SKIP: {tool} not installed (apt-get install slurm-wlm munge)")
            return SKIP
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    cluster = os.path.join(work, "cluster")
    up = subprocess.run(["bash", "-c", f'source "{source}/scripts/slurm/local_cluster.sh" "{cluster}" && echo "$SLURM_CONF"'],
                        capture_output=True, text=True, timeout=120)
    if up.returncode != 0:
        stop(cluster)
        logs = ""
        for name in ("slurmctld.log", "slurmd.log", "munged.log"):
            path = os.path.join(cluster, "log", name)
            if os.path.exists(path):
                logs += f"--- {name}\n" + open(path).read()[-1500:]
        print(f"SKIP: a local Slurm cluster could not start here (exit {up.returncode}): {up.stderr[-500:]}\n{logs}")
        return SKIP
    env = dict(os.environ, SLURM_CONF=up.stdout.strip().splitlines()[-1], SPARSEBENCH=binary, SB_JOBS="1")
    try:
        data = text_data(os.path.join(work, "text.bin"))
        scenario = write(os.path.join(work, "tiny.json"), json.dumps({
            "name": "slurm_sweep", "kind": "train", "seed": 2, "model": {"layers": 1, "dim": 16, "ffn": 32, "heads": 2},
            "train": {"data": data, "steps": 3, "batch": 2, "eval_every": 0, "eval_bytes": 512},
            "axes": {"patterns": [{"name": "window", "w": [4, 8]}, {"name": "star"}], "lengths": [32],
                     "causal": True, "threads": 1}}))
        out = os.path.join(work, "out")
        sub = subprocess.run(["sbatch", "--parsable", "--array=0-1", "--cpus-per-task=1", f"--chdir={work}",
                              os.path.join(source, "scripts", "slurm", "sweep.sbatch"), scenario, out],
                             capture_output=True, text=True, env=env, timeout=60)
        if sub.returncode != 0:
            raise Failure(f"sbatch failed: {sub.stderr}")
        job = sub.stdout.strip().split(";")[0]
        t0 = time.time()
        merged = os.path.join(out, "merged", "run.json")
        while time.time() - t0 < 400:
            q = subprocess.run(["squeue", "-h", "-o", "%i %T %j"], capture_output=True, text=True, env=env)
            if q.returncode == 0 and not q.stdout.strip():  # every job, the merge included, has ended
                break
            time.sleep(1)
        logs = "".join(f"--- {f}\n" + open(os.path.join(work, f)).read()[-1500:]
                       for f in sorted(os.listdir(work)) if f.startswith("slurm-"))
        if not os.path.exists(merged):
            raise Failure(f"no merged run after {time.time() - t0:.0f} s (array job {job})\n{logs}")
        run = json.load(open(merged))
        recs = [json.loads(x) for x in open(os.path.join(out, "merged", "records.jsonl"))]
        if not run["merged"]["complete"] or len(recs) != 3 or len(run["merged"]["from"]) != 2:
            raise Failure(f"merge incomplete: {run['merged']} with {len(recs)} records\n{logs}")
        sources = {r["shard"]["source"].split(" (")[0] for r in recs}
        if sources != {"Slurm job array"}:
            raise Failure(f"shards did not come from the job array: {sources}")
        print(f"slurm sweep: array job {job} and its merge finished in {time.time() - t0:.0f} s; merge complete")
        return 0
    finally:
        subprocess.run(["scancel", "-u", str(os.getuid())], env=env, capture_output=True)
        stop(cluster)


if __name__ == "__main__":
    drive(main, "usage: slurm_sweep.py SPARSEBENCH SOURCE_DIR WORK_DIR")
