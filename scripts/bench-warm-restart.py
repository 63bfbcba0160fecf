#!/usr/bin/env python3
"""Warm restart (docs/durability.md, "Planned restarts"): what a SIGTERM + restart carries over.

Starts kvdepotd (host tier + SSD tier, resp:// on loopback), PUTs KEYS values of VALUE_KIB KiB
(all fit the host tier, so under write-back none is on the SSD), runs a GET workload for WINDOW
seconds (keys drawn uniformly; hit rate = found / asked), stops it with SIGTERM, restarts it on
the same directories and runs the same workload for WINDOW seconds. Reports the shutdown flush
(chunks, bytes, time), the time from SIGTERM to exit, the restart time, and the hit rate before
and after — once with the flush (ssd.flush_budget 20s) and once without (ssd.flush_budget 0),
alternating MODE runs. Usage:
  scripts/bench-warm-restart.py [BIN_DIR] [--keys N] [--value-kib K] [--window S] [--runs R]
"""
import argparse
import random
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path


def resp_command(sock, *parts):
    out = b"*%d\r\n" % len(parts)
    for p in parts:
        p = p if isinstance(p, bytes) else str(p).encode()
        out += b"$%d\r\n%s\r\n" % (len(p), p)
    sock.sendall(out)


class Reader:
    def __init__(self, sock):
        self.sock, self.buf = sock, b""

    def line(self):
        while b"\r\n" not in self.buf:
            self.buf += self.sock.recv(1 << 20)
        line, _, self.buf = self.buf.partition(b"\r\n")
        return line

    def exact(self, n):
        while len(self.buf) < n:
            self.buf += self.sock.recv(max(1 << 20, n - len(self.buf)))
        data, self.buf = self.buf[:n], self.buf[n:]
        return data

    def reply(self):
        head = self.line()
        if head[:1] == b"$":
            n = int(head[1:])
            if n < 0:
                return None
            data = self.exact(n + 2)[:-2]
            return data
        if head[:1] == b"-":
            raise RuntimeError(head.decode())
        return head


class Daemon:
    def __init__(self, bin_dir, work, budget):
        args = [str(bin_dir / "kvdepotd"), "--listen", "127.0.0.1:0", "--unix", "",
                "--metrics-listen", "", "--resp-listen", "127.0.0.1:0",
                "--data-dir", str(work / "data"), "--host-capacity", "1GiB",
                "--ssd-dir", "ssd", "--ssd-capacity", "4GiB", "--ssd-flush-budget", budget]
        self.started = time.monotonic()
        self.proc = subprocess.Popen(args, stderr=subprocess.PIPE, text=True)
        self.lines, self.ready = [], threading.Event()
        threading.Thread(target=self._drain, daemon=True).start()
        if not self.ready.wait(60):
            raise RuntimeError("kvdepotd did not start:\n" + "\n".join(self.lines))
        self.start_seconds = time.monotonic() - self.started
        line = next(l for l in self.lines if "resp:// (Redis protocol) on" in l)
        self.resp = re.search(r"resp=(\S+)", line).group(1)

    def _drain(self):
        for line in self.proc.stderr:
            self.lines.append(line.rstrip("\n"))
            if "resp:// (Redis protocol) on" in line:
                self.ready.set()

    def stop(self):
        t = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(120)
        return time.monotonic() - t

    def field(self, pattern, key):
        line = next(l for l in self.lines if re.search(pattern, l))
        return re.search(key + r'=("[^"]*"|\S+)', line).group(1).strip('"')


def connect(addr):
    host, port = addr.rsplit(":", 1)
    s = socket.create_connection((host, int(port)))
    return s, Reader(s)


def put_all(addr, keys, value_bytes):
    s, r = connect(addr)
    for k in keys:
        resp_command(s, "SET", k, random.randbytes(value_bytes))
        assert r.reply() == b"+OK"
    s.close()


def get_window(addr, keys, seconds):
    s, r = connect(addr)
    asked = found = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        resp_command(s, "GET", random.choice(keys))
        asked += 1
        found += r.reply() is not None
    s.close()
    return asked, found


def run(bin_dir, mode, args):
    work = Path(tempfile.mkdtemp(prefix="kvd-warm-"))
    budget = "20s" if mode == "flush" else "0"
    try:
        keys = [f"warm-{i:05d}" for i in range(args.keys)]
        d = Daemon(bin_dir, work, budget)
        put_all(d.resp, keys, args.value_kib * 1024)
        asked, found = get_window(d.resp, keys, args.window)
        before = found / asked
        stop_s = d.stop()
        written = int(d.field("shutdown flush", "written_chunks"))
        written_b = int(d.field("shutdown flush", "written_bytes"))
        elapsed = int(d.field("shutdown flush", "elapsed_ms"))
        d2 = Daemon(bin_dir, work, budget)
        asked2, found2 = get_window(d2.resp, keys, args.window)
        d2.stop()
        print(f"{mode:8s} keys={args.keys} value={args.value_kib}KiB flushed={written} chunks "
              f"{written_b / 2**20:.1f} MiB in {elapsed} ms; SIGTERM->exit {stop_s:.2f} s; "
              f"restart->serving {d2.start_seconds:.2f} s; hit rate before {before:.3f} "
              f"({asked} GETs), first {args.window} s after {found2 / asked2:.3f} ({asked2} GETs)",
              flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("bin_dir", nargs="?", default="build/bin")
    p.add_argument("--keys", type=int, default=2000)
    p.add_argument("--value-kib", type=int, default=256)
    p.add_argument("--window", type=float, default=60)
    p.add_argument("--runs", type=int, default=2)
    args = p.parse_args()
    for _ in range(args.runs):
        for mode in ("flush", "no-flush"):
            run(Path(args.bin_dir), mode, args)


if __name__ == "__main__":
    main()
