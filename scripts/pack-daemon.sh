#!/usr/bin/env bash
# Packs kvdepotd, kvdepot and (CUDA builds, when built) kvdepot_gpu_fetch and kvdepot_e2e_bench
# with the shared libraries ldd lists (minus the C/C++ runtime) into .gl/ (git-ignored, stripped:
# ~20 MB), for a machine without the Debian libraries — the GPU machine. Run there:
# bash scripts/gpu-daemon-check.sh or scripts/e2e-gpu.sh (see docs/cuda.md).
# Usage: scripts/pack-daemon.sh [BUILD_DIR]
set -euo pipefail
build=${1:-build}
rm -rf .gl && mkdir -p .gl/lib .gl/bin
cp "$build/bin/kvdepotd" "$build/bin/kvdepot" .gl/bin/
[[ -x "$build/bin/kvdepot_gpu_fetch" ]] && cp "$build/bin/kvdepot_gpu_fetch" .gl/bin/
[[ -x "$build/bin/kvdepot_e2e_bench" ]] && cp "$build/bin/kvdepot_e2e_bench" .gl/bin/
strip .gl/bin/*
for lib in $(ldd .gl/bin/* | awk '/=>/ {print $3}' | sort -u |
             grep -v -E 'lib(c|m|stdc\+\+|gcc_s|pthread|dl|rt)\.so|ld-linux'); do
  cp -L "$lib" .gl/lib/
done
du -sh .gl
