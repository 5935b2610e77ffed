"""scripts/rescore.py scores a finished run's checkpoint again on more held-out sequences or with answers hidden,
records both scores, skips unfinished points, leaves the run untouched, and refuses bad input naming it (exit 2)."""
import json
import os
import shutil
import subprocess
import sys

exe, script, work = sys.argv[1], sys.argv[2], sys.argv[3]
shutil.rmtree(work, ignore_errors=True)
run_dir = os.path.join(work, "run")
os.makedirs(os.path.join(run_dir, "train", "0001"))  # a point still training: a log, no result.json
open(os.path.join(run_dir, "train", "0001", "metrics.jsonl"), "w").close()
problems = []

pairs = 2
tiny = [exe, "train", "--task", "mqar", "--task-vocab", "32", "--task-pairs", str(pairs), "--task-eval", "4",
        "--context", "16", "--layers", "1", "--dim", "16", "--heads", "1", "--ffn", "16", "--batch", "2",
        "--steps", "3", "--eval-every", "0", "--threads", "1", "--out", os.path.join(run_dir, "train", "0000")]
p = subprocess.run(tiny, capture_output=True, text=True, timeout=300)
if p.returncode != 0:
    sys.exit(f"tiny training run: exit {p.returncode}: {p.stderr[-800:]}")
src_result = os.path.join(run_dir, "train", "0000", "result.json")
src_bytes = open(src_result, "rb").read()


def rescore(out, *extra):
    return subprocess.run([sys.executable, script, run_dir, out, "--bin", exe, *extra], capture_output=True,
                          text=True, timeout=300)


def answers(by_distance):
    return sum(b["answers"] for b in by_distance)


# More sequences, answers as trained (revealed): both scores recorded, each with what it was scored on.
out = os.path.join(work, "more")
p = rescore(out, "--task-eval", "16", "--answers", "as-trained")
if p.returncode != 0:
    problems.append(f"--task-eval 16: exit {p.returncode}: {p.stderr[-800:]}")
else:
    rows = json.load(open(os.path.join(out, "rescored.json")))
    if [r["point"] for r in rows] != ["0000"]:
        problems.append(f"--task-eval 16: points {[r['point'] for r in rows]}, expected only the finished 0000")
    else:
        r = rows[0]
        if (r["trained"]["task_eval"], r["rescored"]["task_eval"]) != (4, 16):
            problems.append(f"task_eval trained/rescored {r['trained']['task_eval']}/{r['rescored']['task_eval']}, "
                            "expected 4/16")
        if (answers(r["trained"]["by_distance"]), answers(r["rescored"]["by_distance"])) != (4 * pairs, 16 * pairs):
            problems.append(f"answers scored {answers(r['trained']['by_distance'])} then "
                            f"{answers(r['rescored']['by_distance'])}, expected {4 * pairs} then {16 * pairs}")
        if (r["trained"]["answers"], r["rescored"]["answers"]) != ("revealed", "revealed"):
            problems.append(f"--answers as-trained scored with answers {r['rescored']['answers']!r}")
        if r["steps"] != 3 or r["seed"] != 1:
            problems.append(f"row names steps {r['steps']} and seed {r['seed']}, expected 3 and 1")
    if "0001: no result.json (not finished): skipped" not in p.stderr:
        problems.append(f"the unfinished point was not reported as skipped: {p.stderr[-400:]!r}")
    if os.path.exists(os.path.join(out, "0000", "checkpoint.pt")):
        problems.append("the copied checkpoint was left in the output")

# Answers hidden (the default): the same sequences, scored on key matching.
out = os.path.join(work, "hidden")
p = rescore(out)
if p.returncode != 0:
    problems.append(f"default (hidden): exit {p.returncode}: {p.stderr[-800:]}")
else:
    r = json.load(open(os.path.join(out, "rescored.json")))[0]
    if (r["trained"]["answers"], r["rescored"]["answers"], r["rescored"]["task_eval"]) != ("revealed", "hidden", 4):
        problems.append(f"default rescoring: answers {r['trained']['answers']!r} -> {r['rescored']['answers']!r}, "
                        f"task_eval {r['rescored']['task_eval']}; expected revealed -> hidden at 4")

if open(src_result, "rb").read() != src_bytes:
    problems.append("the run's own result.json changed")

p = rescore(os.path.join(work, "bad"), "--task-eval", "0")
if p.returncode != 2 or "--task-eval 0: expected a positive count of sequences" not in p.stderr:
    problems.append(f"--task-eval 0: exit {p.returncode}, stderr {p.stderr[-300:]!r}")
p = subprocess.run([sys.executable, script, os.path.join(work, "nowhere"), os.path.join(work, "bad")],
                   capture_output=True, text=True, timeout=60)
if p.returncode != 2 or "nowhere/train: no such directory" not in p.stderr:
    problems.append(f"missing run directory: exit {p.returncode}, stderr {p.stderr[-300:]!r}")

for msg in problems:
    print("FAIL:", msg)
if problems:
    sys.exit(1)
print("rescore: more sequences, hidden answers, skipped points and bad input as expected")
