"""kvdepotd as an operator runs it: flags, config checking, the CLI against it over TCP and a
Unix socket, hostile clients, and SIGTERM draining to a clean exit."""
import os
import re
import signal
import socket
import struct
import subprocess
import time
from pathlib import Path

import pytest

BIN = Path(os.environ.get("KVDEPOT_BIN", "build/bin/kvdepot")).parent
KVDEPOT = str(BIN / "kvdepot")
KVDEPOTD = str(BIN / "kvdepotd")
REPO = Path(__file__).resolve().parents[2]


class Daemon:
    def __init__(self, tmp_path, *flags):
        self.sock = str(tmp_path / "kvd.sock")
        self.proc = subprocess.Popen(
            [KVDEPOTD, "--listen", "127.0.0.1:0", "--unix", self.sock, "--data-dir",
             str(tmp_path / "data"), "--host-capacity", "64MiB", "--metrics-listen", "127.0.0.1:0",
             *flags],
            stderr=subprocess.PIPE, text=True)
        line = ""
        deadline = time.time() + 10
        while "listening on" not in line and time.time() < deadline:
            line = self.proc.stderr.readline()
            assert line or self.proc.poll() is None, "kvdepotd exited early"
        m = re.search(r"listening on 127\.0\.0\.1:(\d+)", line)
        assert m, line
        self.port = int(m.group(1))
        self.addr = f"127.0.0.1:{self.port}"

    def cli(self, *args, addr=None, check=True):
        p = subprocess.run([KVDEPOT, "--addr", addr or self.addr, *map(str, args)],
                           capture_output=True, timeout=60)
        assert p.returncode >= 0, "killed by a signal"
        if check:
            assert p.returncode == 0, p.stderr
        return p

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        rc = self.proc.wait(timeout=20)
        rest = self.proc.stderr.read()
        return rc, rest


@pytest.fixture
def daemon(tmp_path):
    d = Daemon(tmp_path)
    yield d
    if d.proc.poll() is None:
        d.proc.kill()
        d.proc.wait()


def test_cli_round_trip_over_tcp_and_unix(daemon, tmp_path):
    payload = os.urandom(3 * 1024 * 1024 + 17)
    (tmp_path / "in.bin").write_bytes(payload)
    for addr in (daemon.addr, "unix:" + daemon.sock):
        assert b"pong" in daemon.cli("ping", addr=addr).stdout
        daemon.cli("put", "k1", tmp_path / "in.bin", addr=addr)
        daemon.cli("get", "k1", "-o", tmp_path / "out.bin", addr=addr)
        assert (tmp_path / "out.bin").read_bytes() == payload
    stats = daemon.cli("stats", "--json").stdout.decode()
    for field in ("bytes", "capacity", "chunks", "hits", "misses", "evictions"):
        assert f'"{field}":' in stats
    assert b"k1" in daemon.cli("ls").stdout
    out = daemon.cli("lookup", "k1", "k2").stdout.decode()
    assert "longest cached prefix: 1 of 2" in out
    daemon.cli("del", "k1")
    miss = daemon.cli("get", "k1", "-o", tmp_path / "x", check=False)
    assert miss.returncode == 1 and b"not in the cache" in miss.stderr


def test_inspect_of_a_stored_chunk(daemon, tmp_path):
    subprocess.run([KVDEPOT, "codec", "synth", tmp_path / "s.npy", "--tokens", "16", "--heads",
                    "2", "--dim", "32", "--quiet"], check=True)
    subprocess.run([KVDEPOT, "codec", "encode", "--codec", "cachegen", "--quiet",
                    tmp_path / "s.npy", tmp_path / "s.kvd"], check=True)
    daemon.cli("put", "chunk", tmp_path / "s.kvd")
    out = daemon.cli("inspect", "chunk").stdout.decode()
    assert "cachegen" in out and "checksum" in out


def test_hostile_clients_do_not_disturb_others(daemon):
    for junk in (b"\x00" * 100, b"KVDP" + b"\xff" * 60, os.urandom(5000)):
        with socket.create_connection(("127.0.0.1", daemon.port)) as s:
            try:  # the server may answer and close before all of the junk is sent
                s.sendall(junk)
                s.shutdown(socket.SHUT_WR)
                s.settimeout(5)
                while s.recv(4096):
                    pass
            except OSError:
                pass
    assert b"pong" in daemon.cli("ping").stdout
    assert daemon.proc.poll() is None


def rss_kib(pid):
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_slow_reader_does_not_grow_the_daemon(daemon, tmp_path):
    (tmp_path / "v").write_bytes(os.urandom(1 << 20))
    daemon.cli("put", "big", tmp_path / "v")
    before = rss_kib(daemon.proc.pid)
    key = b"big"
    body = struct.pack("<IH", 1, len(key)) + key
    with socket.create_connection(("127.0.0.1", daemon.port)) as s:
        s.setblocking(False)
        sent = 0
        for i in range(3000):  # 3 GiB of responses requested, none read
            frame = b"KVDP" + bytes([1, 3]) + struct.pack("<HQIHH", 0, i + 1, len(body), 0, 0) + body
            try:
                s.send(frame)
                sent += 1
            except BlockingIOError:
                break  # the daemon stopped reading: TCP pushes back on the client
        time.sleep(1.0)
        after = rss_kib(daemon.proc.pid)
    assert after - before < 96 * 1024, f"RSS grew from {before} to {after} KiB after {sent} GETs"
    assert b"pong" in daemon.cli("ping").stdout


def test_sigterm_drains_and_exits_zero(daemon, tmp_path):
    bench = subprocess.Popen([KVDEPOT, "--addr", daemon.addr, "bench", "--op", "put",
                              "--value-size", "256KiB", "--connections", "4", "--duration", "20",
                              "--no-progress"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    time.sleep(1.5)
    rc, log = daemon.stop()
    assert rc == 0, log
    assert "draining" in log and "stopped after" in log
    bench.wait(timeout=30)
    assert not Path(daemon.sock).exists(), "the Unix socket is removed on exit"


def test_check_config(tmp_path):
    ok = subprocess.run([KVDEPOTD, "--check-config", REPO / "config/kvdepot.yaml"],
                        capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text("listen: 127.0.0.1:7600\nhost:\n  capacity: 12QB\n")
    p = subprocess.run([KVDEPOTD, "--check-config", bad], capture_output=True, text=True)
    assert p.returncode == 2
    assert f"{bad}:3: key 'host.capacity'" in p.stderr
    p = subprocess.run([KVDEPOTD, "--no-such-flag", "1"], capture_output=True, text=True)
    assert p.returncode == 2 and "unknown flag --no-such-flag" in p.stderr
    help_text = subprocess.run([KVDEPOTD, "--help"], capture_output=True, text=True).stdout
    for flag in ("--listen", "--unix", "--host-capacity", "--data-dir", "--log-level"):
        assert flag in help_text


def test_port_in_use_is_a_clear_error(daemon, tmp_path):
    p = subprocess.run([KVDEPOTD, "--listen", daemon.addr, "--unix", "", "--data-dir",
                        str(tmp_path / "d2")], capture_output=True, text=True, timeout=10)
    assert p.returncode == 1, p.stderr
    assert f"kvdepotd: error: listen {daemon.addr}: address already in use" in p.stderr, p.stderr
