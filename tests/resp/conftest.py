"""Fixtures: a kvdepotd subprocess with the native listener and the resp:// listener enabled."""
import os
import re
import signal
import subprocess
import time

import pytest

KVDEPOTD = os.environ.get("KVDEPOTD_BIN", "build/bin/kvdepotd")


class Daemon:
    def __init__(self, tmp_path, *flags):
        self.proc = subprocess.Popen(
            [KVDEPOTD, "--listen", "127.0.0.1:0", "--resp-listen", "127.0.0.1:0",
             "--metrics-listen", "127.0.0.1:0", "--data-dir", str(tmp_path / "data"), *flags],
            stderr=subprocess.PIPE, text=True)
        self.port = self.resp_port = None
        deadline = time.time() + 10
        while self.resp_port is None and time.time() < deadline:
            line = self.proc.stderr.readline()
            assert line or self.proc.poll() is None, "kvdepotd exited early"
            if m := re.search(r"listening on 127\.0\.0\.1:(\d+)", line):
                self.port = int(m.group(1))
            if m := re.search(r"resp:// \(Redis protocol\) on 127\.0\.0\.1:(\d+)", line):
                self.resp_port = int(m.group(1))
        assert self.port and self.resp_port, "kvdepotd did not report its ports"

    def alive(self):
        return self.proc.poll() is None

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
    return make_daemon("--host-capacity", "512MiB")
