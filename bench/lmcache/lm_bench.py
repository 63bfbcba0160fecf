#!/usr/bin/env python3
"""kvdepotd's lm:// listener (LMCache's remote-server protocol) against kvdepot's own protocol,
chunk PUT and GET throughput over loopback, with 1 and 8 concurrent clients (one connection each),
as LMCache uses them.

    /usr/bin/python3 bench/lmcache/lm_bench.py [--build build] [--sizes 8,32] [--clients 1,8]

lm:// is driven with a plain socket client in the way LMCache's LMCServerConnector drives it
(header, then payload; GET reads the reply header then recv_into a preallocated buffer). The native
protocol is driven with the kvdepot Python module (put; get_into a preallocated buffer). Both
sides avoid copies in Python. A PUT over lm:// has no reply: a PUT round is timed up to the reply
to a HEALTH sent after the last PUT (the daemon handles a connection's requests in order).
With N clients, N threads run the same loop on their own keys at once (socket calls and the
module's calls release the GIL); throughput is all bytes over the wall time of the round. Chunks
per client are sized so a round's data (--round-mib, all clients) fits the host tier of a daemon
started afresh for each case. Prints a
Markdown table; median of --repeat rounds.
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
import threading
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


def bench_lm(port, size, chunks, payload, tag=""):
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    reply = bytearray(36)
    out = bytearray(size)
    t0 = time.perf_counter()
    for i in range(chunks):
        sock.sendall(lm_header(1, f"lm-{tag}{size}-{i}", size, (2, 32, 256, size // 32768)))
        sock.sendall(payload)
    sock.sendall(lm_header(5, ""))
    recv_exact(sock, memoryview(reply))
    t1 = time.perf_counter()
    for i in range(chunks):
        sock.sendall(lm_header(2, f"lm-{tag}{size}-{i}"))
        recv_exact(sock, memoryview(reply))
        code, length = struct.unpack_from("ii", reply)
        assert code == 200 and length == size, (code, length)
        recv_exact(sock, memoryview(out))
    t2 = time.perf_counter()
    sock.close()
    return t1 - t0, t2 - t1


def bench_native(client, size, chunks, payload, tag=""):
    out = bytearray(size)
    t0 = time.perf_counter()
    for i in range(chunks):
        client.put(f"nat-{tag}{size}-{i}", payload)
    t1 = time.perf_counter()
    for i in range(chunks):
        assert client.get_into(f"nat-{tag}{size}-{i}", out) == size
    t2 = time.perf_counter()
    return t1 - t0, t2 - t1


def concurrent(run, clients, size, chunks):
    """Runs run(tag) in `clients` threads started together; GB/s of the PUT and GET phases, each
    over the slowest thread's time (all bytes / wall time)."""
    results = [None] * clients
    barrier = threading.Barrier(clients)

    def worker(k):
        barrier.wait()
        results[k] = run(f"c{k}-")

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    total = size * chunks * clients / 1e9
    return total / max(r[0] for r in results), total / max(r[1] for r in results)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--sizes", default="8,32", help="chunk sizes in MiB")
    ap.add_argument("--clients", default="1,8", help="concurrent client counts")
    ap.add_argument("--round-mib", type=int, default=1536, help="data per round (all clients)")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    sys.path.insert(0, os.path.join(args.build, "python"))
    import kvdepot

    print("| chunk | clients | op | lm:// GB/s | native GB/s | lm:// / native |")
    print("|---:|---:|---|---:|---:|---:|")
    for mib in (int(s) for s in args.sizes.split(",")):
        size = mib << 20
        payload = os.urandom(size)
        for n in (int(c) for c in args.clients.split(",")):
            # A fresh daemon per case: each case's chunks (lm:// and native) fit its host tier.
            proc, port, lm_port = start_daemon(args.build, f"{2 * args.round_mib + 1024}MiB")
            try:
                chunks = max(2, args.round_mib // (mib * n))
                natives = [kvdepot.Client(f"127.0.0.1:{port}", pool_size=1) for _ in range(n)]
                lm = [concurrent(lambda tag: bench_lm(lm_port, size, chunks, payload, tag),
                                 n, size, chunks) for _ in range(args.repeat)]
                nat = [concurrent(lambda tag: bench_native(natives[int(tag[1:-1])], size, chunks,
                                                           payload, tag),
                                  n, size, chunks) for _ in range(args.repeat)]
                for op, idx in (("PUT", 0), ("GET", 1)):
                    a = statistics.median(r[idx] for r in lm)
                    b = statistics.median(r[idx] for r in nat)
                    print(f"| {mib} MiB | {n} | {op} | {a:.2f} | {b:.2f} | {a / b:.2f} |",
                          flush=True)
            finally:
                proc.send_signal(signal.SIGTERM)
                proc.wait(timeout=30)

if __name__ == "__main__":
    main()
