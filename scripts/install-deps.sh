#!/usr/bin/env bash
# Installs every Debian 12 package that kvdepot's build, tests and benchmarks need.
# Idempotent: installs only what is missing, and does nothing (no apt-get update) when all is present.
# Usage: scripts/install-deps.sh [--check]   (--check: list what is missing, exit 1 if anything is)
set -euo pipefail

packages=(
  build-essential cmake pkg-config git
  libboost-dev libboost-system-dev
  librocksdb-dev liburing-dev libyaml-cpp-dev prometheus-cpp-dev libcivetweb-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libxxhash-dev libsystemd-dev
  # TLS (Boost.Asio SSL over OpenSSL); the openssl CLI makes the tests' self-signed certificates.
  libssl-dev openssl
  # JSON (the LMCache connector's configuration document): header-only nlohmann-json.
  nlohmann-json3-dev
  python3 python3-numpy python3-pytest python3-xxhash
  python3-dev pybind11-dev python3-pybind11 python3-setuptools
  redis-server iperf3 fio
  # The resp:// listener's tests: redis-cli, redis-benchmark (redis-tools) and python3-redis.
  redis-tools python3-redis
  # KV events (docs/events.md): libzmq and msgpack-cxx; the subscriber test's python3-zmq and
  # python3-msgpack.
  libzmq3-dev libmsgpack-cxx-dev python3-zmq python3-msgpack
  # The cluster (docs/cluster.md): etcd for the tests and `make cluster-demo`, etcdctl to look.
  etcd-server etcd-client
  # Operability tests: a real Prometheus scraping kvdepotd (run directly with a temporary config;
  # the package's own service is not used), systemd-analyze verify of the unit.
  prometheus systemd
  # Fuzzing (make fuzz-smoke, make fuzz): clang with libFuzzer and the sanitizer runtimes.
  clang-14 libclang-rt-14-dev
  # make format / make format-check (CI): one clang-format version for everyone.
  clang-format-14
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [[ ${#missing[@]} -eq 0 ]]; then
  exit 0
fi
if [[ "${1:-}" == "--check" ]]; then
  echo "missing packages: ${missing[*]}"
  exit 1
fi

echo "install-deps: installing ${missing[*]}" >&2
sudo_cmd=()
if [[ $(id -u) -ne 0 ]]; then
  sudo_cmd=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
