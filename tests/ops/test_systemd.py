"""systemd integration: the unit passes `systemd-analyze verify` (as installed by cmake --install),
and kvdepotd speaks the sd_notify protocol (READY=1 once serving, WATCHDOG=1 pings when asked,
RELOADING=1/READY=1 around SIGHUP, STOPPING=1 on SIGTERM) to a notify socket this test owns."""
import os
import shutil
import signal
import socket
import struct
import subprocess
import time

import pytest

from kvd import REPO, Daemon, http_get

ANALYZE = shutil.which("systemd-analyze")
CMAKE = os.environ.get("KVDEPOT_CMAKE", shutil.which("cmake"))
BUILD_DIR = os.environ.get("KVDEPOT_BUILD_DIR", str(REPO / "build"))


def verify(unit):
    """rc and output of systemd-analyze verify; any output is a finding (it exits 0 on warnings)."""
    p = subprocess.run([ANALYZE, "verify", str(unit)], capture_output=True, text=True, timeout=60,
                       env={**os.environ, "SYSTEMD_LOG_COLOR": "0"})
    return p.returncode, (p.stdout + p.stderr).strip()


@pytest.mark.skipif(ANALYZE is None, reason="systemd-analyze not installed (Debian package systemd)")
def test_installed_unit_verifies(tmp_path):
    prefix = tmp_path / "prefix"
    p = subprocess.run([CMAKE, "--install", BUILD_DIR, "--prefix", str(prefix)],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr
    unit = prefix / "lib/systemd/system/kvdepotd.service"
    for path in ("bin/kvdepotd", "bin/kvdepot", "etc/kvdepot/kvdepot.yaml"):
        assert (prefix / path).is_file(), path
    text = unit.read_text()
    assert f"ExecStart={prefix}/bin/kvdepotd --config {prefix}/etc/kvdepot/kvdepot.yaml" in text
    for setting in ("Type=notify", "WatchdogSec=", "StateDirectory=kvdepot", "NoNewPrivileges=yes",
                    "ProtectSystem=strict", "LimitMEMLOCK=infinity", "PrivateTmp=yes",
                    "ProtectHome=yes", "ExecReload="):
        assert setting in text, setting
    rc, out = verify(unit)
    assert rc == 0 and out == "", out
    # The installed config is the default one and is valid.
    p = subprocess.run([str(prefix / "bin/kvdepotd"), "--check-config",
                        str(prefix / "etc/kvdepot/kvdepot.yaml")], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    # The check has teeth: a misspelt key is reported.
    bad = tmp_path / "bad.service"
    bad.write_text(text.replace("ProtectSystem=strict", "ProtectSystm=strict"))
    rc, out = verify(bad)
    assert "Unknown key" in out, out


@pytest.mark.skipif(shutil.which("make") is None, reason="make not installed")
def test_make_install_without_a_build_says_so_and_builds_nothing(tmp_path):
    # `make install` only installs (issue 23 §5): no apt-get, configure or build.
    build, prefix = tmp_path / "no-build", tmp_path / "prefix"
    p = subprocess.run(["make", "-s", "-C", str(REPO), "install", f"BUILD_DIR={build}",
                        f"PREFIX={prefix}"], capture_output=True, text=True, timeout=60)
    assert p.returncode != 0
    assert f"no build in {build}/" in p.stderr and "make build" in p.stderr, p.stderr
    assert not build.exists() and not prefix.exists()


def test_unit_stop_timeout_covers_drain_and_flush_budget():
    # SIGTERM drains for up to 10 s, then flushes for ssd.flush_budget (default 20 s).
    unit = (REPO / "systemd/kvdepotd.service").read_text()
    stop = int(unit.split("TimeoutStopSec=")[1].split()[0])
    assert stop >= 10 + 20 + 5, stop


class Notifications:
    """A Unix datagram socket in the role of systemd's NOTIFY_SOCKET."""

    def __init__(self, path):
        self.path = str(path)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(self.path)
        self.received = []

    def wait_for(self, field, timeout=10):
        """Messages received until one holding `field` (e.g. "READY=1"); fails after timeout."""
        deadline = time.time() + timeout
        got = []
        while time.time() < deadline:
            self.sock.settimeout(max(deadline - time.time(), 0.01))
            try:
                msg = self.sock.recv(4096).decode()
            except socket.timeout:
                break
            got.append(msg)
            self.received.append(msg)
            if field in msg.split("\n"):
                return got
        raise AssertionError(f"no {field} within {timeout}s; got {got}")

    def collect(self, seconds):
        end = time.time() + seconds
        got = []
        while time.time() < end:
            self.sock.settimeout(max(end - time.time(), 0.01))
            try:
                got.append(self.sock.recv(4096).decode())
            except socket.timeout:
                break
        self.received += got
        return got


def test_sd_notify_ready_watchdog_reload_stopping(tmp_path):
    notify = Notifications(tmp_path / "notify.sock")
    env = {**os.environ, "NOTIFY_SOCKET": notify.path, "WATCHDOG_USEC": "400000"}
    env.pop("WATCHDOG_PID", None)
    d = Daemon(tmp_path, env=env, wait=False)
    try:
        ready = notify.wait_for("READY=1")
        assert not any("WATCHDOG=1" in m for m in ready[:-1]), "no ping before READY=1"
        assert any("STATUS=serving on " in m for m in ready), ready
        # Ready means serving: the protocol port accepts and answers, /healthz says ok.
        d.wait_listening()
        host, port = d.addr.rsplit(":", 1)
        socket.create_connection((host, int(port)), timeout=2).close()
        assert b"pong" in d.cli("ping").stdout
        assert http_get(d.base + "/healthz") == (200, "ok\n")
        d.wait_for_line(r'msg="systemd watchdog enabled" interval_ms=400')

        pings = [m for m in notify.collect(1.0) if m == "WATCHDOG=1"]
        assert 3 <= len(pings) <= 8, f"{len(pings)} pings in 1 s with WatchdogSec=0.4s"

        d.proc.send_signal(signal.SIGHUP)
        after_hup = notify.wait_for("READY=1")
        assert any("RELOADING=1" in m for m in after_hup), after_hup

        d.proc.send_signal(signal.SIGTERM)
        notify.wait_for("STOPPING=1")
        assert d.proc.wait(timeout=20) == 0
    finally:
        d.kill()


def test_no_watchdog_pings_unless_asked(tmp_path):
    notify = Notifications(tmp_path / "notify.sock")
    env = {**os.environ, "NOTIFY_SOCKET": notify.path}
    env.pop("WATCHDOG_USEC", None)
    d = Daemon(tmp_path, env=env, wait=False)
    try:
        notify.wait_for("READY=1")
        assert not any("WATCHDOG=1" in m for m in notify.collect(0.5))
        assert d.stop() == 0
        notify.wait_for("STOPPING=1", timeout=1)
    finally:
        d.kill()


def test_healthz_reports_draining_until_exit(tmp_path):
    d = Daemon(tmp_path)
    try:
        (tmp_path / "v").write_bytes(os.urandom(1 << 20))
        d.cli("put", "big", tmp_path / "v")
        assert http_get(d.base + "/healthz") == (200, "ok\n")
        # A client that asks for far more than the socket buffers hold and never reads keeps the
        # drain going (until the 10 s drain timeout or until it goes away).
        key = b"big"
        body = struct.pack("<IH", 1, len(key)) + key
        host, port = d.addr.rsplit(":", 1)
        slow = socket.create_connection((host, int(port)))
        slow.setblocking(False)
        for i in range(200):
            frame = b"KVDP" + bytes([1, 3]) + struct.pack("<HQIHH", 0, i + 1, len(body), 0, 0)
            try:
                slow.send(frame + body)
            except BlockingIOError:
                break
        time.sleep(0.2)
        d.proc.send_signal(signal.SIGTERM)
        d.wait_for_line(r"draining in-flight requests")
        assert http_get(d.base + "/healthz") == (503, "draining\n")
        assert d.proc.poll() is None, "still draining while the client holds responses"
        slow.close()
        assert d.proc.wait(timeout=15) == 0
    finally:
        d.kill()


def test_shutdown_flush_extends_the_stop_timeout(tmp_path):
    # With an SSD tier, SIGTERM's flush of the host tier tells systemd what it does and asks for
    # the budget (plus 10 s for the close) on top of TimeoutStopSec.
    notify = Notifications(tmp_path / "notify.sock")
    env = {**os.environ, "NOTIFY_SOCKET": notify.path}
    env.pop("WATCHDOG_USEC", None)
    d = Daemon(tmp_path, "--ssd-dir", str(tmp_path / "ssd"), "--ssd-capacity", "64MiB",
               "--ssd-segment-size", "8MiB", "--ssd-flush-budget", "7s", env=env, wait=False)
    try:
        notify.wait_for("READY=1")
        d.wait_listening()
        (tmp_path / "v").write_bytes(os.urandom(4096))
        d.cli("put", "k", tmp_path / "v")
        d.proc.send_signal(signal.SIGTERM)
        notify.wait_for("STOPPING=1")
        got = notify.wait_for("EXTEND_TIMEOUT_USEC=17000000")
        assert any("STATUS=writing the host tier to the SSD tier" in m for m in got), got
        assert d.proc.wait(timeout=20) == 0
    finally:
        d.kill()
