#!/usr/bin/env python3
"""`sparsebench bench kernels` JSON names what ran: commit, build type, SIMD target, CPU, threads and how large host
blocks were served (kept, or mapped per call with SB_HOST_BLOCK_CACHE=0), per run."""
import json
import os
import subprocess
import sys

sb, work = sys.argv[1], sys.argv[2]
os.makedirs(work, exist_ok=True)
scenario = os.path.join(work, "tiny.json")
with open(scenario, "w") as f:
    json.dump({"name": "tiny", "kind": "attention", "repeats": 1, "warmup": 1,
               "attention": {"heads": 2, "head_dim": 16, "relations": True},
               "axes": {"patterns": [{"name": "window", "w": 4}], "lengths": [64], "modes": ["forward"]}}, f)
env = {k: v for k, v in os.environ.items() if k not in ("SB_CPU_TARGET", "SB_HOST_BLOCK_CACHE")}


def bench(extra_env):
    out = subprocess.run([sb, "bench", "kernels", "--scenario", scenario, "--threads", "1",
                          "--benchmark_format=json", "--benchmark_min_time=0.01"],
                         capture_output=True, text=True, env={**env, **extra_env}, timeout=600)
    if out.returncode != 0:
        sys.exit(f"bench kernels {extra_env} failed ({out.returncode}):\n{out.stderr}")
    return json.loads(out.stdout)


doc = bench({})
ctx = doc["context"]
problems = []
plain = bench({"SB_HOST_BLOCK_CACHE": "0"})["context"].get("host_large_blocks")
for what, got, want in (("default", ctx.get("host_large_blocks"), "cached"), ("SB_HOST_BLOCK_CACHE=0", plain, "plain")):
    if got != want:
        problems.append(f"{what}: context host_large_blocks = {got!r}, expected {want!r}")
for key, want in (("threads", "1"), ("suite", "kernels")):
    if ctx.get(key) != want:
        problems.append(f"context {key} = {ctx.get(key)!r}, expected {want!r}")
for key in ("simd_target", "git_commit", "sparsebench_build_type", "cpu"):
    if not ctx.get(key):
        problems.append(f"context has no {key}")
runs = [b for b in doc["benchmarks"] if b.get("run_type") == "iteration"]
if not runs:
    problems.append("no benchmark ran")
for b in runs:
    if f"simd={ctx.get('simd_target')}" not in b.get("label", ""):
        problems.append(f"{b['name']}: label {b.get('label')!r} does not name the target")
if problems:
    sys.exit("\n".join(problems))
print(f"ok: {len(runs)} runs, commit {ctx['git_commit']}, {ctx['cpu']}")
