#!/usr/bin/env bash
# redis-benchmark against kvdepotd's resp:// listener and against redis-server 7 in the same run
# (docs/benchmarks.md, docs/resp.md): SET and GET of 1 MiB values (50 clients, redis-benchmark's
# default) and of 8 MiB values (8 clients), and MGET of three 1 MiB values. The two servers
# alternate (kvdepot, Redis, kvdepot, Redis, ...) so that load from other processes falls on both;
# every run is printed, then the kvdepot/Redis ratio of each pair.
# Starts its own kvdepotd and redis-server on loopback ports and stops them at the end.
# Usage: scripts/bench-resp.sh [BUILD_DIR] [ROUNDS]
set -euo pipefail
build=${1:-build}
rounds=${2:-3}
kvd_port=17611; resp_port=17612; redis_port=17613
data=$(mktemp -d /tmp/kvdepot-bench-resp.XXXXXX)
cleanup() {
  kill "${kvd_pid:-}" "${redis_pid:-}" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$data"
}
trap cleanup EXIT

"$build/bin/kvdepotd" --listen 127.0.0.1:$kvd_port --resp-listen 127.0.0.1:$resp_port \
  --host-capacity 4GiB --metrics-listen "" --data-dir "$data" --log-level warn &
kvd_pid=$!
redis-server --port $redis_port --save '' --appendonly no --bind 127.0.0.1 \
  --logfile /dev/null &
redis_pid=$!
for port in $resp_port $redis_port; do
  for _ in $(seq 100); do
    redis-cli -p "$port" PING >/dev/null 2>&1 && break
    sleep 0.1
  done
  redis-cli -p "$port" PING >/dev/null
done

# name | redis-benchmark arguments | bytes moved per request (for MB/s)
workloads=(
  "set-get-1MiB|-t set,get -n 400 -d 1048576|1048576"
  "set-get-8MiB|-t set,get -n 80 -c 8 -d 8388608|8388608"
  "mget-3x1MiB|-n 200 -c 8 MGET key:__rand_int__ key:__rand_int__ key:__rand_int__|3145728"
)

results=$(mktemp)
for round in $(seq "$rounds"); do
  for w in "${workloads[@]}"; do
    IFS='|' read -r name args bytes <<<"$w"
    for target in kvdepot redis; do
      port=$resp_port
      [[ $target == redis ]] && port=$redis_port
      if [[ $name == mget-* ]]; then  # the MGET reads what SET wrote under key:__rand_int__
        redis-benchmark -p "$port" -q -t set -n 8 -c 1 -d 1048576 >/dev/null
      fi
      # shellcheck disable=SC2086  # $args is a list of words
      redis-benchmark -p "$port" -q $args 2>&1 | tr '\r' '\n' |
        grep -E 'requests per second' | sed -E 's/^ *//' |
        while IFS= read -r line; do
          test=${line%%: *}
          rps=$(sed -E 's/.*: ([0-9.]+) requests per second.*/\1/' <<<"$line")
          p50=$(sed -nE 's/.*p50=([0-9.]+) msec.*/\1/p' <<<"$line")
          mbs=$(awk -v r="$rps" -v b="$bytes" 'BEGIN { printf "%.0f", r * b / 1e6 }')
          printf '%s %s %s %s %s %s %s\n' "$round" "$name" "${test%% *}" "$target" "$rps" \
            "${p50:-?}" "$mbs" | tee -a "$results"
        done
    done
  done
done

echo
echo "== kvdepot / Redis requests per second, per round (A B pairs)"
awk '{ key = $1 " " $2 " " $3; rps[key, $4] = $5 }
     END { for (k in rps) { split(k, p, SUBSEP); if (p[2] == "kvdepot") print p[1],
           rps[p[1], "kvdepot"] / rps[p[1], "redis"] } }' "$results" | sort -k2,3 -k1,1n |
  awk '{ printf "round %s %-14s %-5s %.2f\n", $1, $2, $3, $4 }'
rm -f "$results"
