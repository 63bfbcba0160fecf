"""kvdepotd's lm:// listener against a client written from LMCache's wire description: every
command, key and length edge cases, hostile clients, concurrency, and capacity that holds."""
import os
import signal
import socket
import struct
import threading
import time

import pytest

from lm_wire import (EXIST, FAIL, GET, HEALTH, PUT, SUCCESS, LegacyLmClient, LmClient,
                     client_header, legacy_client_header, native_stats)


def test_every_command_and_metadata_echo(daemon):
    c = LmClient(daemon.lm_port)
    assert c.health()
    key = "vllm@1@0@8b9f1e2d3c4b5a69@bfloat16"
    assert not c.exists(key)
    miss = c.get(key)
    assert miss["code"] == FAIL and miss["length"] == 0
    payload = os.urandom(4 * 1024 * 1024 + 13)
    c.put(key, payload, fmt=1, dtype=3, location=1, shape=(2, 32, 256, 1024))
    assert c.exists(key)
    r = c.get(key)
    assert r["code"] == SUCCESS and r["length"] == len(payload) and r["data"] == payload
    assert (r["fmt"], r["dtype"], r["location"], r["shape"]) == (1, 3, 1, (2, 32, 256, 1024))
    c.put("second", b"x" * 10, fmt=5, dtype=8, shape=(7, 0, 0, 0))
    assert sorted(c.list()) == [b"second", key.encode()]
    r = c.get("second")
    assert (r["fmt"], r["dtype"], r["shape"], bytes(r["data"])) == (5, 8, (7, 0, 0, 0), b"x" * 10)
    # A PUT replaces; an empty payload is a value too.
    c.put(key, b"")
    r = c.get(key)
    assert r["code"] == SUCCESS and r["length"] == 0 and r["fmt"] == 1
    assert c.health()
    c.close()
    stats = native_stats(daemon.port)["tiers"]["host"]
    assert stats["chunks"] == 2  # the same Store as the native protocol


def test_keys_of_exactly_150_bytes_and_whitespace_padding(daemon):
    c = LmClient(daemon.lm_port)
    k150 = ("k" * 149 + "Z").encode()
    assert len(k150) == 150
    c.put(k150, b"full-length key")
    assert bytes(c.get(k150)["data"]) == b"full-length key"
    assert not c.exists(k150[:149])  # a different key
    # The key field is space padded; trailing (and leading) whitespace is not part of the key,
    # as in LMCache's server (key.decode().strip()).
    c.put(b"  padded\t", b"p")
    assert c.exists(b"padded")
    # A blank key is never stored; its payload is consumed and the connection keeps working.
    c.put(b"", b"dropped")
    assert not c.exists(b"")
    assert c.health()
    assert k150 in c.list()
    c.close()


def test_unknown_command_gets_400_and_a_closed_connection(daemon):
    for command in (0, 6, 99, -1):
        c = LmClient(daemon.lm_port)
        c.sock.sendall(client_header(command, "k"))
        assert c.reply()["code"] == FAIL
        assert c.sock.recv(1) == b""  # closed
        c.close()
    assert LmClient(daemon.lm_port).health()


@pytest.mark.parametrize("length", [-1, -2**31])
def test_negative_put_length_closes_only_that_connection(daemon, length):
    bystander = LmClient(daemon.lm_port)
    c = LmClient(daemon.lm_port)
    c.sock.sendall(client_header(PUT, "k", length))
    assert c.reply()["code"] == FAIL
    assert c.sock.recv(1) == b""
    assert bystander.health() and daemon.alive()


def test_put_over_the_limit_is_read_and_dropped_and_the_connection_kept(make_daemon):
    # LMCache's client neither expects a reply to PUT nor reconnects after a broken pipe: an
    # oversized chunk must cost that chunk only, never the engine's remote backend.
    d = make_daemon("--lm-max-value-bytes", "1MiB")
    for client in (LmClient(d.lm_port), LegacyLmClient(d.lm_port)):
        client.put("big", os.urandom(1024 * 1024 + 1))
        client.put("fits", b"f" * (1024 * 1024))
        assert not client.exists("big")
        assert client.exists("fits")
        client.close()
    assert LmClient(d.lm_port).health()
    rc, err = d.stop()
    assert rc == 0
    assert "over lm.max_value_bytes" in err and "--lm-max-value-bytes" in err


def test_the_default_limit_holds_a_70b_chunk(daemon):
    c = LmClient(daemon.lm_port)
    chunk = os.urandom(80 * 1024 * 1024)  # Llama-3.1-70B: 80 MiB of fp16 KV per 256 tokens
    c.put("llama-70b-chunk", chunk, dtype=3, shape=(2, 80, 256, 1024))
    r = c.get("llama-70b-chunk")
    assert r["code"] == SUCCESS and bytes(r["data"]) == chunk
    c.close()


def test_legacy_wire_is_detected_and_shares_values_with_the_current_one(daemon):
    old = LegacyLmClient(daemon.lm_port)
    new = LmClient(daemon.lm_port)
    key = "vllm@1@0@0123456789abcdef@bfloat16"
    assert not old.exists(key)
    assert old.get(key)["code"] == FAIL
    payload = os.urandom(3 * 1024 * 1024 + 7)
    old.put(key, payload, fmt=1, dtype=3, shape=(2, 32, 256, 1024))
    r = old.get(key)
    assert r["code"] == SUCCESS and bytes(r["data"]) == payload
    assert (r["fmt"], r["dtype"], r["shape"]) == (1, 3, (2, 32, 256, 1024))
    assert old.list() == [key.encode()]
    # The same value through the current layout: location 0 (the legacy layout has none).
    r = new.get(key)
    assert r["code"] == SUCCESS and bytes(r["data"]) == payload and r["location"] == 0
    new.put("from-new", b"n" * 100, dtype=4, location=1, shape=(100, 0, 0, 0))
    assert new.exists("from-new")  # orders the reply-less PUT before the GET on `old`
    r = old.get("from-new")
    assert (r["dtype"], r["shape"], bytes(r["data"])) == (4, (100, 0, 0, 0), b"n" * 100)
    old.put("k", b"1")
    assert old.exists("k")  # stored before the fresh connections ask for it
    # Detection reads bytes 32..35 of a connection's first request, key bytes in the legacy
    # layout: a one-byte key (then space padding) and an empty key are detected too.
    for first_key in ("k", ""):
        fresh = LegacyLmClient(daemon.lm_port)
        assert fresh.exists(first_key) == (first_key == "k")
        assert bytes(fresh.get("k")["data"]) == b"1"
        fresh.close()
    assert new.exists("k")
    assert native_stats(daemon.port)["tiers"]["host"]["chunks"] == 3
    old.close()
    new.close()


def test_the_v0_protocol_is_refused_at_once(daemon):
    # LMCache's v0 remote protocol: "ii150s" (command, length, key), pickled tensors.
    c = LmClient(daemon.lm_port)
    start = time.monotonic()
    c.sock.sendall(struct.pack("ii150s", EXIST, 0, b"vllm@1@0@abc".ljust(150)))
    assert c.sock.recv(1) == b""  # closed, not left waiting for 28 more bytes
    assert time.monotonic() - start < 5
    assert LmClient(daemon.lm_port).health() and daemon.alive()


@pytest.mark.parametrize("mode", ["current", "legacy"])
def test_an_excluded_wire_is_refused_at_once_with_a_logged_reason(make_daemon, mode):
    d = make_daemon("--lm-wire", mode)
    excluded = LegacyLmClient(d.lm_port) if mode == "current" else LmClient(d.lm_port)
    served = LmClient(d.lm_port) if mode == "current" else LegacyLmClient(d.lm_port)
    start = time.monotonic()
    assert not excluded.exists("k")  # a 400 in the client's own layout, not a 30 s hang
    assert time.monotonic() - start < 5
    assert excluded.sock.recv(1) == b""
    served.put("k", b"v")
    assert served.exists("k")
    rc, err = d.stop()
    assert rc == 0
    assert "lm.wire is " + mode in err and "lm.wire: auto" in err


def test_partial_header_and_partial_payload_close_quietly(daemon):
    c = LmClient(daemon.lm_port)
    c.sock.sendall(client_header(HEALTH)[:100])
    c.sock.shutdown(socket.SHUT_WR)
    assert c.sock.recv(1) == b""
    c = LmClient(daemon.lm_port)
    c.sock.sendall(client_header(PUT, "cut", 1000) + b"y" * 10)
    c.close()
    c = LmClient(daemon.lm_port)
    assert not c.exists("cut")  # a payload cut short is never stored
    # Garbage of every size up to two headers.
    for n in (1, 185, 186, 187, 300):
        g = LmClient(daemon.lm_port)
        g.sock.sendall(os.urandom(n))
        g.close()
    assert c.health() and daemon.alive()


def test_concurrent_clients(daemon):
    errors = []

    def worker(t):
        try:
            c = LmClient(daemon.lm_port)
            for i in range(40):
                key = f"t{t}-{i}"
                data = struct.pack("<II", t, i) * 2048
                c.put(key, data, dtype=t, shape=(t, i, 0, 0))
                r = c.get(key)
                assert r["code"] == SUCCESS and bytes(r["data"]) == data
                assert r["shape"] == (t, i, 0, 0) and r["dtype"] == t
                assert c.exists(key)
            c.close()
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors
    assert len(LmClient(daemon.lm_port).list()) == 8 * 40


def test_capacity_holds_and_refused_puts_are_consumed(make_daemon):
    d = make_daemon("--host-capacity", "16MiB", "--limits-max-value-bytes", "8MiB",
                    "--lm-max-value-bytes", "32MiB")
    c = LmClient(d.lm_port)
    rss_start = d.rss_bytes()
    chunk = os.urandom(4 * 1024 * 1024)
    for i in range(40):  # 160 MiB through a 16 MiB tier
        c.put(f"chunk-{i}", chunk, shape=(i, 0, 0, 0))
    # Larger than the whole tier: read and dropped, the connection keeps working.
    c.put("too-big", b"z" * (20 * 1024 * 1024))
    assert c.health()
    assert not c.exists("too-big")
    r = c.get("chunk-39")  # the most recent chunk survived eviction
    assert r["code"] == SUCCESS and bytes(r["data"]) == chunk and r["shape"] == (39, 0, 0, 0)
    assert not c.exists("chunk-0")  # the oldest was evicted
    host = native_stats(d.port)["tiers"]["host"]
    assert host["bytes"] <= host["capacity"] == 16 * 1024 * 1024
    assert host["evictions"] > 0
    if not os.environ.get("KVDEPOT_SANITIZE"):  # ASan keeps freed memory in quarantine
        assert d.rss_bytes() - rss_start < 64 * 1024 * 1024
    c.close()
    rc, _ = d.stop()
    assert rc == 0


def test_lm_and_native_share_the_store_but_not_the_namespace(daemon):
    c = LmClient(daemon.lm_port)
    c.put("shared", b"from lmcache")
    assert c.exists("shared")  # orders the reply-less PUT before the listing on another connection
    # Through kvdepot's own protocol the chunk is listed under the lmcache namespace prefix.
    import subprocess
    cli = os.path.join(os.path.dirname(os.environ.get("KVDEPOTD_BIN", "build/bin/kvdepotd")),
                       "kvdepot")
    out = subprocess.run([cli, "--addr", daemon.addr, "ls"], capture_output=True, timeout=30)
    assert out.returncode == 0
    assert b"shared" in out.stdout or b"736861726564" in out.stdout  # raw or hex-printed key
    c.close()


def test_sigterm_with_lm_clients_connected_exits_cleanly(daemon):
    idle = LmClient(daemon.lm_port)
    busy = LmClient(daemon.lm_port)
    busy.sock.sendall(client_header(PUT, "late", 1 << 20) + b"a" * 1000)  # mid-payload
    time.sleep(0.1)
    daemon.proc.send_signal(signal.SIGTERM)
    assert idle.sock.recv(1) == b""  # idle connections close at once
    busy.sock.sendall(b"a" * ((1 << 20) - 1000))  # the request in flight is finished...
    assert busy.sock.recv(1) == b""  # ...then its connection closes
    assert daemon.proc.wait(timeout=20) == 0
