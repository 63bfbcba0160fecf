#!/usr/bin/env bash
# Loopback GET/PUT throughput of kvdepotd against Redis 7 and the loopback ceiling (iperf3), one
# run, same machine (docs/benchmarks.md). Starts its own kvdepotd, redis-server and iperf3 server
# on loopback ports and stops them at the end.
# Usage: scripts/bench-loopback.sh [BUILD_DIR] [SECONDS] [all|redis|sizes] [ROUNDS]
#   redis  PUT and GET of 1, 4 and 8 MiB values over 1, 8 and 32 connections, kvdepot then Redis,
#          over TCP and the Unix socket, after one iperf3 run.
#   sizes  value sizes 1 to 80 MiB, ROUNDS rounds (default 2), a fresh daemon per size and round:
#          PUT over 2 connections, native then lm://, with the daemon's minor page faults per GiB
#          PUT (after an untimed warm-up run); GET over 8 connections, each right after an iperf3
#          run, so that every GET figure has its own ceiling beside it.
#   all    (default) both.
set -euo pipefail
build=${1:-build}
secs=${2:-3}
mode=${3:-all}
rounds=${4:-2}
case "$mode" in all | redis | sizes) ;; *) echo "mode must be all, redis or sizes" >&2; exit 2 ;; esac
kvd_port=17601; redis_port=17602; iperf_port=17603; lm_port=17604
sock=$(mktemp -u /tmp/kvdepot-bench.XXXXXX.sock)
data=$(mktemp -d /tmp/kvdepot-bench.XXXXXX)
cleanup() {
  kill "${kvd_pid:-}" "${redis_pid:-}" "${iperf_pid:-}" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$data" "$sock"
}
trap cleanup EXIT

# 80 MiB values (a Llama-70B chunk) need a larger value limit than the default 64 MiB.
"$build/bin/kvdepotd" --listen 127.0.0.1:$kvd_port --unix "$sock" --host-capacity 4GiB \
  --limits-max-value-bytes 128MiB --lm-listen 127.0.0.1:$lm_port --lm-max-value-bytes 128MiB \
  --metrics-listen "" --io-threads 2 --data-dir "$data" --log-level warn &
kvd_pid=$!
redis-server --port $redis_port --save '' --appendonly no --protected-mode yes \
  --bind 127.0.0.1 --logfile /dev/null --proto-max-bulk-len 128mb &
redis_pid=$!
iperf3 -s -p $iperf_port >/dev/null 2>&1 &
iperf_pid=$!
sleep 1

kvdepot="$build/bin/kvdepot"
# The loopback ceiling: one iperf3 stream (the figure issue 19 and earlier runs compare with);
# with an argument N, also N parallel streams, as many as the GET runs' connections.
ceiling() {
  iperf3 -c 127.0.0.1 -p $iperf_port -l 1M -t "$secs" -f g | grep receiver |
    awk '{printf "iperf3 -l 1M, one stream: %s Gbit/s = %.2f GB/s\n", $7, $7 / 8}'
  if [ -n "${1:-}" ]; then
    iperf3 -c 127.0.0.1 -p $iperf_port -l 1M -P "$1" -t "$secs" -f g | grep "SUM.*receiver" |
      awk -v n="$1" '{printf "iperf3 -l 1M, %d streams: %s Gbit/s = %.2f GB/s\n", n, $6, $6 / 8}'
  fi
}

if [ "$mode" != sizes ]; then
  echo "== loopback ceiling, ${secs} s"
  ceiling
  for op in get put; do
    for size in 1MiB 4MiB 8MiB; do
      for conns in 1 8 32; do
        echo "== tcp $op $size x $conns connections"
        "$kvdepot" --addr 127.0.0.1:$kvd_port bench --op $op --value-size $size \
          --connections $conns --keys 64 --duration "$secs" --no-progress \
          --redis 127.0.0.1:$redis_port | tail -n 2
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
fi

if [ "$mode" != redis ]; then
  # Each size gets a daemon of its own, so that values of earlier sizes neither fill its tier
  # nor fragment its arena, and an untimed warm-up run, so that the arena's pages are faulted in
  # before the measured runs (first touch is a one-time cost: ~0.1 GB/s on the dev VM). About
  # 1 GiB of distinct values per size (at least 12 keys): larger than any cache, well within the
  # 4 GiB tier, so PUTs overwrite and GETs hit.
  kill $kvd_pid
  wait $kvd_pid 2>/dev/null || true
  keys_for() {
    local mib=${1%MiB}
    local k=$((1024 / mib))
    ((k > 64)) && k=64
    ((k < 12)) && k=12
    echo $k
  }
  for round in $(seq "$rounds"); do
    for size in 1MiB 8MiB 32MiB 33MiB 80MiB; do
      rm -rf "$data" && mkdir -p "$data"
      "$build/bin/kvdepotd" --listen 127.0.0.1:$kvd_port --host-capacity 4GiB \
        --limits-max-value-bytes 128MiB --lm-listen 127.0.0.1:$lm_port --lm-max-value-bytes 128MiB \
        --metrics-listen "" --io-threads 2 --data-dir "$data" --log-level warn &
      kvd_pid=$!
      sleep 1
      put=("$kvdepot" --addr 127.0.0.1:$kvd_port bench --op put --value-size $size --connections 2
        --keys "$(keys_for $size)" --duration "$secs" --no-progress --daemon-pid $kvd_pid
        --lm 127.0.0.1:$lm_port)
      "${put[@]}" >/dev/null
      echo "== round $round: put $size x 2 connections, native then lm:// (daemon faults per GiB PUT)"
      "${put[@]}" | tail -n +2
      if [ $size != 33MiB ]; then
        echo "== round $round: get $size x 8 connections, after its ceiling"
        ceiling 8
        redis=()
        [ $size = 1MiB ] && redis=(--redis 127.0.0.1:$redis_port)
        "$kvdepot" --addr 127.0.0.1:$kvd_port bench --op get --value-size $size --connections 8 \
          --keys "$(keys_for $size)" --duration "$secs" --no-progress "${redis[@]}" |
          tail -n +2
      fi
      kill $kvd_pid
      wait $kvd_pid 2>/dev/null || true
    done
  done
fi
