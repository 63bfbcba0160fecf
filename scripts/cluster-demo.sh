#!/usr/bin/env bash
# `make cluster-demo`: a local etcd and three kvdepotd cluster members on loopback, each with its
# own temporary data directory (docs/cluster.md). Prints how to use them, then waits; Ctrl-C (or
# SIGTERM) stops the daemons (each leaves the cluster: its lease is revoked), then etcd, and
# removes the temporary directory.
set -euo pipefail
build_dir=${1:-build}
kvdepotd="$build_dir/bin/kvdepotd"
etcd_bin=${ETCD:-/usr/bin/etcd}
for f in "$kvdepotd" "$etcd_bin"; do
  [[ -x "$f" ]] || { echo "cluster-demo: $f not found (make build; scripts/install-deps.sh installs etcd-server)" >&2; exit 1; }
done

work=$(mktemp -d "${TMPDIR:-/tmp}/kvdepot-cluster-demo.XXXXXX")
pids=()
etcd_pid=""
stop_all() {
  trap - INT TERM EXIT
  echo
  echo "cluster-demo: stopping the daemons (graceful leave), then etcd"
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  if [[ -n "$etcd_pid" ]]; then
    kill -TERM "$etcd_pid" 2>/dev/null || true
    wait "$etcd_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
  echo "cluster-demo: stopped; removed $work"
}
trap stop_all INT TERM EXIT

# Ports: the defaults shifted so that a `make run` daemon (7600/9600) can run alongside.
etcd_port=${ETCD_PORT:-23790}
etcd_url="http://127.0.0.1:$etcd_port"
"$etcd_bin" --name demo --data-dir "$work/etcd" \
  --listen-client-urls "$etcd_url" --advertise-client-urls "$etcd_url" \
  --listen-peer-urls "http://127.0.0.1:$((etcd_port + 1))" \
  --initial-advertise-peer-urls "http://127.0.0.1:$((etcd_port + 1))" \
  --initial-cluster "demo=http://127.0.0.1:$((etcd_port + 1))" \
  --log-level warn --logger zap >"$work/etcd.log" 2>&1 &
etcd_pid=$!
for _ in $(seq 100); do
  curl -sf -X POST "$etcd_url/v3/kv/range" -d '{"key":"AA=="}' >/dev/null 2>&1 && break
  kill -0 "$etcd_pid" 2>/dev/null || { echo "cluster-demo: etcd failed; see $work/etcd.log" >&2; cat "$work/etcd.log" >&2; exit 1; }
  sleep 0.1
done

for i in 1 2 3; do
  port=$((7610 + i))
  mkdir -p "$work/node$i"
  "$kvdepotd" --listen "127.0.0.1:$port" --unix "" --metrics-listen "127.0.0.1:$((9610 + i))" \
    --data-dir "$work/node$i" --host-capacity 256MiB \
    --cluster-etcd "$etcd_url" --cluster-name demo --cluster-advertise "127.0.0.1:$port" \
    >"$work/node$i.log" 2>&1 &
  pids+=($!)
done
for i in 1 2 3; do
  for _ in $(seq 100); do
    curl -sf "http://127.0.0.1:$((9610 + i))/healthz" >/dev/null 2>&1 && break
    kill -0 "${pids[$((i - 1))]}" 2>/dev/null || { echo "cluster-demo: node$i failed:" >&2; cat "$work/node$i.log" >&2; exit 1; }
    sleep 0.1
  done
done

cat <<MSG

kvdepot cluster demo: etcd at $etcd_url, cluster "demo", three members:
  node1  native 127.0.0.1:7611  metrics http://127.0.0.1:9611  log $work/node1.log
  node2  native 127.0.0.1:7612  metrics http://127.0.0.1:9612  log $work/node2.log
  node3  native 127.0.0.1:7613  metrics http://127.0.0.1:9613  log $work/node3.log

Try:
  curl -s http://127.0.0.1:9611/healthz                     # "ok" and the cluster's state
  curl -s http://127.0.0.1:9611/metrics | grep kvdepot_cluster_
  ETCDCTL_API=3 etcdctl --endpoints $etcd_url get --prefix /kvdepot/demo/members/
  $build_dir/bin/kvdepot --addr 127.0.0.1:7612 ping
  kill -STOP ${pids[2]}; sleep 8; kill -CONT ${pids[2]}         # node3 loses its lease, fences, rejoins

Ctrl-C stops everything.
MSG
wait "${pids[@]}"
