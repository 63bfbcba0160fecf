#!/usr/bin/env bash
# SSD-tier throughput against fio on the same file system (docs/benchmarks.md). For each chunk
# size, ROUNDS rounds of: fio sequential write, kvdepot_ssd_bench (write, then read back), fio
# sequential read — alternating, so that fio and kvdepot see the same load on a shared machine.
# fio: io_uring, O_DIRECT, queue depth 8, block = chunk size, TOTAL MiB into a fresh file (fio
# preallocates it, as the tier preallocates its segments). Every run is printed, then kvdepot's
# median over fio's median per chunk size and direction.
# Usage: scripts/bench-ssd.sh [BUILD_DIR] [DIR] [TOTAL_MIB] [ROUNDS]   (CHUNKS="4 8" by default)
set -euo pipefail
build=${1:-build}
dir=${2:-kvdepot-data/ssd-bench}
total=${3:-1024}
rounds=${4:-3}
chunks=${CHUNKS:-4 8}
mkdir -p "$dir"
trap 'rm -rf "$dir"/fio.dat "$dir"/kvdepot-ssd-bench' EXIT

fio_mbs() {  # rw bs_mib -> MB/s
  local out
  out=$(fio --name=fio --filename="$dir/fio.dat" --ioengine=io_uring --direct=1 \
    --bs="$2M" --iodepth=8 --rw="$1" --size="${total}M" --output-format=terse \
    --terse-version=3 2>/dev/null)
  # terse v3: field 7 read KiB/s, field 48 write KiB/s
  awk -F';' -v rw="$1" '{ print int((rw == "read" ? $7 : $48) * 1024 / 1e6) }' <<<"$out"
}

median() { tr ' ' '\n' | sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }

echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-5s %-6s %9s %9s %6s %9s %9s %6s  %s\n' round chunk fio_w kvd_w ratio fio_r kvd_r ratio \
  "SSD-hit GET p50/p99"
for mib in $chunks; do
  fws=() kws=() frs=() krs=()
  for round in $(seq 1 "$rounds"); do
    rm -f "$dir/fio.dat"
    fw=$(fio_mbs write "$mib")
    res=$("$build/bin/kvdepot_ssd_bench" "$dir" --chunk-mib "$mib" --total-mib "$total" 2>/dev/null)
    kw=$(awk '/  write/ {print int($2)}' <<<"$res")
    kr=$(awk '/  read/ {print int($2)}' <<<"$res")
    lat=$(grep latency <<<"$res" | sed 's/.*latency: //; s/ (.*//')
    fr=$(fio_mbs read "$mib")  # the file fio wrote above
    fws+=("$fw") kws+=("$kw") frs+=("$fr") krs+=("$kr")
    printf '%-5s %-6s %9s %9s %6s %9s %9s %6s  %s\n' "$round" "${mib}MiB" "$fw" "$kw" \
      "$(ratio "$kw" "$fw")" "$fr" "$kr" "$(ratio "$kr" "$fr")" "$lat"
  done
  fwm=$(echo "${fws[*]}" | median) kwm=$(echo "${kws[*]}" | median)
  frm=$(echo "${frs[*]}" | median) krm=$(echo "${krs[*]}" | median)
  printf 'median %-5s %9s %9s %6s %9s %9s %6s\n' "${mib}MiB" "$fwm" "$kwm" "$(ratio "$kwm" "$fwm")" \
    "$frm" "$krm" "$(ratio "$krm" "$frm")"
done
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
