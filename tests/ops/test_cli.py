"""The CLI against a real kvdepotd (issue 23 §2): no size limit of its own (the server's governs),
refusals that quote the server's status, limit and setting, connection errors that say which
address was tried and from where, exit status 2 for every wrong command line, `put KEY -`,
`get KEY` to a pipe, and --json on every remote command."""
import json
import os
import socket
import subprocess

import pytest

from kvd import KVDEPOT, Daemon, logfmt


def kvdepot(*args, input=None, env=None, timeout=60):
    return subprocess.run([KVDEPOT, *map(str, args)], capture_output=True, input=input, env=env,
                          timeout=timeout)


def free_port():
    """A loopback port nobody listens on (bound, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---- exit status 2 for wrong command lines -----------------------------------------------------

@pytest.mark.parametrize("args", [
    ["ls", "--tier", "foo"],
    ["codec", "encode", "--codec", "foo", "in.npy", "out.kvd"],
    ["--addr", "foo", "ping"],
    ["--addr"],
    ["--token-file"],
    ["ping", "extra"],
    ["get"],
])
def test_wrong_command_lines_exit_2(args):
    p = kvdepot(*args)
    assert p.returncode == 2, (args, p.stderr)
    err = p.stderr.decode()
    assert err.startswith("kvdepot: error: ") and err.count("\n") == 1, err
    assert "unknown command '--addr'" not in err


def test_addr_alone_says_it_needs_a_value():
    p = kvdepot("--addr")
    assert b"--addr needs a value" in p.stderr, p.stderr


# ---- connection errors ------------------------------------------------------------------------

def test_connection_refused_names_the_address_and_its_source():
    port = free_port()
    p = kvdepot("--addr", f"127.0.0.1:{port}", "ping")
    err = p.stderr.decode()
    assert p.returncode == 1, err
    assert f"127.0.0.1:{port}" in err and "Connection refused" in err, err
    assert "address from --addr" in err and "is kvdepotd running" in err, err


def test_connection_refused_from_the_environment():
    port = free_port()
    env = dict(os.environ, KVDEPOT_ADDR=f"127.0.0.1:{port}")
    err = kvdepot("ping", env=env).stderr.decode()
    assert "address from $KVDEPOT_ADDR" in err, err


# ---- limits -----------------------------------------------------------------------------------

def test_no_cli_cap_the_servers_limit_governs(tmp_path):
    d = Daemon(tmp_path, "--limits-max-value-bytes", "100MiB", "--limits-max-body-bytes",
               "128MiB", "--host-capacity", "256MiB")
    try:
        data = os.urandom(70 * 1000 * 1000)
        big = tmp_path / "big.bin"
        big.write_bytes(data)
        d.cli("put", "bigv", big)
        out = tmp_path / "out.bin"
        d.cli("get", "bigv", "-o", out)
        assert out.read_bytes() == data
    finally:
        d.stop()


def test_a_refusal_quotes_the_server_status_limit_and_setting(tmp_path):
    d = Daemon(tmp_path, "--limits-max-value-bytes", "8MiB")
    try:
        mid = tmp_path / "mid.bin"
        mid.write_bytes(b"x" * (9 << 20))
        p = d.cli("put", "midv", mid, check=False)
        err = p.stderr.decode()
        assert p.returncode == 1, err
        for needle in ["midv", "out_of_range", str(9 << 20), str(8 << 20),
                       "limits.max_value_bytes", "--limits-max-value-bytes"]:
            assert needle in err, (needle, err)
    finally:
        d.stop()


# ---- symmetry: stdin, stdout, --json -----------------------------------------------------------

def test_put_from_stdin_and_get_to_a_pipe(tmp_path):
    d = Daemon(tmp_path)
    try:
        data = os.urandom(100_000)
        p = subprocess.run([KVDEPOT, "--addr", d.addr, "put", "k-stdin", "-"], input=data,
                           capture_output=True, timeout=30)
        assert p.returncode == 0, p.stderr
        g = subprocess.run([KVDEPOT, "--addr", d.addr, "get", "k-stdin"], capture_output=True,
                           timeout=30)
        assert g.returncode == 0, g.stderr
        assert g.stdout == data
    finally:
        d.stop()


def test_json_on_every_remote_command(tmp_path):
    d = Daemon(tmp_path)
    try:
        f = tmp_path / "v.bin"
        f.write_bytes(b"hello")
        assert json.loads(d.cli("put", "kj", f, "--json").stdout) == {"key": "kj", "bytes": 5}
        assert "ms" in json.loads(d.cli("ping", "--json").stdout)
        assert "limits" in json.loads(d.cli("stats", "--json").stdout)
        assert json.loads(d.cli("ls", "--json").stdout)[0]["key"] == "kj"
        assert json.loads(d.cli("lookup", "kj", "--json").stdout)["prefix_length"] == 1
        got = json.loads(d.cli("get", "kj", "-o", tmp_path / "o.bin", "--json").stdout)
        assert got["bytes"] == 5
        assert json.loads(d.cli("del", "kj", "--json").stdout) == [{"key": "kj", "deleted": True}]
    finally:
        d.stop()


def test_json_on_the_codec_commands(tmp_path):
    npy, kvd, back = tmp_path / "a.npy", tmp_path / "a.kvd", tmp_path / "b.npy"
    reports = []
    for args in (["codec", "synth", npy, "--layers", "2", "--tokens", "16", "--json"],
                 ["codec", "encode", "--codec", "raw", npy, kvd, "--json"],
                 ["codec", "decode", kvd, back, "--json"]):
        p = kvdepot(*args)
        assert p.returncode == 0, (args, p.stderr)
        reports.append(json.loads(p.stdout))
    assert reports[1]["codec"] == "raw" and reports[1]["bytes"] == kvd.stat().st_size
    assert reports[0]["shape"] == reports[2]["shape"] == [2, 2, 16, 8, 128]
    assert reports[2]["file"] == str(back)


# ---- issue 23 §3: purges, bench cleanup, top, completion (the real binary) ---------------------

def test_del_prefix_refuses_without_yes_on_a_pipe(tmp_path):
    d = Daemon(tmp_path)
    try:
        f = tmp_path / "v.bin"
        f.write_bytes(b"x" * 1000)
        for i in range(3):
            d.cli("put", f"model-a/{i}", f)
        d.cli("put", "model-b/0", f)
        # stdin is a pipe here: no one to ask, so --yes is required (exit 2, nothing deleted).
        p = subprocess.run([KVDEPOT, "--addr", d.addr, "del", "--prefix", "model-a/"],
                           input=b"y\n", capture_output=True, timeout=30)
        assert p.returncode == 2, p.stderr
        assert b"3 keys" in p.stderr and b"--yes" in p.stderr, p.stderr
        assert len(json.loads(d.cli("ls", "model-a/", "--json").stdout)) == 3
        out = d.cli("del", "--prefix", "model-a/", "--yes").stdout.decode()
        assert out == "deleted 3 keys (2.93 KiB) under prefix 'model-a/'\n", out
        assert [e["key"] for e in json.loads(d.cli("ls", "--json").stdout)] == ["model-b/0"]
    finally:
        d.stop()


def test_bench_leaves_no_keys_in_kvdepotd_redis_or_lm(tmp_path):
    """The native run, the --redis run (against kvdepotd's own resp:// listener, which speaks
    Redis's protocol and stores into the same cache) and the --lm run all delete their keys."""
    d = Daemon(tmp_path, "--lm-listen", "127.0.0.1:0", "--resp-listen", "127.0.0.1:0")
    try:
        lm = logfmt(d.wait_for_line(r'msg="lm://'))["lm"]
        resp = logfmt(d.wait_for_line(r'msg="resp://'))["resp"]
        p = d.cli("bench", "--op", "put", "--duration", "1", "--keys", "8", "--value-size",
                  "64KiB", "--redis", resp, "--lm", lm, "--json")
        runs = json.loads(p.stdout)
        assert [r["target"] for r in runs] == ["kvdepot", "lm", "redis"], runs
        for r in runs:
            assert r["ops"] > 0 and r["keys_removed"] == 8, r
        assert p.stderr == b"", p.stderr  # no progress bar: stderr is not a terminal
        assert json.loads(d.cli("ls", "--json").stdout) == []
    finally:
        d.stop()


def test_top_prints_count_lines_and_stats_has_sections(tmp_path):
    d = Daemon(tmp_path, "--lm-listen", "127.0.0.1:0", "--resp-listen", "127.0.0.1:0")
    try:
        lines = d.cli("top", "--interval", "0.2", "--count", "2").stdout.decode().splitlines()
        assert len(lines) == 3 and "req/s" in lines[0], lines
        text = d.cli("stats").stdout.decode()
        for section in ("# server", "# connections", "# tiers", "# host", "# limits"):
            assert section in text, text
        assert f"{d.proc.pid}" in text and "0.1.0" in text, text
        # The other listeners' counters are STATS sections too.
        for section in ("# lm://", "# resp"):
            assert section in text, text
        doc = json.loads(d.cli("stats", "--json").stdout)
        assert doc["pid"] == d.proc.pid and doc["tiers"]["host"]["capacity"] == 64 << 20
        assert doc["lm"]["connections_open"] == 0 and "bytes_in" in doc["lm"], doc
        assert "commands" in doc["resp"], doc
    finally:
        d.stop()


def test_completion_scripts_load_in_bash(tmp_path):
    script = kvdepot("completion", "bash").stdout.decode()
    probe = script + "\nCOMP_WORDS=(kvdepot ls --sort ''); COMP_CWORD=3; _kvdepot\n" \
                     "echo \"${COMPREPLY[*]}\"\n"
    p = subprocess.run(["bash", "-c", probe], capture_output=True, text=True, timeout=30)
    assert p.returncode == 0 and p.stdout.strip() == "key size tier idle", (p.stdout, p.stderr)
