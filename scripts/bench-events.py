#!/usr/bin/env python3
"""PUT throughput of kvdepotd with KV events off and on (docs/events.md, docs/benchmarks.md).

Starts two daemons on loopback, one without and one with `--events-publish` (a ZeroMQ subscriber
drains the second one's events, decoding nothing), then alternates `kvdepot bench --op put
--chunk-keys` runs between them so that load from other processes falls on both, in the order
off, on, on, off, off, on, ... (a pair's second run is not always the same daemon). Prints every
run and the on/off ratio of each pair.

Usage: scripts/bench-events.py [BUILD_DIR] [ROUNDS] [SECONDS] [--control]
--control: both daemons without events (an A/A run: how far the ratio strays on its own).
"""
import json
import re
import subprocess
import sys
import tempfile
import threading

import zmq

build = sys.argv[1] if len(sys.argv) > 1 else "build"
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
seconds = sys.argv[3] if len(sys.argv) > 3 else "3"
control = "--control" in sys.argv[4:]
WORKLOADS = [("4KiB", "2", "4096"), ("1MiB", "2", "64")]  # value size, connections, keys


def start(data, *flags):
    proc = subprocess.Popen(
        [f"{build}/bin/kvdepotd", "--listen", "127.0.0.1:0", "--metrics-listen", "",
         "--data-dir", data, "--host-capacity", "2GiB", *flags],
        stderr=subprocess.PIPE, text=True)
    port = endpoint = None
    while port is None:
        line = proc.stderr.readline()
        if not line:
            sys.exit("kvdepotd exited early")
        if m := re.search(r'kv events on ([^\s"]+)', line):
            endpoint = m.group(1)
        if m := re.search(r"listening on 127\.0\.0\.1:(\d+)", line):
            port = int(m.group(1))
    threading.Thread(target=proc.stderr.read, daemon=True).start()  # keep the pipe drained
    return proc, port, endpoint


def drain(endpoint, counter):
    sub = zmq.Context.instance().socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    sub.connect(endpoint)
    while True:
        sub.recv_multipart()
        counter[0] += 1


def bench(port, size, conns, keys):
    out = subprocess.run(
        [f"{build}/bin/kvdepot", "--addr", f"127.0.0.1:{port}", "bench", "--op", "put",
         "--value-size", size, "--connections", conns, "--keys", keys, "--duration", seconds,
         "--chunk-keys", "--json", "--no-progress"],
        capture_output=True, text=True, check=True).stdout
    return json.loads(out)[0]["ops_per_s"]


with tempfile.TemporaryDirectory() as d1, tempfile.TemporaryDirectory() as d2:
    off, off_port, _ = start(d1)
    on, on_port, endpoint = start(d2, *([] if control else ["--events-publish", "tcp://127.0.0.1:*"]))
    messages = [0]
    if not control:
        threading.Thread(target=drain, args=(endpoint, messages), daemon=True).start()
    try:
        for size, conns, keys in WORKLOADS:
            ratios = []
            print(f"PUT {size}, {conns} connections, {keys} chunk keys, {seconds} s per run")
            for r in range(rounds):
                if r % 2 == 0:
                    a = bench(off_port, size, conns, keys)
                    b = bench(on_port, size, conns, keys)
                else:
                    b = bench(on_port, size, conns, keys)
                    a = bench(off_port, size, conns, keys)
                ratios.append(b / a)
                print(f"  round {r + 1}: events off {a:10.0f} ops/s   events on {b:10.0f} ops/s"
                      f"   on/off {b / a:.3f}")
            print(f"  on/off ratios: {' '.join(f'{x:.3f}' for x in ratios)}")
        print(f"subscriber received {messages[0]} event batches")
    finally:
        for p in (off, on):
            p.terminate()
            p.wait(timeout=20)
