#!/usr/bin/env bash
# Runs on the GPU machine, over binaries built here by `make gpu` (carried as .gpu/bin):
# the gpu-labelled tests, then the GPU benchmarks (dtype conversion, CacheGen encode/decode).
# Logs and JSON go to $OUT (or ./gpu-out).
# Usage (GPU machine): bash scripts/gpu-check.sh
set -uo pipefail
out="${OUT:-gpu-out}"
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem \
  --format=csv 2>&1 | tee "$out/gpu.txt"
.gpu/bin/kvdepot_gpu_tests --gtest_brief=1 2>&1 | tee "$out/gpu_tests.log" | tail -30
tests_rc=${PIPESTATUS[0]}
.gpu/bin/kvdepot_gpu_bench --json "$out/gpu_bench.jsonl" 2>&1 | tee "$out/gpu_bench.log"
bench_rc=${PIPESTATUS[0]}
.gpu/bin/kvdepot_cachegen_bench --json "$out/cachegen_bench.jsonl" 2>&1 | tee "$out/cachegen_bench.log"
cachegen_rc=${PIPESTATUS[0]}
echo "gpu-check: tests rc=$tests_rc bench rc=$bench_rc cachegen bench rc=$cachegen_rc"
exit $(( tests_rc != 0 || bench_rc != 0 || cachegen_rc != 0 ))
