#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (build-fuzz/, AddressSanitizer + UBSan + coverage) and
# runs them one after another (docs/fuzzing.md).
#
#   fuzz/run.sh smoke              every target for FUZZ_SECONDS (3) from the checked-in seeds
#   fuzz/run.sh campaign [TARGET]  every target (or one) for FUZZ_SECONDS (180), growing the
#                                  corpus kept in build-fuzz/corpus/<target>/
#   fuzz/run.sh build              only build
#
# A crash leaves its input in build-fuzz/artifacts/<target>/ and makes the script exit 1: fix the
# code, then keep the input as fuzz/regressions/<target>/<name> (replayed by ctest).
# Variables: FUZZ_SECONDS, JOBS (build parallelism, 2), CLANG (clang++-14).
set -euo pipefail
cd "$(dirname "$0")/.."

mode=${1:-smoke}
only=${2:-}
JOBS=${JOBS:-2}
CXX_CLANG=${CLANG:-clang++-14}
CC_CLANG=${CXX_CLANG/clang++/clang}
targets=(container codecs protocol server lm_header lm_server ssd_record config resp_codec
  resp_server)

if ! command -v "$CXX_CLANG" >/dev/null; then
  echo "fuzz: $CXX_CLANG not found (scripts/install-deps.sh installs clang-14)" >&2
  exit 2
fi

cmake -S . -B build-fuzz -DCMAKE_C_COMPILER="$CC_CLANG" -DCMAKE_CXX_COMPILER="$CXX_CLANG" \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g" \
  -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g" -DKVDEPOT_CUDA=OFF -DKVDEPOT_FUZZ=ON \
  -DKVDEPOT_SANITIZE=address,undefined >/dev/null
cmake --build build-fuzz --target fuzz_all -j "$JOBS"
[[ "$mode" == build ]] && exit 0

case "$mode" in
  smoke) seconds=${FUZZ_SECONDS:-3} ;;
  campaign) seconds=${FUZZ_SECONDS:-180} ;;
  *) echo "usage: fuzz/run.sh smoke|campaign [TARGET]|build" >&2; exit 2 ;;
esac

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
failed=()
for t in "${targets[@]}"; do
  [[ -n "$only" && "$t" != "$only" ]] && continue
  if [[ "$mode" == smoke ]]; then
    corpus=$(mktemp -d)  # the checked-in seeds stay untouched
  else
    corpus=build-fuzz/corpus/$t
    mkdir -p "$corpus"
  fi
  mkdir -p "build-fuzz/artifacts/$t"
  log=build-fuzz/fuzz-$t.log
  echo "fuzz: $t for ${seconds}s" >&2
  if ! build-fuzz/bin/fuzz_"$t" -max_total_time="$seconds" -timeout=20 -rss_limit_mb=3072 \
      -max_len=65536 -print_final_stats=1 -artifact_prefix="build-fuzz/artifacts/$t/" \
      "$corpus" "fuzz/corpus/$t" >"$log" 2>&1; then
    failed+=("$t")
    tail -40 "$log" >&2
  fi
  # The last status line: "#runs ... cov: N ft: N corp: N/size exec/s: N".
  grep -E '^#[0-9]+' "$log" | tail -1 | sed "s/^/fuzz: $t: /" >&2 || true
  [[ "$mode" == smoke ]] && rm -rf "$corpus"
done
if [[ ${#failed[@]} -gt 0 ]]; then
  echo "fuzz: FAILED: ${failed[*]} (inputs in build-fuzz/artifacts/)" >&2
  exit 1
fi
