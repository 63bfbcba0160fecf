#!/usr/bin/env bash
# Runs on the GPU machine, over binaries built here by `make gpu` (carried as .gpu/bin):
# the gpu-labelled tests, the GPU benchmarks (conversion, CacheGen, HACK), and the
# torch SDPA baseline for the HACK kernels (bench/gpu/torch_sdpa.py; skipped when torch cannot be
# imported). Logs and JSON go to $OUT (or ./gpu-out).
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
.gpu/bin/kvdepot_hack_bench --json "$out/hack_bench.jsonl" 2>&1 | tee "$out/hack_bench.log"
hack_rc=${PIPESTATUS[0]}
torch_script="bench/gpu/torch_sdpa.py"
torch_rc=0
if python3 -c "import torch" >/dev/null 2>&1; then
  rm -f "$out/torch_sdpa.jsonl"
  python3 "$torch_script" --graph --json "$out/torch_sdpa.jsonl" 2>&1 | tee "$out/torch_sdpa.log"
  torch_rc=${PIPESTATUS[0]}
  if [[ $torch_rc -eq 3 ]]; then torch_rc=0; fi  # no CUDA device for torch: skipped
else
  echo "gpu-check: python3 cannot import torch; skipping $torch_script" | tee "$out/torch_sdpa.log"
fi
echo "gpu-check: tests rc=$tests_rc bench rc=$bench_rc cachegen rc=$cachegen_rc hack rc=$hack_rc" \
  "torch rc=$torch_rc"
exit $(( tests_rc != 0 || bench_rc != 0 || cachegen_rc != 0 || hack_rc != 0 || torch_rc != 0 ))
