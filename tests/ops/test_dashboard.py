"""The Grafana dashboard (deploy/grafana/kvdepot.json) only uses metrics kvdepotd exports: every
metric name in its PromQL expressions is checked against a scrape of a real daemon with every
exporting part on (SSD tier, lm://, resp://, KV events, cluster)."""
from kvd import (Daemon, dashboard_queries, every_exporter_flags, exported_metric_names,
                 metric_names)


def test_every_dashboard_metric_is_exported(tmp_path):
    queries = dashboard_queries()
    names = set().union(*(metric_names(e) for _, e in queries))
    assert len(names) >= 15, names
    d = Daemon(tmp_path, *every_exporter_flags(tmp_path))
    try:
        exported = exported_metric_names(d)
        missing = sorted(n for n in names if n not in exported)
        assert not missing, f"used by the dashboard but not exported: {missing}"
    finally:
        d.kill()


def test_dashboard_covers_the_operator_questions():
    titles = " | ".join(t.lower() for t, _ in dashboard_queries())
    for topic in ("hit rate", "requests per second", "throughput", "p50", "p99", "capacity",
                  "evictions", "errors", "utilization per tier", "ssd", "lm://", "resp://",
                  "timeouts", "tls", "quota", "codec", "memory", "file descriptors", "kv events",
                  "members up", "etcd", "fencing"):
        assert topic in titles, topic
    exprs = " ".join(e for _, e in dashboard_queries())
    assert "histogram_quantile(0.99" in exprs and "histogram_quantile(0.5" in exprs
