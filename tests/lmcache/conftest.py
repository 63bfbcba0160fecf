"""Shared fixtures: a kvdepotd subprocess with both the native listener and lm:// enabled."""
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

KVDEPOTD = os.environ.get("KVDEPOTD_BIN", "build/bin/kvdepotd")
HERE = Path(__file__).resolve().parent
# The fake LMCache package (fake_lmcache/) and, when built, the kvdepot Python package.
sys.path.insert(0, str(HERE / "fake_lmcache"))
if os.environ.get("KVDEPOT_PYTHON_DIR"):
    sys.path.insert(0, os.environ["KVDEPOT_PYTHON_DIR"])


class Daemon:
    def __init__(self, tmp_path, *flags):
        self.proc = subprocess.Popen(
            [KVDEPOTD, "--listen", "127.0.0.1:0", "--lm-listen", "127.0.0.1:0",
             "--metrics-listen", "127.0.0.1:0", "--data-dir",
             str(tmp_path / "data"), *flags],
            stderr=subprocess.PIPE, text=True)
        self.port = self.lm_port = None
        deadline = time.time() + 10
        while self.lm_port is None and time.time() < deadline:
            line = self.proc.stderr.readline()
            assert line or self.proc.poll() is None, "kvdepotd exited early"
            if m := re.search(r"listening on 127\.0\.0\.1:(\d+)", line):
                self.port = int(m.group(1))
            if m := re.search(r"lm:// \(LMCache protocol\) on 127\.0\.0\.1:(\d+)", line):
                self.lm_port = int(m.group(1))
        assert self.port and self.lm_port, "kvdepotd did not report its ports"
        self.addr = f"127.0.0.1:{self.port}"

    def alive(self):
        return self.proc.poll() is None

    def rss_bytes(self):
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        return 0

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        rc = self.proc.wait(timeout=20)
        return rc, self.proc.stderr.read()


@pytest.fixture
def make_daemon(tmp_path):
    daemons = []

    def make(*flags):
        d = Daemon(tmp_path, *flags)
        daemons.append(d)
        return d

    yield make
    for d in daemons:
        if d.proc.poll() is None:
            d.proc.kill()
            d.proc.wait()


@pytest.fixture
def daemon(make_daemon):
    return make_daemon("--host-capacity", "256MiB")
