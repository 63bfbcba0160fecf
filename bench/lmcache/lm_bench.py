#!/usr/bin/env python3
"""kvdepotd's lm:// listener (LMCache's remote-server protocol) against kvdepot's own protocol,
chunk PUT and GET throughput over loopback, one connection each, as LMCache uses them.

    /usr/bin/python3 bench/lmcache/lm_bench.py [--build build] [--sizes 4,8] [--chunks 48]

lm:// is driven with a plain socket client in the way LMCache's LMCServerConnector drives it
(header, then payload; GET reads the reply header then recv_into a preallocated buffer). The native
protocol is driven with the kvdepot Python module (put; get_into a preallocated buffer). Both
sides avoid copies in Python. A PUT over lm:// has no reply: a PUT round is timed up to the reply
to a HEALTH sent after the last PUT (the daemon handles a connection's requests in order).
Prints a Markdown table; median of --repeat rounds.
"""
import argparse
import os
import re
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time

HEADER = "iiiiiiiii150s"


def lm_header(cmd, key, length=0, shape=(0, 0, 0, 0)):
    return struct.pack(HEADER, cmd, length, 1, 3, 0, *shape, key.encode().ljust(150))


def recv_exact(sock, view):
    got = 0
    while got < len(view):
        n = sock.recv_into(view[got:])
        if n == 0:
            raise ConnectionError("closed")
        got += n


def start_daemon(build, capacity):
    data = tempfile.mkdtemp(prefix="kvd-lm-bench-")
    proc = subprocess.Popen(
        [os.path.join(build, "bin", "kvdepotd"), "--listen", "127.0.0.1:0", "--lm-listen",
         "127.0.0.1:0", "--metrics-listen", "", "--data-dir", data, "--host-capacity", capacity,
         "--log-level", "info"],
        stderr=subprocess.PIPE, text=True)
    port = lm_port = None
    while lm_port is None:
        line = proc.stderr.readline()
        if not line:
            sys.exit("kvdepotd exited early")
        if m := re.search(r"listening on 127\.0\.0\.1:(\d+)", line):
            port = int(m.group(1))
        if m := re.search(r"lm:// \(LMCache protocol\) on 127\.0\.0\.1:(\d+)", line):
            lm_port = int(m.group(1))
    return proc, port, lm_port


def bench_lm(port, size, chunks, payload):
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    reply = bytearray(36)
    out = bytearray(size)
    t0 = time.perf_counter()
    for i in range(chunks):
        sock.sendall(lm_header(1, f"lm-{size}-{i}", size, (2, 32, 256, size // 32768)))
        sock.sendall(payload)
    sock.sendall(lm_header(5, ""))
    recv_exact(sock, memoryview(reply))
    t1 = time.perf_counter()
    for i in range(chunks):
        sock.sendall(lm_header(2, f"lm-{size}-{i}"))
        recv_exact(sock, memoryview(reply))
        code, length = struct.unpack_from("ii", reply)
        assert code == 200 and length == size, (code, length)
        recv_exact(sock, memoryview(out))
    t2 = time.perf_counter()
    sock.close()
    return size * chunks / (t1 - t0) / 1e9, size * chunks / (t2 - t1) / 1e9


def bench_native(client, size, chunks, payload):
    out = bytearray(size)
    t0 = time.perf_counter()
    for i in range(chunks):
        client.put(f"nat-{size}-{i}", payload)
    t1 = time.perf_counter()
    for i in range(chunks):
        assert client.get_into(f"nat-{size}-{i}", out) == size
    t2 = time.perf_counter()
    return size * chunks / (t1 - t0) / 1e9, size * chunks / (t2 - t1) / 1e9


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--sizes", default="4,8", help="chunk sizes in MiB")
    ap.add_argument("--chunks", type=int, default=48, help="chunks per round and size")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    sys.path.insert(0, os.path.join(args.build, "python"))
    import kvdepot

    proc, port, lm_port = start_daemon(args.build, "2GiB")
    try:
        client = kvdepot.Client(f"127.0.0.1:{port}", pool_size=1)
        print("| chunk | op | lm:// GB/s | native GB/s | lm:// / native |")
        print("|---:|---|---:|---:|---:|")
        for mib in (int(s) for s in args.sizes.split(",")):
            size = mib << 20
            payload = os.urandom(size)
            lm = [bench_lm(lm_port, size, args.chunks, payload) for _ in range(args.repeat)]
            nat = [bench_native(client, size, args.chunks, payload) for _ in range(args.repeat)]
            for op, idx in (("PUT", 0), ("GET", 1)):
                a = statistics.median(r[idx] for r in lm)
                b = statistics.median(r[idx] for r in nat)
                print(f"| {mib} MiB | {op} | {a:.2f} | {b:.2f} | {a / b:.2f} |")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)


if __name__ == "__main__":
    main()
