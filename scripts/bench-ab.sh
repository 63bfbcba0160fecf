#!/usr/bin/env bash
# Before/after: two builds of kvdepot side by side, runs alternating (A B, then B A, ...), so that
# load on a shared machine falls on both alike (docs/benchmarks.md). Each side runs its own
# kvdepotd and its own `kvdepot bench` client; both daemons are up for the whole run.
# Usage: scripts/bench-ab.sh A_BIN_DIR B_BIN_DIR [ROUNDS] [SECONDS] [all|put|get|codec]
#   all    (default) PUT/GET of 1 MiB over 8 connections, PUT of 32 MiB over 2 and GET of
#          32 MiB over 8 (a Llama-8B chunk), then the CPU codec benchmarks (kvdepot_bench)
#   put, get  only those loopback workloads;  codec  only the codec benchmarks
# Prints one line per run: "SIDE OP SIZE xCONNS GB/s p50_us p99_us", then the codec lines
# "SIDE BENCHMARK real_time cpu_time unit".
set -euo pipefail
A=${1:?A_BIN_DIR}; B=${2:?B_BIN_DIR}
rounds=${3:-3}; secs=${4:-3}; mode=${5:-all}
case "$mode" in all | put | get | codec) ;; *) echo "mode must be all, put, get or codec" >&2; exit 2 ;; esac
for d in "$A" "$B"; do
  for bin in kvdepotd kvdepot kvdepot_bench; do
    [ -x "$d/$bin" ] || { echo "bench-ab: $d/$bin is missing (build it first)" >&2; exit 2; }
  done
done
port_a=17711; port_b=17712
data_a=$(mktemp -d /tmp/kvdepot-ab-a.XXXXXX); data_b=$(mktemp -d /tmp/kvdepot-ab-b.XXXXXX)
cleanup() {
  kill "${pid_a:-}" "${pid_b:-}" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$data_a" "$data_b"
}
trap cleanup EXIT

alternate() {  # calls "$@" A then B on odd rounds, B then A on even ones
  local round=$1; shift
  if (( round % 2 )); then "$@" A; "$@" B; else "$@" B; "$@" A; fi
}

loopback() {  # op size keys conns side
  local bin port
  if [ "$5" = A ]; then bin=$A; port=$port_a; else bin=$B; port=$port_b; fi
  "$bin/kvdepot" --addr 127.0.0.1:$port bench --op "$1" --value-size "$2" --keys "$3" \
    --connections "$4" --duration "$secs" --no-progress --json 2>/dev/null | grep '^\[' |
    /usr/bin/python3 -c 'import json, sys
d = json.loads(sys.stdin.read())[0]
print(sys.argv[1], sys.argv[2], sys.argv[3], "x" + sys.argv[4], round(d["gb_per_s"], 3),
      round(d["p50_us"]), round(d["p99_us"]), d.get("error", ""))' "$5" "$1" "$2" "$4"
}

if [ "$mode" != codec ]; then
  for side in A B; do
    bin=$([ $side = A ] && echo "$A" || echo "$B")
    port=$([ $side = A ] && echo $port_a || echo $port_b)
    data=$([ $side = A ] && echo "$data_a" || echo "$data_b")
    "$bin/kvdepotd" --listen 127.0.0.1:$port --host-capacity 3GiB \
      --limits-max-value-bytes 128MiB --metrics-listen "" --io-threads 2 --data-dir "$data" \
      --log-level warn &
    if [ $side = A ]; then pid_a=$!; else pid_b=$!; fi
  done
  sleep 1
  specs=()
  [[ $mode == all || $mode == put ]] && specs+=("put 1MiB 64 8")
  [[ $mode == all || $mode == get ]] && specs+=("get 1MiB 64 8")
  [[ $mode == all || $mode == put ]] && specs+=("put 32MiB 16 2")
  [[ $mode == all || $mode == get ]] && specs+=("get 32MiB 16 8")
  for round in $(seq 1 "$rounds"); do
    for spec in "${specs[@]}"; do
      # shellcheck disable=SC2086
      alternate "$round" loopback $spec
    done
  done
  cleanup
  pid_a=""; pid_b=""
fi

codec() {  # side
  local bin
  bin=$([ "$1" = A ] && echo "$A" || echo "$B")
  "$bin/kvdepot_bench" \
    --benchmark_filter='BM_(RawEncode|RawDecode|ParseVerifyView|ConvertFp16ToFp32|CacheGen)' \
    --benchmark_format=csv 2>/dev/null | grep '^"BM' | tr -d '"' |
    awk -F, -v s="$1" '{print s, $1, $3, $4, $5}'
}
if [[ $mode == all || $mode == codec ]]; then
  for round in $(seq 1 "$rounds"); do alternate "$round" codec; done
fi
