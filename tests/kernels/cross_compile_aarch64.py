#!/usr/bin/env python3
"""The CPU kernels compile for aarch64 with a cross compiler, for every Highway target the build keeps there (NEON;
gsa_cpu_simd.cpp leaves SVE out): a build on an ARM machine gets them. Exits 77 (skip) naming what is missing when there is no aarch64-linux-gnu-g++
(Debian: g++-aarch64-linux-gnu) or no Highway headers.
usage: cross_compile_aarch64.py REPO_ROOT WORK_DIR"""
import os
import shutil
import subprocess
import sys

root, work = sys.argv[1], sys.argv[2]
cxx = shutil.which("aarch64-linux-gnu-g++")
if cxx is None:
    print("skip: no aarch64-linux-gnu-g++ on PATH (Debian: apt-get install g++-aarch64-linux-gnu)")
    sys.exit(77)
# Only the architecture-neutral headers the kernels use: /usr/include itself would bring x86-64 glibc headers.
inc = os.path.join(work, "include")
os.makedirs(inc, exist_ok=True)
for lib in ("hwy", "fmt"):
    src = os.path.join("/usr/include", lib)
    if not os.path.isdir(src):
        print(f"skip: no {src} (Debian: libhwy-dev, libfmt-dev)")
        sys.exit(77)
    dst = os.path.join(inc, lib)
    if not os.path.lexists(dst):
        os.symlink(src, dst)

# The files of sb_kernels' CPU path (kernels/CMakeLists.txt) and the patterns they include.
sources = ["kernels/gsa_cpu_simd.cpp", "kernels/gsa_cpu.cpp", "kernels/gsa_split_plan.cpp",
           "kernels/gsa_host_graph.cpp", "kernels/gsa_backend.cpp", "kernels/gsa_cpu_backend.cpp"]
problems = []
objects = {}
for rel in sources:
    obj = os.path.join(work, os.path.basename(rel) + ".o")
    cmd = [cxx, "-std=c++17", "-O1", "-fopenmp", "-DHWY_SHARED_DEFINE", "-I", root, "-isystem", inc,
           "-c", os.path.join(root, rel), "-o", obj]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=1200)
    if out.returncode != 0:
        problems.append(f"{rel}: aarch64 compile failed ({out.returncode}):\n{out.stderr[-4000:]}")
    objects[rel] = obj

if not problems:
    # The per-target cores are there: Highway names each target's namespace N_<TARGET>.
    syms = subprocess.run(["aarch64-linux-gnu-nm", "-C", objects["kernels/gsa_cpu_simd.cpp"]],
                          capture_output=True, text=True).stdout
    for target in ("N_NEON",):
        if f"sb::{target}::" not in syms:
            problems.append(f"kernels/gsa_cpu_simd.cpp: no {target} cores in the aarch64 object")
    built = sorted({s.split("::")[1] for s in syms.split() if s.startswith("sb::N_")})
if problems:
    sys.exit("\n".join(problems))
print(f"ok: {len(sources)} files compile for aarch64; targets {', '.join(built)}")
