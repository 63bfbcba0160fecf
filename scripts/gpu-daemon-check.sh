#!/usr/bin/env bash
# On the GPU machine, over .gl/ from scripts/pack-daemon.sh: starts kvdepotd with a 4 GiB GPU
# tier and a shared host arena, PUTs 8 values of 4 MB, GETs them three times (byte-exact; the
# second host hit promotes to the GPU), then checks LOOKUP and STATS report the GPU tier; then, when packed, runs
# kvdepot_gpu_fetch (same-host GPU fetch through leases + CUDA IPC, byte-exact, timed: its table
# goes to stdout); SIGTERM must exit 0. Extra arguments go to kvdepot_gpu_fetch.
set -u
export LD_LIBRARY_PATH=$PWD/.gl/lib
out=${OUT:-/tmp}
d=$(mktemp -d)
.gl/bin/kvdepotd --listen 127.0.0.1:17800 --unix "$d/k.sock" --metrics-listen "" --data-dir "$d" \
  --gpu-capacity 4GiB --host-capacity 4GiB --host-shared-memory true \
  --limits-max-lease-bytes 2GiB --log-level info > "$out/daemon.log" 2>&1 &
pid=$!
sleep 2
head -c 4000000 /dev/urandom > "$d/v.bin"
K=(.gl/bin/kvdepot --addr "unix:$d/k.sock")
"${K[@]}" ping
for i in 1 2 3 4 5 6 7 8; do "${K[@]}" put "key$i" "$d/v.bin" > /dev/null; done
for r in 1 2 3; do
  for i in 1 2 3 4 5 6 7 8; do
    "${K[@]}" get "key$i" -o "$d/o.bin" > /dev/null && cmp -s "$d/v.bin" "$d/o.bin" ||
      echo "MISMATCH key$i round $r"
  done
  sleep 0.5
done
"${K[@]}" lookup key1 key2 key3 2>&1 | head -5
"${K[@]}" stats | grep -E "gpu|host.(chunks|hits)"
if [[ -x .gl/bin/kvdepot_gpu_fetch ]]; then
  .gl/bin/kvdepot_gpu_fetch --addr "unix:$d/k.sock" "$@"; echo "gpu_fetch rc=$?"
fi
kill -TERM "$pid"; wait "$pid"; echo "daemon rc=$?"
grep -i -E "gpu|error|warn" "$out/daemon.log" | cut -c1-250 | head -20
