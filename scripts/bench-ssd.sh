#!/usr/bin/env bash
# SSD-tier throughput against fio on the same file system, one run (docs/benchmarks.md):
# fio with io_uring, O_DIRECT, queue depth 8, block = chunk size, sequential write then read of
# TOTAL MiB; then kvdepot_ssd_bench writing and reading the same amount as chunks.
# Usage: scripts/bench-ssd.sh [BUILD_DIR] [DIR] [TOTAL_MIB]
set -euo pipefail
build=${1:-build}
dir=${2:-kvdepot-data/ssd-bench}
total=${3:-2048}
mkdir -p "$dir"
trap 'rm -rf "$dir"/fio.* "$dir"/kvdepot-ssd-bench' EXIT

fio_mbs() {  # rw bs_mib [iodepth] -> MB/s
  local out
  out=$(fio --name=fio --filename="$dir/fio.dat" --ioengine=io_uring --direct=1 \
    --bs="$2M" --iodepth="${3:-8}" --rw="$1" --size="${total}M" --output-format=terse \
    --terse-version=3 2>/dev/null)
  # terse v3: field 7 read KiB/s, field 48 write KiB/s
  awk -F';' -v rw="$1" '{ print int((rw == "read" ? $7 : $48) * 1024 / 1e6) }' <<<"$out"
}

printf '%-8s %-6s %10s %10s %8s %12s\n' chunk op fio_qd8 kvdepot ratio fio_qd32
for mib in 4 8; do
  fw=$(fio_mbs write "$mib"); fr=$(fio_mbs read "$mib")
  fw32=$(fio_mbs write "$mib" 32); fr32=$(fio_mbs read "$mib" 32); rm -f "$dir/fio.dat"
  res=$("$build/bin/kvdepot_ssd_bench" "$dir" --chunk-mib "$mib" --total-mib "$total" 2>/dev/null)
  kw=$(awk '/write/ {print int($2)}' <<<"$res")
  kr=$(awk '/  read/ {print int($2)}' <<<"$res")
  lat=$(grep latency <<<"$res" | sed 's/.*latency: //')
  printf '%-8s %-6s %10s %10s %8s %12s\n' "${mib}MiB" write "$fw" "$kw" \
    "$(awk -v a="$kw" -v b="$fw" 'BEGIN{printf "%.2f", a/b}')" "$fw32"
  printf '%-8s %-6s %10s %10s %8s %12s\n' "${mib}MiB" read "$fr" "$kr" \
    "$(awk -v a="$kr" -v b="$fr" 'BEGIN{printf "%.2f", a/b}')" "$fr32"
  echo "         SSD-hit GET latency (${mib} MiB): $lat"
done
