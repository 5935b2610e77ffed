#!/usr/bin/env python3
"""`sparsebench bench kernels` skips a point whose analytic memory exceeds the scenario's memory_budget_mb, saying so:
graph points (whose graphs are built as each point runs) as the expander skips dense points, and runs the rest."""
import json
import os
import subprocess
import sys

sb, work = sys.argv[1], sys.argv[2]
os.makedirs(work, exist_ok=True)
scenario = os.path.join(work, "budget.json")
# window w=4 at n=64 fits 0.05 MB (about 0.03 MB); at n=1024, and the dense op at n=1024, it does not.
with open(scenario, "w") as f:
    json.dump({"name": "budget", "kind": "attention", "repeats": 1, "warmup": 1, "memory_budget_mb": 0.05,
               "attention": {"heads": 2, "head_dim": 16, "relations": True},
               "axes": {"patterns": [{"name": "window", "w": 4},
                                     {"name": "dense", "attention": "dense", "label": "dense_torch"}],
                        "lengths": [64, 1024], "modes": ["forward"]}}, f)
out = subprocess.run([sb, "bench", "kernels", "--scenario", scenario, "--threads", "1", "--benchmark_format=json",
                      "--benchmark_min_time=0.01", "--benchmark_filter=^fwd/"],
                     capture_output=True, text=True, timeout=600)
if out.returncode != 0:
    sys.exit(f"bench kernels failed ({out.returncode}):\n{out.stderr}")
runs = {b["run_name"].split("/min_time")[0]: b for b in json.loads(out.stdout)["benchmarks"]}
problems = []
for name, skipped in (("fwd/window(w=4)/n=64", False), ("fwd/window(w=4)/n=1024", True),
                      ("fwd/dense_torch/n=1024", True)):
    b = runs.get(name)
    if b is None:
        problems.append(f"{name}: not in the output ({sorted(runs)})")
        continue
    message = b.get("error_message", "")
    if skipped and not (b.get("error_occurred") and "exceeds the budget 0.0 MiB" in message):
        problems.append(f"{name}: expected a budget skip, got {message!r}")
    if not skipped and (b.get("error_occurred") or b.get("iterations", 0) < 1):
        problems.append(f"{name}: expected a run, got {message!r}")
if problems:
    sys.exit("\n".join(problems))
print("ok: over-budget graph and dense points skipped with the reason, the rest ran")
