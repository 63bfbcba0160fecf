"""Helpers for the operability tests: a kvdepotd process whose log is collected as it runs, and
small HTTP and logfmt utilities. Binaries come from KVDEPOT_BIN_DIR (set by ctest)."""
import os
import re
import shlex
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

BIN = Path(os.environ.get("KVDEPOT_BIN_DIR", Path(__file__).resolve().parents[2] / "build/bin"))
KVDEPOT = str(BIN / "kvdepot")
KVDEPOTD = str(BIN / "kvdepotd")
REPO = Path(__file__).resolve().parents[2]


def logfmt(line):
    """The key=value pairs of one logfmt line (quoted values unescaped)."""
    fields = {}
    for m in re.finditer(r'(\w[\w.]*)=("((?:[^"\\]|\\.)*)"|\S*)', line):
        value = m.group(3) if m.group(3) is not None else m.group(2)
        if m.group(2).startswith('"'):
            value = re.sub(r"\\(.)", lambda e: {"n": "\n", "t": "\t"}.get(e.group(1), e.group(1)),
                           m.group(3))
        fields[m.group(1)] = value
    return fields


def http_get(url, timeout=5):
    """(status, body text) of a GET; HTTP errors are returned, not raised."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


class Daemon:
    """kvdepotd on ephemeral ports (TCP and metrics), stderr collected line by line."""

    def __init__(self, tmp_path, *flags, config=None, env=None, wait=True):
        args = [KVDEPOTD]
        if config:
            args += ["--config", str(config)]
        else:
            args += ["--listen", "127.0.0.1:0", "--unix", "", "--metrics-listen", "127.0.0.1:0",
                     "--data-dir", str(tmp_path / "data"), "--host-capacity", "64MiB"]
        args += list(flags)
        self.proc = subprocess.Popen(args, stderr=subprocess.PIPE, text=True, env=env)
        self.lines = []
        self._eof = False
        self._cv = threading.Condition()
        threading.Thread(target=self._drain, daemon=True).start()
        if wait:
            self.wait_listening()

    def _drain(self):
        for line in self.proc.stderr:
            with self._cv:
                self.lines.append(line.rstrip("\n"))
                self._cv.notify_all()
        with self._cv:
            self._eof = True
            self._cv.notify_all()

    def wait_for_line(self, pattern, timeout=10, start=0):
        """The first log line (from index `start`) matching `pattern`; fails after `timeout` or
        once the daemon has exited without writing one."""
        deadline = time.time() + timeout
        with self._cv:
            while True:
                for line in self.lines[start:]:
                    if re.search(pattern, line):
                        return line
                if time.time() >= deadline or self._eof:
                    raise AssertionError(f"no log line matching {pattern!r}:\n" +
                                         "\n".join(self.lines))
                self._cv.wait(0.2)

    def wait_listening(self):
        f = logfmt(self.wait_for_line(r'msg="listening on '))
        self.addr = f.get("tcp")
        self.metrics = f.get("metrics")  # http://HOST:PORT/metrics
        self.base = self.metrics[: -len("/metrics")] if self.metrics else None
        return f

    def cli(self, *args, check=True):
        p = subprocess.run([KVDEPOT, "--addr", self.addr, *map(str, args)], capture_output=True,
                           timeout=60)
        if check:
            assert p.returncode == 0, (shlex.join(map(str, args)), p.stderr)
        return p

    def scrape(self):
        status, body = http_get(self.metrics)
        assert status == 200, body
        return body

    def stop(self, sig=signal.SIGTERM):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        rc = self.proc.wait(timeout=30)
        time.sleep(0.05)  # let the reader thread take the last lines
        return rc

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def samples(text):
    """{series: value} of a Prometheus text exposition (series = name{labels} as written)."""
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            series, _, value = line.rpartition(" ")
            out[series] = float(value)
    return out


DASHBOARD = REPO / "deploy/grafana/kvdepot.json"


def dashboard_queries(path=DASHBOARD):
    """[(panel title, PromQL expression)] of every target of every panel, rows included."""
    import json

    def walk(panels):
        for p in panels:
            yield from ((p.get("title", ""), t["expr"]) for t in p.get("targets", []) if "expr" in t)
            yield from walk(p.get("panels", []))

    dashboard = json.loads(Path(path).read_text())
    queries = list(walk(dashboard["panels"]))
    for var in dashboard.get("templating", {}).get("list", []):
        q = var.get("query")
        if isinstance(q, dict) and "query" in q:
            queries.append((f"${var['name']}", q["query"]))
    return queries


def metric_names(expr):
    """kvdepotd's metric names (kvdepot_* and process_*) a PromQL expression uses."""
    return set(re.findall(r"\b((?:kvdepot|process)_[A-Za-z0-9_]+)", expr))


# Flags that turn on every part of kvdepotd that exports metrics of its own (SSD tier, lm://,
# resp://, KV events), on ephemeral ports under `tmp_path`.
def every_exporter_flags(tmp_path):
    return ["--ssd-dir", str(tmp_path / "ssd"), "--ssd-capacity", "64MiB",
            "--ssd-segment-size", "16MiB", "--lm-listen", "127.0.0.1:0",
            "--resp-listen", "127.0.0.1:0", "--events-publish", "tcp://127.0.0.1:0",
            # The cluster's metrics: a member whose etcd does not answer (nothing listens on port
            # 1) starts anyway, fenced, and exports kvdepot_cluster_* with etcd_up 0.
            "--cluster-etcd", "http://127.0.0.1:1", "--cluster-advertise", "127.0.0.1:7600"]


def exported_metric_names(daemon):
    """Every metric family and sample name in one scrape of `daemon`."""
    exported = set()
    for line in daemon.scrape().splitlines():
        if line.startswith("# TYPE "):
            exported.add(line.split()[2])
        elif line and not line.startswith("#"):
            exported.add(line.split("{")[0].split(" ")[0])
    return exported


def concrete(expr, rate_interval="10s"):
    """A dashboard expression with Grafana's variables given values Prometheus accepts."""
    return expr.replace("$__rate_interval", rate_interval).replace("$instance", ".*")
