"""A real Prometheus (Debian's `prometheus` binary, run directly with a temporary config and
TSDB) scrapes kvdepotd every second while the `kvdepot` CLI puts, gets and looks up; the
expected series then hold sensible values in Prometheus's query API, and every expression of
the Grafana dashboard evaluates there without error."""
import json
import math
import os
import shutil
import socket
import subprocess
import time
import urllib.parse

import pytest

from kvd import Daemon, concrete, dashboard_queries, http_get

def find_prometheus():
    """KVDEPOT_PROMETHEUS when set, else prometheus on PATH or in /usr/bin; None when absent."""
    path = os.environ.get("KVDEPOT_PROMETHEUS") or shutil.which("prometheus") or "/usr/bin/prometheus"
    return path if os.access(path, os.X_OK) else None


PROMETHEUS = find_prometheus()

pytestmark = pytest.mark.skipif(
    PROMETHEUS is None, reason="prometheus binary not found (Debian package prometheus; "
                               "scripts/install-deps.sh installs it)")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Prometheus:
    def __init__(self, tmp_path, target):
        config = tmp_path / "prometheus.yml"
        config.write_text(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
            "scrape_configs:\n  - job_name: kvdepot\n    static_configs:\n"
            f"      - targets: ['{target}']\n")
        self.url = f"http://127.0.0.1:{free_port()}"
        self.log = open(tmp_path / "prometheus.log", "w")
        self.proc = subprocess.Popen(
            [PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
             f"--web.listen-address={self.url[len('http://'):]}", "--log.level=warn"],
            stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 20
        while True:
            assert self.proc.poll() is None, (tmp_path / "prometheus.log").read_text()
            try:
                if http_get(self.url + "/-/ready", timeout=1)[0] == 200:
                    break
            except OSError:
                pass
            assert time.time() < deadline, "prometheus not ready in 20 s"
            time.sleep(0.1)

    def query(self, expr):
        status, body = http_get(self.url + "/api/v1/query?" +
                                urllib.parse.urlencode({"query": expr}))
        doc = json.loads(body)
        assert status == 200 and doc["status"] == "success", (expr, body)
        return doc["data"]["result"]

    def value(self, expr):
        """The single value of an instant vector expression, or None when it is empty."""
        result = self.query(expr)
        assert len(result) <= 1, (expr, result)
        return float(result[0]["value"][1]) if result else None

    def wait_value(self, expr, predicate, timeout=15):
        deadline = time.time() + timeout
        while True:
            v = self.value(expr)
            if v is not None and predicate(v):
                return v
            assert time.time() < deadline, f"{expr} = {v} after {timeout}s"
            time.sleep(0.25)

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def test_prometheus_scrapes_kvdepotd(tmp_path):
    d = Daemon(tmp_path)
    prom = None
    try:
        prom = Prometheus(tmp_path, d.metrics[len("http://"):-len("/metrics")])
        prom.wait_value('up{job="kvdepot"}', lambda v: v == 1)
        for op in ("put", "get"):
            bench = d.cli("bench", "--op", op, "--value-size", "64KiB", "--connections", "2",
                          "--keys", "32", "--duration", "2", "--no-progress")
            assert bench.returncode == 0
        value = tmp_path / "v"
        value.write_bytes(os.urandom(4096))
        d.cli("put", "p0", value)
        d.cli("put", "p1", value)
        d.cli("lookup", "p0", "p1", "p2")
        d.cli("get", "absent", "-o", tmp_path / "x", check=False)

        puts = prom.wait_value('kvdepot_requests_total{op="put",status="ok"}', lambda v: v >= 34)
        gets = prom.wait_value('kvdepot_requests_total{op="get",status="ok"}', lambda v: v > 0)
        prom.wait_value('kvdepot_requests_total{op="get",status="not_found"}', lambda v: v == 1)
        prom.wait_value('kvdepot_requests_total{op="lookup",status="ok"}', lambda v: v == 1)
        # Each bench run deletes its 32 keys when it ends (one DELETE batch): p0 and p1 remain.
        prom.wait_value('kvdepot_requests_total{op="delete",status="ok"}', lambda v: v == 2)
        used = prom.value('kvdepot_tier_used_bytes{tier="host"}')
        assert 2 * 4096 <= used < 32 * 65536
        assert prom.value('kvdepot_tier_capacity_bytes{tier="host"}') == 64 << 20
        assert prom.wait_value('kvdepot_tier_chunks{tier="host"}', lambda v: v == 2) == 2
        assert prom.value('kvdepot_tier_hits_total{tier="host"}') >= gets
        assert prom.value('kvdepot_tier_misses_total{tier="host"}') == 1
        assert prom.value("kvdepot_network_receive_bytes_total") >= puts * 4096
        assert prom.value("kvdepot_network_transmit_bytes_total") >= gets * 65536
        assert prom.value("kvdepot_lookup_prefix_chunks_sum") == 2
        assert prom.value("kvdepot_lookup_keys_total") == 3
        assert prom.value("kvdepot_connections_accepted_total") >= 4
        p99 = prom.value('histogram_quantile(0.99, sum by (le) '
                         '(rate(kvdepot_request_duration_seconds_bucket{op="get"}[30s])))')
        assert p99 is not None and 0 < p99 < 10, p99
        hit_rate = prom.wait_value(
            'sum by (tier) (increase(kvdepot_tier_hits_total[30s])) / (sum by (tier) '
            '(increase(kvdepot_tier_hits_total[30s])) + sum by (tier) '
            '(increase(kvdepot_tier_misses_total[30s])))', lambda v: v > 0)
        assert 0.9 < hit_rate <= 1, hit_rate

        # Every dashboard expression is valid PromQL that Prometheus evaluates.
        for title, expr in dashboard_queries():
            if title.startswith("$"):
                continue  # Grafana's label_values() is not PromQL
            prom.query(concrete(expr, "30s"))
        assert prom.query(concrete('sum by (op) (rate(kvdepot_requests_total{instance=~"$instance"}'
                                   '[$__rate_interval]))', "30s")), "the dashboard's selectors match"
    finally:
        if prom:
            prom.stop()
        d.kill()
