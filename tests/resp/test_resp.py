"""kvdepotd's resp:// listener driven by the real Redis tools (redis-cli, redis-cli --pipe,
redis-benchmark), python3-redis, and raw sockets: round trips, pipelining, large binary values,
limits, authentication, LMCache's RESP connectors' byte sequences, and malformed input that closes
only its own connection."""
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import redis

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "lmcache"))
from lm_wire import native_stats  # noqa: E402  (STATS over the native protocol)


def cli(port, *args, stdin=None):
    r = subprocess.run(["redis-cli", "-p", str(port), *args], input=stdin,
                       capture_output=True, timeout=30)
    assert r.returncode == 0, r.stderr
    return r.stdout


def recv_reply_line(s):
    data = b""
    while not data.endswith(b"\r\n"):
        chunk = s.recv(1)
        assert chunk, f"connection closed after {data!r}"
        data += chunk
    return data


def recv_exactly(s, n):
    data = bytearray()
    while len(data) < n:
        chunk = s.recv(min(1 << 20, n - len(data)))
        assert chunk, "connection closed early"
        data += chunk
    return bytes(data)


def closed_by_peer(s):
    s.settimeout(10)
    try:
        while s.recv(65536):
            pass
        return True
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


def test_redis_cli_round_trips(daemon):
    p = daemon.resp_port
    assert cli(p, "PING") == b"PONG\n"
    # Binary-safe values, through the inline path (small) and straight into the stored buffer
    # (over 16 KiB), as redis-cli -x sends them.
    for size in (1000, 300 * 1024):
        value = os.urandom(size) + b"\r\n\x00\r\n"
        assert cli(p, "-x", "SET", f"bin:{size}", stdin=value) == b"OK\n"
        assert cli(p, "GET", f"bin:{size}") == value + b"\n"
        assert cli(p, "STRLEN", f"bin:{size}") == f"{len(value)}\n".encode()
    assert cli(p, "MSET", "user:1", "ann", "user:2", "bob", "item:1", "x") == b"OK\n"
    assert cli(p, "MGET", "user:1", "user:2", "missing") == b"ann\nbob\n\n"
    assert sorted(cli(p, "--scan", "--pattern", "user:*").split()) == [b"user:1", b"user:2"]
    # SCAN cursor by cursor, one key of work per call.
    cursor, seen = b"0", []
    for _ in range(20):
        reply = cli(p, "SCAN", cursor, "MATCH", "*:[12]", "COUNT", "1").split(b"\n")
        cursor, seen = reply[0], seen + [k for k in reply[1:] if k]
        if cursor == b"0":
            break
    assert cursor == b"0" and sorted(seen) == [b"item:1", b"user:1", b"user:2"]
    assert cli(p, "DBSIZE") == b"5\n"
    assert cli(p, "EXISTS", "user:1", "user:2", "nope") == b"2\n"
    assert cli(p, "TYPE", "user:1") == b"string\n" and cli(p, "TYPE", "nope") == b"none\n"
    info = cli(p, "INFO").decode()
    for section in ("# Server", "# Clients", "# Memory", "# Stats", "# Keyspace", "# Kvdepot"):
        assert section in info
    assert "db0:keys=5,expires=0,avg_ttl=0" in info
    assert "host_chunks:5" in info
    assert cli(p, "INFO", "memory").decode().startswith("# Memory")
    assert cli(p, "DEL", "user:1", "nope") == b"1\n"
    assert cli(p, "UNLINK", "user:2") == b"1\n"
    assert cli(p, "DBSIZE") == b"3\n"
    # The keyspace is the native protocol's: the same Store holds the keys.
    assert native_stats(daemon.port)["tiers"]["host"]["chunks"] == 3
    assert cli(p, "SELECT", "0") == b"OK\n"
    assert b"DB index is out of range" in cli(p, "SELECT", "1")
    assert b"no key expiry" in cli(p, "SET", "k", "v", "EX", "10")
    assert cli(p, "GET", "k") == b"\n"  # refused: nothing stored
    err = cli(p, "FLUSHALL", "ASYNC")
    assert err.startswith(b"ERR unknown command 'FLUSHALL', with args beginning with: 'ASYNC' \n")
    assert int(cli(p, "COMMAND", "COUNT")) >= 20
    hello = cli(p, "-3", "HELLO", "3")
    assert b"server redis" in hello and b"proto 3" in hello


def test_resp3_and_introspection(daemon):
    s = socket.create_connection(("127.0.0.1", daemon.resp_port), timeout=10)
    s.sendall(b"HELLO 3\r\nGET nothing\r\nMGET nothing\r\nCONFIG GET save\r\nHELLO 2\r\n"
              b"GET nothing\r\n")
    expected = (b"%7\r\n$6\r\nserver\r\n$5\r\nredis\r\n$7\r\nversion\r\n$5\r\n7.0.0\r\n"
                b"$5\r\nproto\r\n:3\r\n")
    assert recv_exactly(s, len(expected)) == expected
    rest = b""
    while not rest.endswith(b"$-1\r\n"):
        chunk = s.recv(4096)
        assert chunk
        rest += chunk
    # RESP3 nulls and maps, then RESP2 again after HELLO 2.
    assert b"_\r\n*1\r\n_\r\n%1\r\n$4\r\nsave\r\n$0\r\n\r\n*14\r\n" in rest
    s.close()
    p = daemon.resp_port
    assert b"summary" in cli(p, "COMMAND", "DOCS", "get")
    assert cli(p, "COMMAND", "INFO", "get").split(b"\n")[:2] == [b"get", b"2"]
    assert cli(p, "CONFIG", "GET", "appendonly") == b"appendonly\nno\n"
    assert b"not supported" in cli(p, "CONFIG", "SET", "save", "")


def test_redis_cli_pipe(daemon):
    lines = []
    for i in range(2000):
        key, value = f"p:{i}", f"v{i}"
        if i % 2:
            lines.append(f"*3\r\n$3\r\nSET\r\n${len(key)}\r\n{key}\r\n"
                         f"${len(value)}\r\n{value}\r\n")
        else:
            lines.append(f"SET {key} {value}\r\n")  # inline commands, as in Redis's mass-insert doc
    out = cli(daemon.resp_port, "--pipe", stdin="".join(lines).encode()).decode()
    assert "errors: 0, replies: 2000" in out
    assert cli(daemon.resp_port, "DBSIZE") == b"2000\n"
    assert cli(daemon.resp_port, "GET", "p:1999") == b"v1999\n"
    assert cli(daemon.resp_port, "GET", "p:0") == b"v0\n"


def run_benchmark(port, *args):
    r = subprocess.run(["redis-benchmark", "-p", str(port), "-q", *args], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    out = r.stdout.replace("\r", "\n")
    assert "ERROR" not in out and "rror" not in r.stderr, out + r.stderr
    return {m.group(1): float(m.group(2))
            for m in re.finditer(r"^\s*(\S.*?): ([\d.]+) requests per second", out, re.M)}


def test_redis_benchmark_large_values(daemon):
    p = daemon.resp_port
    rates = run_benchmark(p, "-t", "set,get", "-n", "200", "-d", "1048576")
    assert rates.get("SET", 0) > 0 and rates.get("GET", 0) > 0, rates
    # redis-benchmark's SET wrote 1 MiB under "key:__rand_int__" (no -r): MGET it three at a time.
    assert int(cli(p, "STRLEN", "key:__rand_int__")) == 1048576
    rates = run_benchmark(p, "-n", "60", "-c", "4", "MGET", "key:__rand_int__",
                          "key:__rand_int__", "key:__rand_int__")
    assert next(iter(rates.values()), 0) > 0, rates
    rates = run_benchmark(p, "-t", "ping,set,get", "-n", "2000", "-P", "16")
    assert {"PING_INLINE", "PING_MBULK", "SET", "GET"} <= set(rates), rates


def test_python_redis(daemon):
    r = redis.Redis(port=daemon.resp_port, socket_timeout=10)
    assert r.ping()
    big = os.urandom(8 * 1024 * 1024)
    assert r.set(b"big\x00key", big)
    assert r.get(b"big\x00key") == big
    assert r.strlen(b"big\x00key") == len(big)
    r.mset({f"m:{i}": f"{i}" * i for i in range(1, 50)})
    assert r.mget([f"m:{i}" for i in range(1, 50)] + ["none"]) == [
        (f"{i}" * i).encode() for i in range(1, 50)] + [None]
    assert sorted(r.scan_iter(match="m:1?", count=7)) == [f"m:{i}".encode() for i in range(10, 20)]
    assert r.dbsize() == 50
    assert r.set("nx", "1", nx=True) is True
    assert r.set("nx", "2", nx=True) is None
    assert r.set("nx", "3", xx=True) is True
    assert r.set("xx-missing", "1", xx=True) is None
    assert r.set("nx", "4", get=True) == b"3"
    assert r.get("nx") == b"4"
    assert r.exists("nx", "m:1", "none") == 2
    assert r.delete("nx", "none") == 1
    assert r.type("m:1") == b"string"
    info = r.info()
    assert info["redis_version"] == "7.0.0" and info["connected_clients"] >= 1
    assert r.info("kvdepot")["host_chunks"] == 50
    assert r.client_setname("kvtest") and r.client_getname() == "kvtest"
    assert r.client_id() > 0
    assert r.echo("hi") == b"hi"
    with pytest.raises(redis.ResponseError, match="no key expiry"):
        r.set("ttl", "v", ex=5)
    with pytest.raises(redis.ResponseError, match="unknown command 'LPUSH'"):
        r.lpush("list", "a")
    with pytest.raises(redis.ResponseError, match="wrong number of arguments for 'get'"):
        r.execute_command("GET")
    # Pipelining: replies come back in order, errors in their place.
    pipe = r.pipeline(transaction=False)
    for i in range(300):
        pipe.set(f"pp:{i}", i)
        pipe.get(f"pp:{i}")
    pipe.execute_command("NOSUCH")
    pipe.echo("last")
    out = pipe.execute(raise_on_error=False)
    assert out[0] is True and out[1] == b"0" and out[599] == b"299"
    assert isinstance(out[600], redis.ResponseError) and out[601] == b"last"
    r.close()


def test_values_over_the_limit_are_refused_and_skipped(make_daemon):
    d = make_daemon("--host-capacity", "64MiB", "--limits-max-value-bytes", "1MiB")
    r = redis.Redis(port=d.resp_port, socket_timeout=10)
    with pytest.raises(redis.ResponseError, match=r"over limits.max_value_bytes \(1048576\)"):
        r.set("too-big", os.urandom(3 * 1024 * 1024))
    assert r.get("too-big") is None
    with pytest.raises(redis.ResponseError, match="max_value_bytes"):
        r.mset({"a": b"x" * (2 << 20), "b": b"y"})
    assert r.mget("a", "b") == [None, None]  # MSET stores all or nothing
    assert r.set("fits", b"z" * (1 << 20)) and r.strlen("fits") == 1 << 20
    assert d.alive()


def test_malformed_resp_closes_only_that_connection(daemon):
    good = redis.Redis(port=daemon.resp_port, socket_timeout=10)
    assert good.set("survivor", "yes")
    cases = {
        b"*1\r\n*1\r\n$4\r\nPING\r\n": b"expected '$', got '*'",          # nested array
        b"*2\r\n$3\r\nGET\r\n$99999999999\r\n": b"invalid bulk length",   # huge bulk length
        b"*1\r\n$-5\r\n": b"invalid bulk length",
        b"*1\r\n$3\r\nPINGPONG\r\n": b"longer than its length",           # wrong length
        b"*99999999\r\n": b"invalid multibulk length",                    # too many arguments
        b"*x\r\n": b"invalid multibulk length",
        b"SET \"unbalanced\r\n": b"unbalanced quotes",                   # inline command
        b"A" * (70 * 1024): b"too big inline request",
    }
    for payload, message in cases.items():
        s = socket.create_connection(("127.0.0.1", daemon.resp_port), timeout=10)
        s.sendall(b"PING\r\n" + payload)  # a good inline command first: answered in order
        assert recv_reply_line(s) == b"+PONG\r\n"
        line = recv_reply_line(s)
        assert line.startswith(b"-ERR Protocol error: ") and message in line, (payload, line)
        assert closed_by_peer(s), payload
        s.close()
    # A client that announces a huge value and vanishes mid-way costs nothing lasting.
    s = socket.create_connection(("127.0.0.1", daemon.resp_port), timeout=10)
    s.sendall(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$50000000\r\n" + b"x" * 100000)
    s.close()
    assert good.get("survivor") == b"yes"
    assert good.ping() and daemon.alive()
    assert good.get("k") is None


def test_lmcache_native_resp_connector_bytes(daemon):
    """The exact exchanges of LMCache's C++ RedisConnector (csrc/storage_backends/redis/
    connector.cpp, docs/resp.md): AUTH user pass, SET expecting exactly +OK, GET parsed as
    "$<len>\\r\\n" + payload + CRLF or "$-1\\r\\n", EXISTS and DEL expecting :0 / :1."""
    s = socket.create_connection(("127.0.0.1", daemon.resp_port), timeout=10)
    s.sendall(b"*3\r\n$4\r\nAUTH\r\n$7\r\ndefault\r\n$16\r\nsecret-token-123\r\n")
    assert recv_reply_line(s) == b"+OK\r\n"  # authentication off: any token, as natively
    key = b"meta-llama/Llama-3-8B@1@0@" + b"ab" * 32 + b"@bfloat16"
    chunk = os.urandom(2 * 1024 * 1024)
    khead = b"$%d\r\n%s\r\n" % (len(key), key)
    s.sendall(b"*2\r\n$6\r\nEXISTS\r\n" + khead)
    assert recv_exactly(s, 4) == b":0\r\n"
    s.sendall(b"*2\r\n$3\r\nGET\r\n" + khead)
    assert recv_reply_line(s) == b"$-1\r\n"
    s.sendall(b"*3\r\n$3\r\nSET\r\n" + khead + b"$%d\r\n" % len(chunk) + chunk + b"\r\n")
    assert recv_exactly(s, 5) == b"+OK\r\n"
    s.sendall(b"*2\r\n$6\r\nEXISTS\r\n" + khead)
    assert recv_exactly(s, 4) == b":1\r\n"
    s.sendall(b"*2\r\n$3\r\nGET\r\n" + khead)
    assert recv_reply_line(s) == b"$%d\r\n" % len(chunk)
    assert recv_exactly(s, len(chunk)) == chunk
    assert recv_exactly(s, 2) == b"\r\n"
    s.sendall(b"*2\r\n$3\r\nDEL\r\n" + khead)
    assert recv_exactly(s, 4) == b":1\r\n"
    s.sendall(b"*2\r\n$3\r\nDEL\r\n" + khead)
    assert recv_exactly(s, 4) == b":0\r\n"
    s.close()


def test_lmcache_legacy_redis_connector_sequence(daemon):
    """LMCache's legacy `redis://` connector (redis.asyncio): kv_bytes then metadata SETs,
    EXISTS on metadata, two GETs, DELETE of a dangling metadata key."""
    import asyncio
    import redis.asyncio as aredis

    async def run():
        conn = aredis.Redis.from_url(f"redis://127.0.0.1:{daemon.resp_port}")
        key = "vllm@1@0@00ff@bfloat16"
        kv, meta = os.urandom(1 << 20), os.urandom(28)
        assert not await conn.exists(key + "metadata")
        await conn.set(key + "kv_bytes", kv)
        await conn.set(key + "metadata", meta)
        assert await conn.exists(key + "metadata") == 1
        assert await conn.get(key + "metadata") == meta
        assert await conn.get(key + "kv_bytes") == kv
        await conn.delete(key + "kv_bytes")
        assert await conn.get(key + "kv_bytes") is None
        assert await conn.delete(key + "metadata") == 1
        await conn.close()

    asyncio.run(run())


def test_authentication_and_scopes(make_daemon, tmp_path):
    ns = "00112233445566778899aabbccddeeff"
    tokens = tmp_path / "tokens"
    tokens.write_text(f"all-access-token-0001 *\nscoped-token-00000002 ns={ns}\n")
    d = make_daemon("--host-capacity", "64MiB", "--auth-token-file", str(tokens))
    # Nothing but AUTH, HELLO and QUIT before authenticating.
    anon = redis.Redis(port=d.resp_port, socket_timeout=10)
    with pytest.raises(redis.AuthenticationError):
        anon.get("k")
    # redis-py 4 reports WRONGPASS as a ResponseError, later versions as an AuthenticationError.
    with pytest.raises((redis.ResponseError, redis.AuthenticationError), match="WRONGPASS"):
        redis.Redis(port=d.resp_port, password="wrong-token-000000000").ping()
    admin = redis.Redis(port=d.resp_port, password="all-access-token-0001", socket_timeout=10)
    assert admin.set("plain", "v") and admin.get("plain") == b"v"
    # AUTH username token (LMCache's connectors send one) and HELLO 3 AUTH.
    s = socket.create_connection(("127.0.0.1", d.resp_port), timeout=10)
    s.sendall(b"GET plain\r\n")
    assert recv_reply_line(s) == b"-NOAUTH Authentication required.\r\n"
    s.sendall(b"HELLO 3 AUTH default scoped-token-00000002\r\n")
    assert recv_reply_line(s) == b"%7\r\n"
    s.close()
    scoped = redis.Redis(port=d.resp_port, username="default",
                         password="scoped-token-00000002", socket_timeout=10)
    chunk_key = bytes.fromhex(ns) + b"k" * 32  # a 48-byte chunk key in the token's namespace
    assert scoped.set(chunk_key, b"chunk") and scoped.get(chunk_key) == b"chunk"
    with pytest.raises(redis.ResponseError, match="outside the token.s scope"):
        scoped.get("plain")
    with pytest.raises(redis.ResponseError, match="outside the token.s scope"):
        scoped.set("plain", "x")
    assert list(scoped.scan_iter()) == [chunk_key]
    assert scoped.dbsize() == 1 and admin.dbsize() == 2
    assert admin.get("plain") == b"v"


def test_stop_drains(make_daemon):
    d = make_daemon("--host-capacity", "64MiB")
    r = redis.Redis(port=d.resp_port, socket_timeout=10)
    assert r.set("k", "v")
    rc, log = d.stop()
    assert rc == 0, log


def test_sighup_timeouts_reach_resp_connections(make_daemon, tmp_path):
    import queue
    import signal
    import threading
    config = tmp_path / "kvdepot.yaml"
    config.write_text("limits:\n  idle_timeout: 10m\n")
    d = make_daemon("--config", str(config), "--host-capacity", "64MiB")
    lines = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in d.proc.stderr], daemon=True).start()
    s = socket.create_connection(("127.0.0.1", d.resp_port), timeout=10)
    s.sendall(b"PING\r\n")
    assert recv_reply_line(s) == b"+PONG\r\n"
    config.write_text("limits:\n  idle_timeout: 300ms\n")
    d.proc.send_signal(signal.SIGHUP)
    line = ""
    while "connection timeout changed" not in line:
        line = lines.get(timeout=10)
    assert "listeners=native,lm,resp" in line, line
    assert closed_by_peer(s), "the idle resp:// connection was closed under the new timeout"
