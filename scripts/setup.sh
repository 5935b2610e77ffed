#!/usr/bin/env bash
# Installs what a fresh Debian 12 machine lacks, builds sparsebench, and runs the main job (offline).
# usage: bash scripts/setup.sh [--no-run] [--build-dir DIR] [--python]
#   --python: also a virtual environment BUILD_DIR/py-venv with PyPI's torch (about 5 GB, CUDA build), pytest and
#   scikit-build-core, where the test suite's python_package test installs and tests the Python package.
set -euo pipefail
cd "$(dirname "$0")/.."

run_main=1
python=0
build_dir=build
while [ $# -gt 0 ]; do
  case "$1" in
    --no-run) run_main=0 ;;
    --build-dir) build_dir="$2"; shift ;;
    --python) python=1 ;;
    *) echo "setup.sh: unknown option $1 (expected --no-run, --build-dir DIR, --python)" >&2; exit 2 ;;
  esac
  shift
done

# Debian packages: compilers and libraries, LibTorch (CPU) with the OpenBLAS backend, oneDNN's headers (the model's
# linear layers, harness/lm/fast_linear.cpp; LibTorch already links its library), Highway (SIMD dispatch),
# Gloo's headers (LibTorch's c10d process group for data-parallel training), Python torch for the op test, Slurm and
# munge for the one-node cluster the sharded-sweep test brings up, an aarch64 cross compiler for the test that the
# CPU kernels compile for ARM (NEON, SVE), OpenBLAS's pthreads build for the test that its threads flush subnormals
# too (selected below is the OpenMP build).
debs=(build-essential cmake git libtorch-dev libopenblas0-openmp libopenblas0-pthread libdnnl-dev libfmt-dev
      nlohmann-json3-dev libhwy-dev libbenchmark-dev libgtest-dev libgloo-dev python3-torch clang libclang-rt-14-dev
      slurm-wlm munge g++-aarch64-linux-gnu)
[ "$python" = 1 ] && debs+=(python3-venv)
sudo_cmd=""
[ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
missing=()
for p in "${debs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  $sudo_cmd apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -q "${missing[@]}"
fi

# BLAS: OpenBLAS's OpenMP build shares LibTorch's OpenMP thread pool; the pthreads build (Debian's default
# when both are installed) keeps a second pool that competes with it for the cores.
multiarch=$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)
omp_dir=/usr/lib/$multiarch/openblas-openmp
for lib in libblas.so.3 liblapack.so.3 libopenblas.so.0; do
  if [ -e "$omp_dir/$lib" ] && [ "$(readlink -f "/usr/lib/$multiarch/$lib")" != "$(readlink -f "$omp_dir/$lib")" ]; then
    $sudo_cmd update-alternatives --quiet --set "$lib-$multiarch" "$omp_dir/$lib"
  fi
done

# Plots: matplotlib for the python3 on PATH.
if ! python3 -c "import matplotlib" 2>/dev/null; then
  echo "setup: installing matplotlib"
  python3 -m pip install -q matplotlib
fi

cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Release
cmake --build "$build_dir" -j"$(nproc)"

# The Python package's environment: the python3 on PATH with PyPI's torch 2.x (the package needs torch.library's
# custom ops); the python_package test builds the package into it with pip and runs tests/python.
# PyPI's torch is a CUDA build: about 3 GB downloaded and 5.5 GB installed, so a machine without room for it gets no
# environment (the python_package test then skips and says why) instead of a failed setup. No pip cache: it would
# keep a third copy.
if [ "$python" = 1 ]; then
  venv="$build_dir/py-venv"
  need_gib=10
  free_gib=$(( $(df -Pk "$build_dir" | awk 'NR == 2 {print $4}') / 1024 / 1024 ))
  if [ ! -x "$venv/bin/python" ] && [ "$free_gib" -lt "$need_gib" ]; then
    echo "setup: no Python package environment: $free_gib GiB free under $build_dir, PyPI's torch needs about" \
         "$need_gib GiB; the python_package test will be skipped"
  else
    [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
    pip_log="$build_dir/py-venv-pip.log"
    if "$venv/bin/python" -m pip install -q --no-cache-dir --upgrade pip >"$pip_log" 2>&1 &&
       "$venv/bin/python" -m pip install -q --no-cache-dir "torch>=2.5" pytest numpy "scikit-build-core>=0.9" ninja \
         >>"$pip_log" 2>&1; then
      "$venv/bin/python" -c 'import torch; print("setup: Python package environment", torch.__version__)'
    elif grep -q "No space left on device" "$pip_log"; then
      rm -rf "$venv"
      echo "setup: no Python package environment: the disk filled while pip installed torch ($pip_log); removed" \
           "$venv, so the python_package test will be skipped"
    else
      cat "$pip_log" >&2
      echo "setup: pip could not install the Python package environment into $venv (above)" >&2
      exit 1
    fi
  fi
fi

if [ "$run_main" -eq 1 ]; then
  "$build_dir/harness/sparsebench" patterns --stats --n 4096
  if [ -f scenarios/quick.json ]; then
    "$build_dir/harness/sparsebench" run scenarios/quick.json
  fi
fi
