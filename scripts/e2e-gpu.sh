#!/usr/bin/env bash
# On the GPU machine: the end-to-end attention step after a prefix hit (issue 24 §4,
# docs/hack-gpu.md "End to end from kvdepotd"). Starts kvdepotd from the pack of
# scripts/pack-daemon.sh (kvdepot_e2e_bench included) with an 8 GiB GPU tier and a shared 8 GiB
# host arena, runs kvdepot_e2e_bench against it (HACK INT2: fetch + quantize new + prefill = time to
# first token, and decode; bf16 baseline: the raw chunks' fetch), stops the daemon (SIGTERM must
# exit 0), then times the baseline's attention with torch SDPA bf16 over the same shapes, CUDA-graph
# replay (bench/gpu/torch_sdpa.py --check: its output checked against fp32 math attention).
# Results: $OUT/e2e.json (kvdepot_e2e_bench) and $OUT/e2e-sdpa.json (torch, one row per layer call).
#
# Usage: scripts/e2e-gpu.sh [PACK_DIR (default .gl)] [kvdepot_e2e_bench flags...]
# Env:   OUT (default /tmp), SDPA (torch_sdpa.py; default bench/gpu/torch_sdpa.py),
#        PREFIXES (default 8192,32768), NEW (1024), Q_HEADS (32), LAYERS (32).
set -u
pack=${1:-.gl}
shift || true
out=${OUT:-/tmp}
sdpa=${SDPA:-bench/gpu/torch_sdpa.py}
prefixes=${PREFIXES:-8192,32768}
new=${NEW:-1024}
q_heads=${Q_HEADS:-32}
layers=${LAYERS:-32}
d=$(mktemp -d)
LD_LIBRARY_PATH=$PWD/$pack/lib "$pack/bin/kvdepotd" --listen 127.0.0.1:17801 --unix "$d/k.sock" \
  --metrics-listen "" --data-dir "$d" --gpu-capacity 8GiB --host-capacity 8GiB \
  --host-shared-memory true --limits-max-lease-bytes 8GiB --limits-max-value-bytes 128MiB \
  --log-level info \
  > "$out/e2e-daemon.log" 2>&1 &
pid=$!
for _ in $(seq 100); do [[ -S "$d/k.sock" ]] && break; sleep 0.1; done
LD_LIBRARY_PATH=$PWD/$pack/lib "$pack/bin/kvdepot_e2e_bench" --addr "unix:$d/k.sock" \
  --prefixes "$prefixes" --new "$new" --q-heads "$q_heads" --layers "$layers" "$@" |
  tee "$out/e2e.json"
bench_rc=${PIPESTATUS[0]}
echo "kvdepot_e2e_bench rc=$bench_rc"
kill -TERM "$pid"; wait "$pid"; echo "daemon rc=$?"
grep -i -E "error|warn" "$out/e2e-daemon.log" | cut -c1-250 | head -10
rm -rf "$d"

# The baseline's attention: per layer call, x layers in docs. Decode at the middle decode step.
chunked="" lengths=""
for p in ${prefixes//,/ }; do
  chunked+="${chunked:+,}$new:$p"
  lengths+="${lengths:+,}$((p + new + 32))"
done
python3 "$sdpa" --q-heads "$q_heads" --graph --check --reps 50 --only prefill \
  --prefill-lengths "" --chunked "$chunked" --json "$out/e2e-sdpa.json"
echo "torch_sdpa prefill rc=$?"
python3 "$sdpa" --q-heads "$q_heads" --graph --reps 50 --only decode --batches 1 \
  --lengths "$lengths" --json "$out/e2e-sdpa.json"
echo "torch_sdpa decode rc=$?"
exit "$bench_rc"
