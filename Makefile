# kvdepot — top-level entry points. `make run` and `make test` are all a new user needs: both
# install missing Debian packages first (scripts/install-deps.sh), then build.
#
#   make run         build, then start kvdepotd in the foreground on config/kvdepot.yaml
#   make demo        build, then run the offline codec demo (synthesize, encode, decode, compare)
#   make cluster-demo  build, then start a local etcd and three kvdepotd cluster members (Ctrl-C stops)
#   make test        build and run every test (GPU tests skip, with a reason, without a GPU)
#   make build       configure and build into build/
#   make bench       build and run the CPU benchmarks and the eviction trace study
#   make hack-quality  the hack-int2 option study: bytes, K/V and attention error per option
#                    (docs/hack.md "Choosing hack-int2 options"; a few minutes on one core)
#   make bench-loopback  kvdepotd vs Redis vs iperf3 over loopback (docs/benchmarks.md)
#   make bench-lm    lm:// (LMCache's protocol) vs kvdepot's protocol, 8 and 32 MiB chunks, 1 and 8 clients
#   make bench-resp  redis-benchmark against kvdepotd's resp:// listener and redis-server, 1 and 8 MiB
#   make bench-cluster  1, 2, 3 daemons and a local etcd: GET throughput and CPU, forwarded GETs,
#                    LOOKUP across owners, time to detect a dead node (docs/benchmarks.md)
#   make soak        1,000 connections of mixed PUT/GET/LOOKUP for 150 s: errors, RSS, p50/p99/p999
#   make crash-loop  100 restarts of kvdepotd (half SIGKILL) on its SSD tier (ctest label crash-loop)
#   make test-asan   build with AddressSanitizer + UBSan into build-asan/ and run every test
#   make test-tsan   build with ThreadSanitizer into build-tsan/ and run the concurrency tests
#   make fuzz-smoke  build the libFuzzer targets with clang (build-fuzz/), run each for 3 s
#   make fuzz        longer campaigns: each target for FUZZ_SECONDS (180), corpus kept in build-fuzz/
#   make install     install what `make build` built: kvdepotd, kvdepot, the systemd unit and the
#                    default config (PREFIX); it never builds (no build: it says so and fails)
#   make gpu         build the GPU test/bench binaries into .gpu/ (for a GPU machine)
#   make format      clang-format every C++/CUDA source (clang-format-14, .clang-format)
#   make format-check  fail, listing the files, when a source is not formatted (CI runs it)
#
# Variables: BUILD_DIR (build), BUILD_TYPE (RelWithDebInfo), CUDA (AUTO|ON|OFF), JOBS (nproc),
# PREFIX (/usr/local, for make install), SOAK_CONNECTIONS (1000), SOAK_SECONDS (150).
# With CI=true warnings are errors.

BUILD_DIR ?= build
BUILD_TYPE ?= RelWithDebInfo
CUDA ?= AUTO
JOBS ?= $(shell nproc)
PREFIX ?= /usr/local
SOAK_CONNECTIONS ?= 1000
SOAK_SECONDS ?= 150
WERROR := $(if $(filter true 1,$(CI)),ON,OFF)
CMAKE_FLAGS = -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) -DKVDEPOT_CUDA=$(CUDA) -DKVDEPOT_WERROR=$(WERROR)

.PHONY: all deps configure build run demo cluster-demo test bench hack-quality bench-loopback bench-lm bench-resp bench-cluster soak \
	test-asan crash-loop test-tsan fuzz fuzz-smoke install gpu format format-check clean

all: build

deps:
	@bash scripts/install-deps.sh

configure: deps
	@cmake -S . -B $(BUILD_DIR) $(CMAKE_FLAGS) >/dev/null

build: configure
	@cmake --build $(BUILD_DIR) -j $(JOBS)

run: build
	@mkdir -p kvdepot-data
	@exec $(BUILD_DIR)/bin/kvdepotd --config config/kvdepot.yaml

demo: build
	@bash scripts/demo.sh $(BUILD_DIR)

cluster-demo: build
	@bash scripts/cluster-demo.sh $(BUILD_DIR)

# Tests labelled crash-loop are long; `make crash-loop` runs them.
test: build
	@ctest --test-dir $(BUILD_DIR) --output-on-failure -j $(JOBS) -LE crash-loop

bench: build
	@$(BUILD_DIR)/bin/kvdepot_bench --benchmark_counters_tabular=true
	@$(BUILD_DIR)/bin/kvdepot_eviction_trace

hack-quality: configure
	@cmake --build $(BUILD_DIR) -j $(JOBS) --target kvdepot_hack_quality
	@$(BUILD_DIR)/bin/kvdepot_hack_quality ../shared/data/tinystories656k-kv-768tok.npy

bench-loopback: build
	@bash scripts/bench-loopback.sh $(BUILD_DIR)

bench-lm: build
	@/usr/bin/python3 bench/lmcache/lm_bench.py --build $(BUILD_DIR)

bench-resp: build
	@bash scripts/bench-resp.sh $(BUILD_DIR)

bench-cluster: configure
	@cmake --build $(BUILD_DIR) -j $(JOBS) --target kvdepot_cluster_bench kvdepotd
	@$(BUILD_DIR)/bin/kvdepot_cluster_bench

soak: build
	@/usr/bin/python3 scripts/soak.py --build $(BUILD_DIR) --connections $(SOAK_CONNECTIONS) \
	  --duration $(SOAK_SECONDS)

crash-loop: build
	@ctest --test-dir $(BUILD_DIR) --output-on-failure -L crash-loop

test-asan: deps
	@cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DKVDEPOT_CUDA=OFF \
	  -DKVDEPOT_SANITIZE=address,undefined -DKVDEPOT_WERROR=$(WERROR) >/dev/null
	@cmake --build build-asan -j $(JOBS)
	@ctest --test-dir build-asan --output-on-failure -j $(JOBS) -LE crash-loop

# The daemon's concurrency tests under ThreadSanitizer (docs/fuzzing.md, "Sanitizers"). Only the
# daemon, lm://, KV-event, LMCache MP connector and fuzz-replay test binaries are built (the
# replay drives in-process servers with the fuzz corpora); scripts/tsan.supp may only silence
# third-party libraries that are not TSan-instrumented (today: libzmq).
TSAN_TESTS ?= HostTier|Server|Ssd|Store|Metrics|Reload|LmServer|Lmcache|FuzzReplay|KvEvent|ShutdownFlush
test-tsan: deps
	@cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKVDEPOT_CUDA=OFF \
	  -DKVDEPOT_SANITIZE=thread -DKVDEPOT_WERROR=$(WERROR) >/dev/null
	@cmake --build build-tsan -j $(JOBS) --target kvdepot_daemon_tests kvdepot_lmcache_tests \
	  kvdepot_fuzz_replay_tests kvdepot_events_tests kvdepot_lmcache_mp_tests
	@TSAN_OPTIONS="suppressions=$(CURDIR)/scripts/tsan.supp halt_on_error=1 second_deadlock_stack=1" \
	  ctest --test-dir build-tsan --output-on-failure -j $(JOBS) -R '$(TSAN_TESTS)' -E NOT_BUILT

fuzz-smoke: deps
	@JOBS=$(JOBS) FUZZ_SECONDS=$${FUZZ_SECONDS:-3} bash fuzz/run.sh smoke

fuzz: deps
	@JOBS=$(JOBS) bash fuzz/run.sh campaign

# Installs what `make build` built: no package install, configure or rebuild (it typically runs
# under sudo, after an unprivileged `make build`).
install:
	@if [ ! -f $(BUILD_DIR)/cmake_install.cmake ] || [ ! -x $(BUILD_DIR)/bin/kvdepotd ] || \
	    [ ! -x $(BUILD_DIR)/bin/kvdepot ]; then \
	  echo "make install: no build in $(BUILD_DIR)/ (bin/kvdepotd and bin/kvdepot): run 'make build' first (BUILD_DIR=$(BUILD_DIR)), then 'make install'" >&2; \
	  exit 1; \
	fi
	@cmake --install $(BUILD_DIR) --prefix $(PREFIX)

gpu: deps
	@bash scripts/build-gpu.sh

format: deps
	@git ls-files '*.cc' '*.h' '*.cu' '*.cuh' | xargs clang-format-14 -i

format-check: deps
	@git ls-files '*.cc' '*.h' '*.cu' '*.cuh' | xargs clang-format-14 --dry-run --Werror 2>/dev/null || \
	  { echo "make format-check: these files are not clang-formatted (run make format):" >&2; \
	    git ls-files '*.cc' '*.h' '*.cu' '*.cuh' | xargs clang-format-14 --dry-run 2>&1 | \
	      grep -o '^[^:]*:[0-9]*:[0-9]*: warning' | cut -d: -f1 | sort -u >&2; exit 1; }

clean:
	@rm -rf $(BUILD_DIR) build-asan build-tsan build-fuzz .gpu kvdepot-data
