"""Warm restarts (issue 23 §1), on the real binaries: on SIGTERM kvdepotd writes the host tier's
values the SSD tier lacks, most recently used first, within ssd.flush_budget, and logs what it
wrote and what it left; the next start serves them from the SSD tier at once, byte-identical. A
budget of 0 writes nothing and says so (docs/durability.md, "Planned restarts")."""
import json
import os

from kvd import Daemon, logfmt

N = 40
VALUE_BYTES = 64 * 1024 + 123


def ssd_flags(tmp_path, *extra):
    return ["--ssd-dir", str(tmp_path / "ssd"), "--ssd-capacity", "64MiB",
            "--ssd-segment-size", "8MiB", *extra]


def put_values(d, tmp_path):
    values = {}
    for i in range(N):
        key = f"warm-{i:03d}"
        data = os.urandom(VALUE_BYTES)
        f = tmp_path / f"{key}.bin"
        f.write_bytes(data)
        d.cli("put", key, f)
        values[key] = data
    return values


def listed(d, tier):
    p = d.cli("ls", "--tier", tier, "--limit", "1000", "--json")
    return {e["key"] for e in json.loads(p.stdout)}


def flush_line(d):
    return logfmt(d.wait_for_line(r'msg="shutdown flush'))


def test_a_restart_serves_the_host_tier_from_the_ssd(tmp_path):
    d = Daemon(tmp_path, *ssd_flags(tmp_path))
    values = put_values(d, tmp_path)
    assert listed(d, "ssd") == set()  # write-back: nothing was evicted, nothing is on the SSD
    assert d.stop() == 0
    f = flush_line(d)
    assert int(f["host_chunks"]) == N, f
    assert int(f["written_chunks"]) == N, f
    assert int(f["written_bytes"]) == N * VALUE_BYTES, f
    assert int(f["left_chunks"]) == 0 and f["left_because"] == "none", f
    assert int(f["elapsed_ms"]) <= int(f["budget_ms"]), f

    d = Daemon(tmp_path, *ssd_flags(tmp_path))
    try:
        assert listed(d, "ssd") == set(values)  # served from the SSD at once, before any GET
        for key, data in values.items():
            out = tmp_path / "out.bin"
            d.cli("get", key, "-o", out)
            assert out.read_bytes() == data, key
    finally:
        assert d.stop() == 0
    # The values came back into the host tier from the SSD, which still holds them: nothing to
    # write the second time.
    f = flush_line(d)
    assert int(f["written_chunks"]) == 0 and int(f["already_on_ssd"]) == N, f


def test_a_zero_budget_writes_nothing_and_says_so(tmp_path):
    d = Daemon(tmp_path, *ssd_flags(tmp_path, "--ssd-flush-budget", "0"))
    put_values(d, tmp_path)
    assert d.stop() == 0
    f = flush_line(d)
    assert " level=warn " in d.wait_for_line(r'msg="shutdown flush')
    assert int(f["written_chunks"]) == 0, f
    assert int(f["left_chunks"]) == N and int(f["left_bytes"]) == N * VALUE_BYTES, f
    assert f["left_because"] == "ssd.flush_budget ran out", f
    d = Daemon(tmp_path, *ssd_flags(tmp_path))
    try:
        assert listed(d, "ssd") == set()
    finally:
        d.stop()


def test_flush_off(tmp_path):
    d = Daemon(tmp_path, *ssd_flags(tmp_path, "--ssd-flush-on-shutdown", "false"))
    put_values(d, tmp_path)
    assert d.stop() == 0
    f = flush_line(d)
    assert int(f["host_chunks"]) == N, f
    assert not any("wrote" in line for line in d.lines if "shutdown flush" in line)


def test_no_ssd_tier_says_so(tmp_path):
    d = Daemon(tmp_path)
    try:
        line = d.wait_for_line(r'msg="gpu tier off')
        assert "SSD" not in line and "host tier only" in line, line
    finally:
        d.stop()
