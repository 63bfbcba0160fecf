#!/usr/bin/env bash
# Loopback GET/PUT throughput of kvdepotd against Redis 7 and the loopback ceiling (iperf3), one
# run, same machine (docs/benchmarks.md). Starts its own kvdepotd, redis-server and iperf3 server
# on loopback ports and stops them at the end.
# Usage: scripts/bench-loopback.sh [BUILD_DIR] [SECONDS]
set -euo pipefail
build=${1:-build}
secs=${2:-3}
kvd_port=17601; redis_port=17602; iperf_port=17603
sock=$(mktemp -u /tmp/kvdepot-bench.XXXXXX.sock)
data=$(mktemp -d /tmp/kvdepot-bench.XXXXXX)
cleanup() {
  kill "${kvd_pid:-}" "${redis_pid:-}" "${iperf_pid:-}" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$data" "$sock"
}
trap cleanup EXIT

"$build/bin/kvdepotd" --listen 127.0.0.1:$kvd_port --unix "$sock" --host-capacity 4GiB \
  --metrics-listen "" \
  --io-threads 2 --data-dir "$data" --log-level warn &
kvd_pid=$!
redis-server --port $redis_port --save '' --appendonly no --protected-mode yes \
  --bind 127.0.0.1 --logfile /dev/null --proto-max-bulk-len 128mb &
redis_pid=$!
iperf3 -s -p $iperf_port -1 >/dev/null 2>&1 &
iperf_pid=$!
sleep 1

echo "== loopback ceiling: iperf3 -l 1M, one stream, ${secs} s"
iperf3 -c 127.0.0.1 -p $iperf_port -l 1M -t "$secs" -f g | grep -E "sender|receiver"

kvdepot="$build/bin/kvdepot"
for op in get put; do
  for size in 1MiB 4MiB 8MiB; do
    for conns in 1 8 32; do
      echo "== tcp $op $size x $conns connections"
      "$kvdepot" --addr 127.0.0.1:$kvd_port bench --op $op --value-size $size --connections $conns \
        --keys 64 --duration "$secs" --no-progress --redis 127.0.0.1:$redis_port | tail -n 2
    done
  done
done
for op in get put; do
  for size in 1MiB 4MiB 8MiB; do
    for conns in 1 8 32; do
      echo "== unix $op $size x $conns connections"
      "$kvdepot" --addr "unix:$sock" bench --op $op --value-size $size --connections $conns \
        --keys 64 --duration "$secs" --no-progress | tail -n 1
    done
  done
done
