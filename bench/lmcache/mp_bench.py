#!/usr/bin/env python3
"""kvdepot.lmcache_mp.KvdepotL2Connector (LMCache MP mode's native_plugin L2 connector) against
the plain kvdepot Python client, batch SET and GET of 8 MiB values over loopback.

    /usr/bin/python3 bench/lmcache/mp_bench.py [--build build] [--kib 8192] [--batch 32]
                                               [--workers 4] [--pairs 4]

One kvdepotd (started here, host tier sized for two batches). Three ways move the same batch
(--batch values of --kib KiB, numpy buffers; GET into preallocated buffers):
  mp        the connector as LMCache's wrapper drives it: one submit_batch_set / submit_batch_get
            of the whole batch, select() on event_fd(), drain_completions();
  client    kvdepot.Client.put / get_into, one value at a time from one Python thread;
  client-N  the same from --workers Python threads (a ThreadPoolExecutor), each call releasing
            the GIL, with a pool of --workers connections.
After one untimed warm-up round per way, the runs alternate (mp, client, client-N, mp, ...)
--pairs times; every run is printed, then the ratios per pair. Run it on a quiet machine or read only the ratios.
"""
import argparse
import os
import re
import select
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np


def start_daemon(build, capacity):
    data = tempfile.mkdtemp(prefix="kvd-mp-bench-")
    proc = subprocess.Popen(
        [os.path.join(build, "bin", "kvdepotd"), "--listen", "127.0.0.1:0", "--metrics-listen",
         "", "--data-dir", data, "--host-capacity", capacity, "--log-level", "info"],
        stderr=subprocess.PIPE, text=True)
    while True:
        line = proc.stderr.readline()
        if not line:
            sys.exit("kvdepotd exited early")
        if m := re.search(r"listening on 127\.0\.0\.1:(\d+)", line):
            return proc, f"127.0.0.1:{m.group(1)}"


def wait_one(native, future):
    fd = native.event_fd()
    while True:
        select.select([fd], [], [], 30)
        for fid, ok, error, _ in native.drain_completions():
            if fid == future:
                if not ok:
                    sys.exit(f"mp batch failed: {error}")
                return


def run_mp(native, keys, values, outs):
    t0 = time.perf_counter()
    wait_one(native, native.submit_batch_set(keys, [memoryview(v) for v in values]))
    t1 = time.perf_counter()
    wait_one(native, native.submit_batch_get(keys, [memoryview(o) for o in outs]))
    return t1 - t0, time.perf_counter() - t1


def run_client(client, keys, values, outs, pool):
    t0 = time.perf_counter()
    if pool is None:
        for k, v in zip(keys, values):
            client.put(k, v)
    else:
        list(pool.map(client.put, keys, values))
    t1 = time.perf_counter()
    if pool is None:
        for k, o in zip(keys, outs):
            client.get_into(k, o)
    else:
        list(pool.map(client.get_into, keys, outs))
    return t1 - t0, time.perf_counter() - t1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--kib", type=int, default=8192, help="value size (8192: 8 MiB)")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--pairs", type=int, default=4)
    args = ap.parse_args()
    sys.path.insert(0, os.path.join(args.build, "python"))
    import kvdepot
    from kvdepot.lmcache_mp import KvdepotL2Connector

    nbytes = args.kib << 10
    capacity = f"{(args.batch * nbytes * 2 >> 20) + 256}MiB"
    proc, addr = start_daemon(args.build, capacity)
    try:
        rng = np.random.default_rng(0)
        values = [rng.integers(0, 256, nbytes, dtype=np.uint8) for _ in range(args.batch)]
        outs = [np.empty(nbytes, dtype=np.uint8) for _ in range(args.batch)]
        native = KvdepotL2Connector(address=addr, num_workers=args.workers)
        client = kvdepot.Client(addr, pool_size=args.workers)
        pool = ThreadPoolExecutor(args.workers)
        ways = {
            "mp": lambda keys: run_mp(native, keys, values, outs),
            "client": lambda keys: run_client(client, keys, values, outs, None),
            f"client-{args.workers}": lambda keys: run_client(client, keys, values, outs, pool),
        }
        gb = args.batch * nbytes / 1e9
        results = {name: [] for name in ways}
        print(f"{args.batch} x {args.kib} KiB per batch, {args.workers} workers/connections")
        # One untimed round per way first: the daemon's tier and the output buffers are touched
        # (page faults) and the connections opened before anything is measured.
        for name, way in ways.items():
            keys = [f"warmup/{name}/{i}" for i in range(args.batch)]
            way(keys)
            for k in keys:
                client.delete(k)
        for pair in range(args.pairs):
            for name, way in ways.items():
                keys = [f"{name}/{pair}/{i}" for i in range(args.batch)]
                put_s, get_s = way(keys)
                assert all(np.array_equal(o, v) for o, v in zip(outs, values))
                for o in outs:
                    o.fill(0)
                results[name].append((gb / put_s, gb / get_s))
                print(f"pair {pair} {name:>9}: SET {gb / put_s:5.2f} GB/s  GET {gb / get_s:5.2f} GB/s")
                for k in keys:  # drop the batch: the host tier never evicts during a run
                    client.delete(k)
        print("\n| pair | mp SET / client | mp SET / client-N | mp GET / client | mp GET / client-N |")
        print("|---:|---:|---:|---:|---:|")
        names = list(ways)
        for pair in range(args.pairs):
            mp, c1, cn = (results[n][pair] for n in names)
            print(f"| {pair} | {mp[0] / c1[0]:.2f} | {mp[0] / cn[0]:.2f} | {mp[1] / c1[1]:.2f} "
                  f"| {mp[1] / cn[1]:.2f} |")
        native.close()
        pool.shutdown()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)


if __name__ == "__main__":
    main()
