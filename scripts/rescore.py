#!/usr/bin/env python3
# Scores every finished point of a task run directory again from its last checkpoint, with nothing trained.
# Two uses: --answers hidden scores a model trained with MQAR answers revealed (the input after each query) on the
# same sequences with them hidden, where it must match keys instead of ruling out values already shown; --task-eval N
# scores on the first N held-out sequences (with N above the run's own count, a superset of them), which shrinks the
# test-sampling noise in one seed's score and in its distance buckets. Each checkpoint is copied to OUT/NNNN and
# resumed there at its last step, so the run directory is not touched. Checkpoints are not committed: this needs the
# run's working tree.
# usage: python3 scripts/rescore.py RUN_DIR OUT_DIR [--answers hidden|as-trained] [--task-eval N]
#                                   [--bin build/harness/sparsebench]
import argparse
import json
import os
import shutil
import subprocess
import sys


def train_args(cfg, out, binary, answers):
    """The train command that resumes `cfg`'s run in `out` (nothing left to train) with `answers` shown or hidden."""
    m = cfg["model"]
    args = [binary, "train"]
    if m["attention"] == "graph":
        args += ["--pattern", m["pattern"]]
        for k, v in sorted(m.get("pattern_params", {}).items()):
            args += ["--set", f"{k}={v}"]
    args += ["--attention", m["attention"], "--positions", m["positions"]]
    for key in ("context", "layers", "dim", "heads", "ffn", "dropout"):
        args += [f"--{key}", str(m[key])]
    if m.get("post_norm"):
        args.append("--post-norm")
    for key in ("task", "task_vocab", "task_pairs", "task_pairs_min", "task_eval", "steps", "batch", "lr", "warmup",
                "min_lr_ratio", "weight_decay", "beta1", "beta2", "clip", "seed", "eval_every", "eval_batch", "dtype"):
        args += ["--" + key.replace("_", "-"), str(cfg[key])]
    return args + ["--task-answers", answers, "--checkpoint-every", "0", "--threads", "1", "--resume",
                   "--allow-changes", "--quiet", "--out", out]


def score(result):
    """One scoring's account: accuracy overall and by distance, and what it was scored on."""
    return {"test_accuracy": result["test_accuracy"], "by_distance": result["accuracy_by_distance"],
            "answers": result["task"]["params"].get("answers"), "task_eval": result["config"]["task_eval"],
            "task": result["task"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("run_dir")
    ap.add_argument("out_dir")
    ap.add_argument("--answers", choices=("hidden", "as-trained"), default="hidden")
    ap.add_argument("--task-eval", type=int, default=None, help="held-out sequences to score (default: as trained)")
    ap.add_argument("--bin", default="build/harness/sparsebench")
    a = ap.parse_args()
    if a.task_eval is not None and a.task_eval < 1:
        print(f"rescore.py: --task-eval {a.task_eval}: expected a positive count of sequences", file=sys.stderr)
        sys.exit(2)
    train_dir = os.path.join(a.run_dir, "train")
    if not os.path.isdir(train_dir):
        print(f"rescore.py: {train_dir}: no such directory (expected a run directory of a training sweep)",
              file=sys.stderr)
        sys.exit(2)
    rows = []
    for point in sorted(os.listdir(train_dir)):
        src = os.path.join(train_dir, point)
        if not os.path.exists(os.path.join(src, "result.json")):
            print(f"{point}: no result.json (not finished): skipped", file=sys.stderr)
            continue
        if not os.path.exists(os.path.join(src, "checkpoint.pt")):
            print(f"{point}: no checkpoint.pt (checkpoints are not committed: train the run again)", file=sys.stderr)
            continue
        before = json.load(open(os.path.join(src, "result.json")))
        cfg = dict(before["config"])
        if cfg.get("task") != "mqar":
            continue
        answers = cfg.get("task_answers", "revealed") if a.answers == "as-trained" else a.answers
        if a.task_eval is not None:
            cfg["task_eval"] = a.task_eval
        out = os.path.join(a.out_dir, point)
        os.makedirs(out, exist_ok=True)
        shutil.copy(os.path.join(src, "checkpoint.pt"), os.path.join(out, "checkpoint.pt"))
        subprocess.run(train_args(cfg, out, a.bin, answers), check=True, stdout=subprocess.DEVNULL)
        after = json.load(open(os.path.join(out, "result.json")))
        os.remove(os.path.join(out, "checkpoint.pt"))
        m = cfg["model"]
        params = ", ".join(f"{k}={v}" for k, v in sorted(m.get("pattern_params", {}).items()))
        label = "dense" if m["attention"] != "graph" else m["pattern"] + (f"({params})" if params else "")
        rows.append({"point": point, "label": label, "seed": cfg["seed"], "steps": before.get("steps"),
                     "trained_at": before.get("git_commit"), "scored_at": after.get("git_commit"),
                     "cpu": after.get("cpu"), "simd_target": after.get("simd_target"),
                     "trained": score(before), "rescored": score(after)})
        print(f"{point} {label:<18} seed {cfg['seed']}: as trained {100 * before['test_accuracy']:5.1f}% "
              f"({before['config']['task_eval']} sequences), rescored {100 * after['test_accuracy']:5.1f}% "
              f"({cfg['task_eval']} sequences, answers {answers}) by distance "
              + " ".join(f"{b['lo']}-{b['hi']}:{100 * b['accuracy']:.1f}" for b in after["accuracy_by_distance"]),
              flush=True)
    with open(os.path.join(a.out_dir, "rescored.json"), "w") as f:
        json.dump(rows, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
