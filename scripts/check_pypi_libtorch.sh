#!/usr/bin/env bash
# Builds sparsebench against the LibTorch inside PyPI's `torch` wheel (the one GPU machines use) on any machine, GPU
# or not, and runs the LibTorch-dependent tests on its CPU: a check that the 2.x build (CUDA kernels, Gloo, NCCL)
# still compiles, links and trains. Needs PyPI (pip download); without a network it stops saying so.
# usage: bash scripts/check_pypi_libtorch.sh [--torch VERSION] [--dir DIR (build-pypi)] [--no-tests]
set -euo pipefail
cd "$(dirname "$0")/.."
version=""
dir=build-pypi
tests=1
while [ $# -gt 0 ]; do
  case "$1" in
    --torch) version="$2"; shift ;;
    --dir) dir="$2"; shift ;;
    --no-tests) tests=0 ;;
    *) echo "check_pypi_libtorch.sh: unknown option $1 (expected --torch VERSION, --dir DIR, --no-tests)" >&2; exit 2 ;;
  esac
  shift
done
wheels="$dir/wheels"
mkdir -p "$wheels"
spec="torch${version:+==$version}"
if ! ls "$wheels"/torch-*.whl >/dev/null 2>&1; then
  pip download --no-deps -d "$wheels" "$spec" >"$wheels/download.log" 2>&1 || {
    echo "check_pypi_libtorch.sh: cannot download $spec from PyPI (no network?); see $wheels/download.log" >&2
    exit 1
  }
fi
wheel=$(ls "$wheels"/torch-*.whl | head -1)
root="$dir/libtorch"
[ -d "$root/torch/lib" ] || unzip -q -o "$wheel" 'torch/include/*' 'torch/lib/*' 'torch/share/*' -d "$root"
# The CUDA libraries the wheel links that a CUDA Toolkit does not provide (so its binaries load on this machine).
needed=$(readelf -d "$root/torch/lib/libtorch_cuda.so" 2>/dev/null | sed -n 's/.*Shared library: \[\(.*\)\]/\1/p' || true)
libpath=""
if [ -n "$needed" ]; then
  # nvidia-* requirements, and cuFile, which the wheel takes from its cuda-toolkit extra.
  for pkg in $(unzip -p "$wheel" '*.dist-info/METADATA' |
               sed -n 's/^Requires-Dist: \(nvidia-[a-z0-9-]*\)==\([0-9.]*\).*/\1==\2/p') \
             $(echo "$needed" | grep -q '^libcufile' && echo nvidia-cufile || true); do
    ls "$wheels"/"$(echo "${pkg%%==*}" | tr - _)"-*.whl >/dev/null 2>&1 ||
      pip download --no-deps -d "$wheels" "$pkg" >>"$wheels/download.log" 2>&1 ||
      echo "check_pypi_libtorch.sh: could not download $pkg; binaries that need it will not load" >&2
  done
  for w in "$wheels"/nvidia_*.whl; do [ -e "$w" ] && unzip -q -o "$w" -d "$dir/deps"; done
  libpath=$(find "$dir/deps" -name '*.so*' -printf '%h\n' 2>/dev/null | sort -u | tr '\n' ':')
fi
echo "check_pypi_libtorch.sh: $(basename "$wheel") in $root"
missing=$(LD_LIBRARY_PATH="$libpath$root/torch/lib" ldd "$root/torch/lib/libtorch_cuda.so" 2>/dev/null |
          sed -n 's/^\s*\(\S*\) => not found/\1/p' | tr '\n' ' ' || true)
[ -z "$missing" ] || echo "check_pypi_libtorch.sh: not found here: $missing(the build links; binaries will not load)"
# Libraries absent here (e.g. cuDNN without a GPU stack) are resolved where the binary runs, not at link time.
cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$PWD/$root/torch/share/cmake" \
  -DCMAKE_EXE_LINKER_FLAGS="-Wl,--allow-shlib-undefined" -DCMAKE_SHARED_LINKER_FLAGS="-Wl,--allow-shlib-undefined"
export LD_LIBRARY_PATH="${libpath}${LD_LIBRARY_PATH:-}"
cmake --build "$dir" -j"$(nproc)" --target sparsebench
[ "$tests" = 1 ] || exit 0
cmake --build "$dir" -j"$(nproc)" --target test_harness test_gsa_op test_dist
"$dir/harness/sparsebench" train --help | grep -i "process groups"
"$dir/tests/harness/test_harness" --gtest_brief=1
"$dir/tests/kernels/test_gsa_op" --gtest_brief=1
ctest --test-dir "$dir" --output-on-failure -R '^dist_'
