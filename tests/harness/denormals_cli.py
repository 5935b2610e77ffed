"""sparsebench flushes subnormal floats unless SB_DENORMALS=keep, records which, and refuses an unknown value;
with OpenBLAS's pthreads build too, whose thread pool starts before main."""
import json
import os
import platform
import shutil
import subprocess
import sys

exe, work = sys.argv[1], sys.argv[2]
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
x86 = platform.machine() in ("x86_64", "AMD64", "i386", "i686")
problems = []


def run(args, value, extra_env=None):
    env = dict(os.environ, **(extra_env or {}))
    env.pop("SB_DENORMALS", None)
    if value is not None:
        env["SB_DENORMALS"] = value
    return subprocess.run([exe] + args, env=env, capture_output=True, text=True, timeout=300)


bad = run(["patterns"], "fast")
if bad.returncode != 2 or "SB_DENORMALS=fast: expected flush (the default) or keep" not in bad.stderr:
    problems.append(f"SB_DENORMALS=fast: exit {bad.returncode}, stderr {bad.stderr!r}")

tiny = ["train", "--task", "mqar", "--task-vocab", "32", "--task-pairs", "2", "--task-eval", "4", "--context", "16",
        "--layers", "1", "--dim", "16", "--heads", "1", "--ffn", "16", "--batch", "2", "--steps", "2",
        "--eval-every", "0", "--threads", "2"]
for value, want in ((None, "flushed"), ("keep", "kept")):
    out = os.path.join(work, value or "default")
    p = run(tiny + ["--out", out], value)
    if p.returncode != 0:
        problems.append(f"train with SB_DENORMALS={value}: exit {p.returncode}: {p.stderr[-500:]}")
        continue
    got = json.load(open(os.path.join(out, "result.json"))).get("denormals")
    if got != (want if x86 else "unknown"):
        problems.append(f"train with SB_DENORMALS={value}: result.json denormals = {got!r}, expected {want!r}")

# Debian's OpenBLAS pthreads build, where installed beside the OpenMP one setup selects (CI installs it).
multiarch = subprocess.run(["gcc", "-print-multiarch"], capture_output=True, text=True).stdout.strip()
multiarch = multiarch or "x86_64-linux-gnu"
pthreads_dir = f"/usr/lib/{multiarch}/openblas-pthread"
if not os.path.exists(os.path.join(pthreads_dir, "libblas.so.3")):
    print(f"skip pthreads case: {pthreads_dir}/libblas.so.3 not installed (Debian package libopenblas0-pthread)")
else:
    out = os.path.join(work, "pthreads")
    p = run(tiny + ["--out", out], None, {"LD_LIBRARY_PATH": pthreads_dir})
    if p.returncode != 0:
        problems.append(f"train on OpenBLAS pthreads: exit {p.returncode}: {p.stderr[-500:]}")
    else:
        result = json.load(open(os.path.join(out, "result.json")))
        if "openblas_threading=pthreads" not in result.get("blas", ""):
            problems.append(f"LD_LIBRARY_PATH={pthreads_dir} did not load the pthreads build: {result.get('blas')!r}")
        elif result.get("denormals") != ("flushed" if x86 else "unknown"):
            problems.append(f"train on OpenBLAS pthreads: result.json denormals = {result.get('denormals')!r}, "
                            "expected 'flushed' (its thread pool starts before main)")

if problems:
    sys.exit("\n".join(problems))
print("ok: flushed by default, kept on request, unknown values refused")
