#!/usr/bin/env bash
# `make demo`: the offline codec tools without a daemon — synthesize KV, encode it into a chunk
# container, inspect it, decode it and compare it with the input; then the same on the real KV in
# ../shared/data when present. Every step is a plain `kvdepot codec` command, printed before it runs.
set -euo pipefail
build_dir=${1:-build}
kvdepot="$build_dir/bin/kvdepot"
work=$(mktemp -d "${TMPDIR:-/tmp}/kvdepot-demo.XXXXXX")
trap 'rm -rf "$work"' EXIT

step() {
  echo "\$ kvdepot ${*}"
  "$kvdepot" "$@"
  echo
}

step codec synth "$work/synth.npy" --layers 2 --tokens 256 --heads 8 --dim 128 --seed 1
step codec encode --codec raw "$work/synth.npy" "$work/synth.kvd"
step codec inspect "$work/synth.kvd"
step codec decode "$work/synth.kvd" "$work/synth.out.npy"
step codec compare --expect-bit-exact "$work/synth.npy" "$work/synth.out.npy"

real="$(dirname "$0")/../../shared/data/tinystories656k-kv-768tok.npy"
if [[ -f "$real" ]]; then
  step codec encode --codec raw "$real" "$work/real.kvd"
  step codec compare --json --expect-bit-exact "$real" "$work/real.kvd"
fi
echo "demo: raw round trips are bit-exact."
