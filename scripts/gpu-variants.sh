#!/usr/bin/env bash
# Kernel variants side by side on the GPU machine, in one device call (docs/benchmarks.md: the same
# binary reads up to 7% apart between calls, ±1% within one, so variants are compared only within
# a call, alternating, against main in the same call).
#
#   scripts/gpu-variants.sh build PATCH...   (here) for each patch (a `git diff` against HEAD, e.g.
#       bench/gpu/variants/*.patch): a detached worktree at HEAD with the patch applied, built by
#       scripts/build-gpu.sh; its kvdepot_hack_bench and kvdepot_gpu_tests go to .gpu-NAME/bin
#       (NAME: the patch's file name without .patch), and this checkout's own (its .gpu build,
#       brought up to date first) to .gpu-main/bin, stripped. Git ignores .gpu-*; carry the bin
#       folders (13 MB each; a call carries 64 MiB in 8 paths, the working tree's ~6 MB included).
#   scripts/gpu-variants.sh run [--tests] DIR...   (on the GPU machine) two rounds, each running
#       every DIR's decode rows (`kvdepot_hack_bench --only decode`, fp16 path, bf16 q / out, graph
#       replay) in turn, the second round in reverse order; prints "DIR batch tokens µs" per row
#       (the benchmark checks each row's outputs against the CPU reference up to 32K tokens and
#       prints no row that fails).
#       --tests first runs each DIR's decode GPU tests (gtest filter *Decode*), stopping at a
#       failure.
#   scripts/gpu-variants.sh table FILE [BASE_DIR]   (either machine) run's output saved in FILE as a
#       Markdown table, each folder's runs and its mean's change against BASE_DIR's (default: the
#       first folder) per shape (scripts/gpu-variants-table.py).
# Env: LENGTHS (default 4096,4159,32768,32831,131072,131135), BATCHES (default 1,16), JOBS (build).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
caller="$PWD"
cd "$root"
lengths=${LENGTHS:-4096,4159,32768,32831,131072,131135}
batches=${BATCHES:-1,16}
binaries=(kvdepot_hack_bench kvdepot_gpu_tests)

copy_bins() {  # from_dir to_dir; stripped (~0.7 MB less each: a call carries 64 MiB, the tree too)
  mkdir -p "$2"
  for b in "${binaries[@]}"; do cp "$1/$b" "$2/$b" && strip "$2/$b"; done
}

build() {
  [ $# -gt 0 ] || { echo "gpu-variants: build needs at least one patch" >&2; exit 2; }
  for patch in "$@"; do
    [ -f "$patch" ] || { echo "gpu-variants: no patch $patch" >&2; exit 2; }
    git apply --check "$patch" ||
      { echo "gpu-variants: $patch does not apply to HEAD" >&2; exit 2; }
  done
  mkdir -p .gpu-main
  JOBS=${JOBS:-2} scripts/build-gpu.sh >.gpu-main/build.log 2>&1 ||
    { echo "gpu-variants: this checkout failed to build (.gpu-main/build.log)" >&2; exit 1; }
  copy_bins .gpu/bin .gpu-main/bin
  for patch in "$@"; do
    local name tree
    name=$(basename "$patch" .patch)
    tree="$root/.gpu-$name/src"
    rm -rf "$tree"
    git worktree prune
    git worktree add --detach "$tree" HEAD >/dev/null
    git -C "$tree" apply "$(realpath "$patch")"
    (cd "$tree" && JOBS=${JOBS:-2} scripts/build-gpu.sh >"$root/.gpu-$name/build.log" 2>&1) ||
      { echo "gpu-variants: $name failed to build (.gpu-$name/build.log)" >&2; exit 1; }
    copy_bins "$tree/.gpu/bin" ".gpu-$name/bin"
    git worktree remove --force "$tree"
    echo "gpu-variants: .gpu-$name/bin"
  done
}

rows() {  # dir; a row is: op, the 3-word shape, batch, tokens, median µs, ...
  { "$1/kvdepot_hack_bench" --only decode --decode-math fp16 --decode-io bf16 \
      --decode-rows graph --lengths "$lengths" --batches "$batches" ||
      echo "FAILED (a row failed or the benchmark stopped; its message is above)"; } |
    awk -v d="$1" '/^decode-graph/ {print d, $5, $6, $7} /^FAILED/ {print d, $0}'
}

run() {
  local tests=0
  if [ "${1:-}" = --tests ]; then tests=1; shift; fi
  [ $# -gt 0 ] || { echo "gpu-variants: run needs at least one bin folder" >&2; exit 2; }
  for d in "$@"; do
    [ -x "$d/kvdepot_hack_bench" ] ||
      { echo "gpu-variants: $d/kvdepot_hack_bench is missing" >&2; exit 2; }
  done
  if [ "$tests" = 1 ]; then
    for d in "$@"; do
      "$d/kvdepot_gpu_tests" --gtest_filter='*Decode*' --gtest_brief=1 ||
        { echo "gpu-variants: $d failed its decode tests" >&2; exit 1; }
    done
  fi
  local dirs=("$@")
  for d in "${dirs[@]}"; do rows "$d"; done
  for ((i = ${#dirs[@]} - 1; i >= 0; i--)); do rows "${dirs[i]}"; done
}

case "${1:-}" in
  build) shift; build "$@" ;;
  run) shift; run "$@" ;;
  table) shift; cd "$caller"; exec python3 "$root/scripts/gpu-variants-table.py" "$@" ;;
  *) sed -n '2,22p' "$0" >&2; exit 2 ;;
esac
