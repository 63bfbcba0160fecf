"""SIGHUP reloads the --config file: the log level and the host tier's capacity change at run
time (the tier evicts down to a lowered capacity), connection timeouts reach open connections of
both listeners, keys that need a restart are logged and keep their running value, a broken file
is refused without disturbing the daemon. Observed through the STATS operation, /metrics and the
log."""
import json
import os
import signal
import socket
import time

from kvd import Daemon, http_get, logfmt, samples

CONFIG = """\
listen: 127.0.0.1:0
unix: ""
io_threads: 2
data_dir: {data}
log_level: {level}
metrics:
  listen: 127.0.0.1:0
host:
  capacity: {capacity}
limits:
  max_value_bytes: 4MiB
"""


def stats(d):
    return json.loads(d.cli("stats", "--json").stdout)


def wait_until(predicate, timeout=10):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError("timed out")


def host_tier(s):
    """The host tier's fields from `kvdepot stats --json` (the daemon's STATS document)."""
    return s["tiers"]["host"]


def test_sighup_applies_log_level_and_capacity(tmp_path):
    config = tmp_path / "kvdepot.yaml"
    config.write_text(CONFIG.format(data=tmp_path / "data", level="info", capacity="64MiB"))
    d = Daemon(tmp_path, config=config)
    try:
        effective = logfmt(d.wait_for_line(r'msg="effective configuration"'))
        assert effective["host.capacity"] == str(64 << 20) and effective["log_level"] == "info"
        value = tmp_path / "v"
        value.write_bytes(os.urandom(3 << 20))
        for i in range(12):  # 36 MiB
            d.cli("put", f"k{i}", value)
        assert host_tier(stats(d))["chunks"] == 12

        config.write_text(CONFIG.format(data=tmp_path / "data", level="debug", capacity="16MiB")
                          .replace("listen: 127.0.0.1:0\nunix", "listen: 127.0.0.1:1\nunix"))
        mark = len(d.lines)
        d.proc.send_signal(signal.SIGHUP)
        done = logfmt(d.wait_for_line(r'msg="config reloaded"', start=mark))
        assert done["applied"] == "log_level,host.capacity", done
        assert done["restart_needed"] == "listen", done

        tier = host_tier(stats(d))
        assert tier["capacity"] == 16 << 20
        assert tier["bytes"] <= 16 << 20 and tier["chunks"] <= 5, tier
        m = samples(d.scrape())
        assert m['kvdepot_tier_capacity_bytes{tier="host"}'] == 16 << 20
        assert m['kvdepot_tier_used_bytes{tier="host"}'] <= 16 << 20
        assert m['kvdepot_config_reloads_total{result="ok"}'] == 1

        cap = logfmt(d.wait_for_line(r'msg="host tier capacity changed"', start=mark))
        assert cap["from"] == str(64 << 20) and cap["to"] == str(16 << 20)
        assert int(cap["evicted"]) >= 7
        level = logfmt(d.wait_for_line(r'msg="log level changed"', start=mark))
        assert (level["from"], level["to"]) == ("info", "debug")
        restart = logfmt(d.wait_for_line(r'msg="config change needs a restart', start=mark))
        assert restart["level"] == "warn" and restart["key"] == "listen"
        assert restart["configured"] == "127.0.0.1:1"
        assert b"pong" in d.cli("ping").stdout, "still serving on the old address"

        # A broken file is refused; the running configuration stays.
        config.write_text("host:\n  capacity: 12QB\n")
        mark = len(d.lines)
        d.proc.send_signal(signal.SIGHUP)
        failed = logfmt(d.wait_for_line(r'msg="config reload failed', start=mark))
        assert failed["level"] == "error" and "host.capacity" in failed["error"]
        assert host_tier(stats(d))["capacity"] == 16 << 20
        assert wait_until(lambda: samples(d.scrape()).get(
            'kvdepot_config_reloads_total{result="error"}') == 1)
        assert http_get(d.base + "/healthz") == (200, "ok\n")

        assert d.stop() == 0
        assert not any("level=info" in l and "GET" in l for l in d.lines), "no per-request lines"
    finally:
        d.kill()


TIMEOUT_CONFIG = """\
listen: 127.0.0.1:0
unix: ""
data_dir: {data}
metrics:
  listen: 127.0.0.1:0
lm:
  listen: 127.0.0.1:0
limits:
  idle_timeout: {idle}
"""


def connect(addr):
    host, _, port = addr.rpartition(":")
    s = socket.create_connection((host, int(port)), timeout=10)
    return s


def test_sighup_applies_idle_timeout_to_open_connections(tmp_path):
    config = tmp_path / "kvdepot.yaml"
    config.write_text(TIMEOUT_CONFIG.format(data=tmp_path / "data", idle="10m"))
    d = Daemon(tmp_path, config=config)
    try:
        lm_addr = logfmt(d.wait_for_line(r'msg="lm:// \(LMCache protocol\) on'))["lm"]
        native, lm = connect(d.addr), connect(lm_addr)  # idle from here on
        time.sleep(1.0)
        m = samples(d.scrape())
        assert m["kvdepot_connections_open"] == 1 and m["kvdepot_lm_connections_open"] == 1, m

        config.write_text(TIMEOUT_CONFIG.format(data=tmp_path / "data", idle="500ms"))
        mark = len(d.lines)
        d.proc.send_signal(signal.SIGHUP)
        done = logfmt(d.wait_for_line(r'msg="config reloaded"', start=mark))
        assert done["applied"] == "limits.idle_timeout", done
        changed = logfmt(d.wait_for_line(r'msg="connection timeout changed"', start=mark))
        assert (changed["from"], changed["to"]) == ("600000ms", "500ms"), changed
        assert changed["listeners"] == "native,lm", changed

        # Both connections, opened under the 10-minute timeout, are closed now.
        for s in (native, lm):
            assert s.recv(1) == b"", "the daemon closed the idle connection"
            s.close()
        m = wait_until(lambda: (lambda v: v if v.get("kvdepot_lm_idle_timeouts_total") == 1
                                else None)(samples(d.scrape())))
        assert m["kvdepot_idle_timeouts_total"] == 1, m
        assert b"pong" in d.cli("ping").stdout
        assert d.stop() == 0
    finally:
        d.kill()
