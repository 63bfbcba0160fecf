"""Issue 19 §6: steady-state PUTs of values over glibc's 32 MiB mmap threshold take no page faults
in kvdepotd, native and over lm:// (values live in the host tier's arena). Before the arena each
such PUT re-faulted every page of its value: about 250,000 minor faults per GiB PUT."""
import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

BIN = Path(os.environ.get("KVDEPOT_BIN", "build/bin/kvdepot")).parent
KVDEPOT = str(BIN / "kvdepot")
KVDEPOTD = str(BIN / "kvdepotd")


def start_daemon(tmp_path):
    proc = subprocess.Popen(
        [KVDEPOTD, "--listen", "127.0.0.1:0", "--lm-listen", "127.0.0.1:0", "--data-dir",
         str(tmp_path / "data"), "--host-capacity", "512MiB", "--metrics-listen", "",
         "--log-level", "info"],
        stderr=subprocess.PIPE, text=True)
    port = lm_port = None
    deadline = time.time() + 10
    while (port is None or lm_port is None) and time.time() < deadline:
        line = proc.stderr.readline()
        assert line or proc.poll() is None, "kvdepotd exited early"
        if m := re.search(r"listening on 127\.0\.0\.1:(\d+)", line):
            port = int(m.group(1))
        if m := re.search(r"lm:// \(LMCache protocol\) on 127\.0\.0\.1:(\d+)", line):
            lm_port = int(m.group(1))
    assert port and lm_port, "kvdepotd did not report its listeners"
    return proc, port, lm_port


def test_steady_state_puts_of_33_mib_take_no_page_faults(tmp_path):
    proc, port, lm_port = start_daemon(tmp_path)
    try:
        bench = [KVDEPOT, "--addr", f"127.0.0.1:{port}", "bench", "--op", "put", "--value-size",
                 "33MiB", "--connections", "2", "--keys", "4", "--duration", "1", "--no-progress",
                 "--daemon-pid", str(proc.pid), "--lm", f"127.0.0.1:{lm_port}", "--json"]
        for _ in range(2):  # the first run faults the arena's pages in once
            run = subprocess.run(bench, capture_output=True, text=True, timeout=120)
            assert run.returncode == 0, run.stderr
        results = json.loads(run.stdout)
        assert [r["target"] for r in results] == ["kvdepot", "lm"]
        for r in results:
            assert r["ops"] > 0, r
            assert r["daemon_minor_faults_per_gib"] < 2000, r
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=20)
