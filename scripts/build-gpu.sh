#!/usr/bin/env bash
# Builds the self-contained GPU binaries (kvdepot_gpu_tests, kvdepot_gpu_bench) into .gpu/bin/,
# for copying to a GPU machine that has none of the Debian libraries (see docs/cuda.md).
# The binaries link kvdepot_codec, kvdepot_cuda, static GTest and the static CUDA runtime only;
# this script checks with ldd that nothing else is needed at run time (libcuda.so.1 is dlopened by
# the static runtime when the program first touches CUDA).
#
# Usage: scripts/build-gpu.sh [extra cmake configure args...]
# Env:   JOBS (parallel build jobs, default 1), BUILD_DIR (default .gpu)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
build_dir="${BUILD_DIR:-.gpu}"
jobs="${JOBS:-1}"

cmake -S . -B "$build_dir" -DKVDEPOT_GPU_ONLY=ON -DKVDEPOT_CUDA=ON -DCMAKE_BUILD_TYPE=Release "$@"
start=$(date +%s)
cmake --build "$build_dir" -j "$jobs"   # GPU-only: codec, cuda, GPU tests and benchmarks
echo "build-gpu: built in $(( $(date +%s) - start )) s"

# Allowed run-time dependencies: the C/C++ runtime only.
allowed='^(linux-vdso|ld-linux-x86-64|libc|libm|libstdc\+\+|libgcc_s|libpthread|libdl|librt)\.so'
status=0
for bin in "$build_dir"/bin/kvdepot_*; do
  bin=$(basename "$bin")
  path="$build_dir/bin/$bin"
  echo "== ldd $path"
  ldd "$path"
  while read -r lib _; do
    lib="${lib##*/}"
    if [[ -n "$lib" && ! "$lib" =~ $allowed ]]; then
      echo "build-gpu: $bin needs unexpected shared library $lib" >&2
      status=1
    fi
  done < <(ldd "$path")
done
exit "$status"
