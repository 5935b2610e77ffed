#!/usr/bin/env bash
# Builds the Python package into a virtual environment with pip (pip install .) and runs its tests (tests/python),
# then benchmarks/flex_compare.py on a small graph through the installed package. Exit 77 (a skip for CTest) when
# the environment is missing or its torch is older than 2.5.
# usage: bash scripts/python_package.sh [--venv DIR (build/py-venv)] [--sparsebench BINARY]
#   SB_PYTHON_CUDA=1 builds the package's CUDA kernels too (when nvcc is found and torch has CUDA; minutes more).
set -uo pipefail
cd "$(dirname "$0")/.."
venv=build/py-venv
sb=""
while [ $# -gt 0 ]; do
  case "$1" in
    --venv) venv="$2"; shift ;;
    --sparsebench) sb="$2"; shift ;;
    *) echo "python_package.sh: unknown option $1 (expected --venv DIR, --sparsebench BINARY)" >&2; exit 2 ;;
  esac
  shift
done
venv=$(realpath -m "$venv")
py="$venv/bin/python"
if [ ! -x "$py" ]; then
  echo "SKIPPED: no Python environment at $venv (bash scripts/setup.sh --python makes one where the disk has" \
       "about 10 GiB free)"
  exit 77
fi
version_ok='import sys, torch; sys.exit(tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2]) < (2, 5))'
if ! "$py" -c "$version_ok"; then
  echo "SKIPPED: $venv has no torch >= 2.5 (bash scripts/setup.sh --python installs one)"
  exit 77
fi
# torch.compile's cache per environment: two environments sharing /tmp/torchinductor_* reuse each other's verdicts
# on the CPU's vector ISA and their compiled kernels, which link against each one's own torch.
export TORCHINDUCTOR_CACHE_DIR="$venv/inductor-cache"
defines="SB_CUDA=OFF"
[ "${SB_PYTHON_CUDA:-0}" = 1 ] && defines="SB_CUDA=AUTO"
t0=$SECONDS
# No build isolation: the build needs this environment's torch, and scikit-build-core's build folder
# (build-python/) is kept, so a second run rebuilds only what changed.
SKBUILD_CMAKE_DEFINE="$defines" "$py" -m pip install -q --no-build-isolation --no-deps . || {
  echo "python_package: pip install . failed"; exit 1; }
echo "python_package: pip install . took $((SECONDS - t0)) s ($defines)"
# From outside the clone, so the installed package is the one imported.
repo=$PWD
(cd /tmp && "$py" -m pytest -q -p no:cacheprovider "$repo/tests/python") || {
  echo "python_package: pytest failed"; exit 1; }
# FlexAttention's compiled CPU kernels need inductor's vector ISA check to pass; it fails where the Python's library
# folder holds another LibTorch (Debian's python3 with Debian's libtorch-dev: its link finds that one first).
isa=$("$py" -c 'from torch._inductor import cpu_vec_isa; print(cpu_vec_isa.pick_vec_isa() or "none")' 2>/dev/null |
      tail -1)
if [ -n "$sb" ] && [ "$isa" = none ]; then
  echo "python_package: flex_compare not run: torch's inductor finds no CPU vector ISA with $venv's Python"
  echo "  (its library folder puts another LibTorch ahead of torch's own; a Python built elsewhere, e.g. pyenv,"
  echo "  avoids it)"
elif [ -n "$sb" ]; then
  lib=$("$py" -c 'import sparsebench; print(sparsebench.library_path())' 2>/dev/null | tail -1)
  PYTHON="$py" bash tests/kernels/flex_compare_smoke.sh "$sb" "$lib" "$repo" || {
    echo "python_package: flex_compare through the package failed"; exit 1; }
fi
echo "python_package: ok"
