"""The Prometheus alerting rules (deploy/prometheus/alerts.yml): valid for `promtool check rules`,
each alert firing on the series that should raise it and quiet otherwise (`promtool test rules`
on tests/ops/alerts_test.yml), and every kvdepotd metric they name exported by a real daemon."""
import shutil
import subprocess
from pathlib import Path

import pytest

from kvd import REPO, Daemon, every_exporter_flags, exported_metric_names, metric_names

ALERTS = REPO / "deploy/prometheus/alerts.yml"
UNIT_TESTS = Path(__file__).resolve().parent / "alerts_test.yml"
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(PROMTOOL is None,
                                    reason="promtool missing: run scripts/install-deps.sh")


def promtool(*args, cwd=None):
    p = subprocess.run([PROMTOOL, *args], capture_output=True, text=True, timeout=60, cwd=cwd)
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout


@needs_promtool
def test_rules_are_valid():
    assert "SUCCESS: 7 rules found" in promtool("check", "rules", str(ALERTS))


@needs_promtool
def test_each_alert_fires_when_it_should():
    assert "SUCCESS" in promtool("test", "rules", UNIT_TESTS.name, cwd=UNIT_TESTS.parent)


def test_every_metric_the_rules_use_is_exported(tmp_path):
    names = metric_names(ALERTS.read_text())
    assert len(names) >= 8, names
    d = Daemon(tmp_path, *every_exporter_flags(tmp_path))
    try:
        missing = sorted(names - exported_metric_names(d))
        assert not missing, f"used by alerts.yml but not exported: {missing}"
    finally:
        d.kill()
