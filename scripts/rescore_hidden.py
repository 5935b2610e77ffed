#!/usr/bin/env python3
# Scores every trained point of an MQAR run directory again on the same held-out sequences with answers hidden.
# A model trained with answers revealed (the input after each query) can name an answer by ruling out the values
# already shown; with them hidden it must match keys. Each point's checkpoint is copied to OUT/NNNN and resumed there
# at its last step with --task-answers hidden, so nothing is trained and the run directory is not touched.
# usage: python3 scripts/rescore_hidden.py RUN_DIR OUT_DIR [--bin build/harness/sparsebench]
import argparse
import json
import os
import shutil
import subprocess
import sys


def train_args(cfg, out, binary):
    """The train command that resumes `cfg`'s run in `out` with answers hidden (nothing left to train)."""
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
    return args + ["--task-answers", "hidden", "--checkpoint-every", "0", "--threads", "1", "--resume",
                   "--allow-changes", "--quiet", "--out", out]


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("run_dir")
    ap.add_argument("out_dir")
    ap.add_argument("--bin", default="build/harness/sparsebench")
    a = ap.parse_args()
    rows = []
    for point in sorted(os.listdir(os.path.join(a.run_dir, "train"))):
        src = os.path.join(a.run_dir, "train", point)
        if not os.path.exists(os.path.join(src, "checkpoint.pt")):
            print(f"{point}: no checkpoint.pt (checkpoints are not committed: train the run again)", file=sys.stderr)
            continue
        before = json.load(open(os.path.join(src, "result.json")))
        cfg = before["config"]
        if cfg.get("task") != "mqar":
            continue
        out = os.path.join(a.out_dir, point)
        os.makedirs(out, exist_ok=True)
        shutil.copy(os.path.join(src, "checkpoint.pt"), os.path.join(out, "checkpoint.pt"))
        subprocess.run(train_args(cfg, out, a.bin), check=True, stdout=subprocess.DEVNULL)
        after = json.load(open(os.path.join(out, "result.json")))
        os.remove(os.path.join(out, "checkpoint.pt"))
        m = cfg["model"]
        params = ", ".join(f"{k}={v}" for k, v in sorted(m.get("pattern_params", {}).items()))
        label = "dense" if m["attention"] != "graph" else m["pattern"] + (f"({params})" if params else "")
        rows.append({"point": point, "label": label, "seed": cfg["seed"], "steps": before.get("steps"),
                     "trained_at": before.get("git_commit"), "scored_at": after.get("git_commit"),
                     "cpu": after.get("cpu"), "simd_target": after.get("simd_target"),
                     "revealed": {"test_accuracy": before["test_accuracy"], "by_distance": before["accuracy_by_distance"]},
                     "hidden": {"test_accuracy": after["test_accuracy"], "by_distance": after["accuracy_by_distance"],
                                "task": after["task"]}})
        r = rows[-1]
        print(f"{point} {r['label']:<18} seed {r['seed']}: revealed {100 * before['test_accuracy']:5.1f}%  hidden "
              f"{100 * after['test_accuracy']:5.1f}%  by distance "
              + " ".join(f"{b['lo']}-{b['hi']}:{100 * b['accuracy']:.0f}" for b in after["accuracy_by_distance"]),
              flush=True)
    with open(os.path.join(a.out_dir, "rescored.json"), "w") as f:
        json.dump(rows, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
