"""kvdepotd's KV events, end to end, as a vLLM-events consumer (llm-d, Dynamo) sees them.

A real kvdepotd publishes; a ZeroMQ SUB socket receives (topic, seq, payload) messages and
decodes each payload with vLLM's schema (vllm/distributed/kv_events.py at the commit pinned in
docs/events.md), re-implemented below as msgspec decodes array_like, tagged structs: a struct is
an array of its fields in declaration order, a tagged one starts with its class name, trailing
fields that have defaults may be missing, and nothing else may be. Checks: PUT announces
BlockStored, DELETE and host-tier eviction announce BlockRemoved, SSD demotion announces
BlockStored on DISK, a restart announces AllBlocksCleared and then the recovered chunks, and a
subscriber that joined late catches up through the replay endpoint. Every wait is bounded.
"""
import hashlib
import os
import re
import signal
import socket
import struct
import subprocess
import time
import urllib.request

import msgpack
import pytest
import zmq

KVDEPOTD = os.environ.get("KVDEPOTD_BIN", "build/bin/kvdepotd")
VALUE = 512 * 1024  # bytes per chunk: a 4 MiB host tier holds about seven


# ---- vLLM's schema (array_like=True, omit_defaults=True, tag=True) ------------------------------

REQUIRED = object()


class Struct:
    FIELDS = ()  # (name, default or REQUIRED), in declaration order

    def __init__(self, **kw):
        self.__dict__.update(kw)

    @classmethod
    def decode(cls, values):
        required = sum(1 for _, d in cls.FIELDS if d is REQUIRED)
        assert required <= len(values) <= len(cls.FIELDS), (cls.__name__, values)
        kw = {name: (values[i] if i < len(values) else default)
              for i, (name, default) in enumerate(cls.FIELDS)}
        return cls(**kw)


class BlockStored(Struct):
    FIELDS = (("block_hashes", REQUIRED), ("parent_block_hash", REQUIRED), ("token_ids", REQUIRED),
              ("block_size", REQUIRED), ("lora_id", REQUIRED), ("medium", REQUIRED),
              ("lora_name", REQUIRED), ("extra_keys", None), ("group_idx", None),
              ("kv_cache_spec_kind", None), ("kv_cache_spec_sliding_window", None))


class BlockRemoved(Struct):
    FIELDS = (("block_hashes", REQUIRED), ("medium", REQUIRED), ("group_idx", None))


class AllBlocksCleared(Struct):
    FIELDS = ()


TAGS = {c.__name__: c for c in (BlockStored, BlockRemoved, AllBlocksCleared)}


class KVEventBatch(Struct):
    FIELDS = (("ts", REQUIRED), ("events", REQUIRED), ("data_parallel_rank", None))


def decode_batch(payload):
    batch = KVEventBatch.decode(msgpack.unpackb(payload, raw=False))
    assert isinstance(batch.ts, float)
    events = []
    for e in batch.events:
        assert isinstance(e, list) and e and e[0] in TAGS, e
        events.append(TAGS[e[0]].decode(e[1:]))
    batch.events = events
    return batch


# ---- kvdepot's native protocol (docs/protocol.md), just what the test needs --------------------

HEADER = struct.Struct("<4sBBHQIHH")
PUT, LOOKUP, DELETE, EVENT_ORIGIN = 2, 4, 5, 13


class Native:
    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.next_id = 1

    def call(self, op, body):
        rid = self.next_id
        self.next_id += 1
        self.sock.sendall(HEADER.pack(b"KVDP", 1, op, 0, rid, len(body), 0, 0) + body)
        head = self._read(HEADER.size)
        _, _, typ, _, got_id, length, status, _ = HEADER.unpack(head)
        assert typ == op | 0x80 and got_id == rid
        return status, self._read(length)

    def _read(self, n):
        out = b""
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            assert chunk, "connection closed"
            out += chunk
        return out

    def put(self, key, value):
        body = struct.pack("<IH", 1, len(key)) + key + struct.pack("<Q", len(value)) + value
        status, resp = self.call(PUT, body)
        assert status == 0 and resp == struct.pack("<IH", 1, 0), (status, resp)

    @staticmethod
    def _keys(keys):
        return struct.pack("<I", len(keys)) + b"".join(struct.pack("<H", len(k)) + k for k in keys)

    def delete(self, key):
        status, resp = self.call(DELETE, self._keys([key]))
        assert status == 0
        return struct.unpack("<IH", resp)[1] == 0

    def tiers(self, keys):
        """The tier of each key: 0 absent, 2 host, 3 ssd."""
        status, resp = self.call(LOOKUP, self._keys(keys))
        assert status == 0
        return list(resp[8:8 + len(keys)])

    def set_origin(self, namespace_id, instance, model):
        body = (namespace_id + struct.pack("<H", len(instance)) + instance +
                struct.pack("<H", len(model)) + model)
        return self.call(EVENT_ORIGIN, body)


def chunk_key(ns, i):
    """A 48-byte chunk key: namespace id (16 bytes) + a 32-byte chain value."""
    return ns + hashlib.sha256(ns + i.to_bytes(4, "little")).digest()


# ---- the daemon and the subscriber ----------------------------------------------------------


class Daemon:
    def __init__(self, tmp_path, *flags):
        self.proc = subprocess.Popen(
            [KVDEPOTD, "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0",
             "--data-dir", str(tmp_path / "data"), "--host-capacity", "4MiB",
             "--limits-max-value-bytes", "1MiB", "--events-publish", "tcp://127.0.0.1:*",
             "--events-replay", "tcp://127.0.0.1:*", *flags],
            stderr=subprocess.PIPE, text=True)
        self.port = self.publish = self.replay = self.metrics = self.lm_port = None
        deadline = time.time() + 10
        while self.port is None and time.time() < deadline:
            line = self.proc.stderr.readline()
            assert line or self.proc.poll() is None, "kvdepotd exited early"
            if m := re.search(r'kv events on ([^\s"]+)', line):
                self.publish = m.group(1)
                self.replay = re.search(r'replay=([^\s"]+)', line).group(1)
            if m := re.search(r"metrics=http://(\S+)", line):
                self.metrics = "http://" + m.group(1)
            if m := re.search(r"lm:// \(LMCache protocol\) on 127\.0\.0\.1:(\d+)", line):
                self.lm_port = int(m.group(1))
            if m := re.search(r"listening on 127\.0\.0\.1:(\d+)", line):
                self.port = int(m.group(1))
        if "--lm-listen" in flags:  # logged after the native listener
            while self.lm_port is None and time.time() < deadline:
                if m := re.search(r"lm:// \(LMCache protocol\) on 127\.0\.0\.1:(\d+)",
                                  self.proc.stderr.readline()):
                    self.lm_port = int(m.group(1))
        assert self.port and self.publish and self.replay, "kvdepotd did not report its endpoints"

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        assert self.proc.wait(timeout=20) == 0

    def metric(self, name):
        text = urllib.request.urlopen(self.metrics, timeout=5).read().decode()
        return float(re.search(r"^" + name + r" (\S+)$", text, re.M).group(1))


class Subscriber:
    def __init__(self, ctx, daemon):
        self.daemon = daemon
        self.sub = ctx.socket(zmq.SUB)
        self.sub.setsockopt(zmq.LINGER, 0)
        self.sub.setsockopt(zmq.SUBSCRIBE, b"kv")
        self.sub.connect(daemon.publish)
        self.messages = []  # (topic, seq, batch, payload)

    def receive(self, timeout_s=5.0):
        if not self.sub.poll(int(timeout_s * 1000)):
            return None
        topic, seq, payload = self.sub.recv_multipart()
        assert len(seq) == 8
        m = (topic.decode(), int.from_bytes(seq, "big", signed=True), decode_batch(payload),
             payload)
        self.messages.append(m)
        return m

    def wait_for(self, predicate, what, timeout_s=10.0):
        """Receives until predicate(all events so far) holds."""
        deadline = time.time() + timeout_s
        while not predicate(self.events()):
            left = deadline - time.time()
            assert left > 0, "timed out waiting for " + what
            self.receive(left)

    def events(self):
        return [(topic, e) for topic, _, batch, _ in self.messages for e in batch.events]

    def join(self, native, ns):
        """PUTs probe chunks until one is seen: PUB/SUB connects asynchronously."""
        for i in range(200):
            key = chunk_key(ns, 1_000_000 + i)
            native.put(key, b"p")
            if self.receive(0.05) is not None:
                return
        pytest.fail("the subscriber never received an event")


def replay(ctx, daemon, start):
    """vLLM's replay protocol from a DEALER (a REQ's envelope: an empty frame, then the start)."""
    dealer = ctx.socket(zmq.DEALER)
    dealer.setsockopt(zmq.LINGER, 0)
    dealer.connect(daemon.replay)
    dealer.send_multipart([b"", start.to_bytes(8, "big")])
    out = []
    while True:
        assert dealer.poll(5000), "replay answer timed out"
        empty, seq, payload = dealer.recv_multipart()
        assert empty == b""
        seq = int.from_bytes(seq, "big", signed=True)
        if seq == -1:
            assert payload == b""
            dealer.close()
            return out
        out.append((seq, payload))


def stored(events, medium):
    return [h for _, e in events if isinstance(e, BlockStored) and e.medium == medium
            for h in e.block_hashes]


def removed(events, medium):
    return [h for _, e in events if isinstance(e, BlockRemoved) and e.medium == medium
            for h in e.block_hashes]


@pytest.fixture
def ctx():
    c = zmq.Context()
    yield c
    c.destroy(linger=0)  # closes the sockets the test left open


@pytest.fixture
def daemons():
    started = []
    yield started
    for d in started:
        if d.proc.poll() is None:
            d.proc.kill()
            d.proc.wait()


NS = hashlib.sha256(b"test namespace").digest()[:16]
PROBE_NS = hashlib.sha256(b"probe namespace").digest()[:16]


def test_put_delete_eviction_and_late_replay(tmp_path, ctx, daemons):
    d = Daemon(tmp_path)
    daemons.append(d)
    native = Native(d.port)
    sub = Subscriber(ctx, d)
    sub.join(native, PROBE_NS)

    # The origin the client declares names the topic; the daemon adds nothing of its own.
    assert native.set_origin(NS, b"pod-a", b"meta-llama/Llama-3.1-8B") == (0, b"")
    status, message = native.set_origin(NS, b"pod@a", b"m")
    assert status == 1 and b"'@'" in message  # invalid_argument: '@' separates topic fields

    keys = [chunk_key(NS, i) for i in range(3)]
    for k in keys:
        native.put(k, b"v" * VALUE)
    sub.wait_for(lambda ev: set(k[16:] for k in keys) <= set(stored(ev, "CPU")), "3 stored")
    for topic, e in sub.events():
        if isinstance(e, BlockStored) and e.block_hashes[0] in [k[16:] for k in keys]:
            assert topic == "kv@pod-a@meta-llama/Llama-3.1-8B"
            assert e.block_size == 256 and e.token_ids == [] and e.parent_block_hash is None
            assert e.lora_id is None and e.lora_name is None

    # DELETE: removed from the host tier.
    assert native.delete(keys[0])
    sub.wait_for(lambda ev: keys[0][16:] in removed(ev, "CPU"), "the DELETE's removal")

    # Eviction: 12 more chunks into a tier that holds about seven.
    more = [chunk_key(NS, 100 + i) for i in range(12)]
    for k in more:
        native.put(k, b"w" * VALUE)
    sub.wait_for(lambda ev: more[-1][16:] in stored(ev, "CPU"), "the last PUT")
    sub.wait_for(lambda ev: keys[1][16:] in removed(ev, "CPU"), "an eviction")

    # The announced state is the daemon's state: every chunk announced and not removed since is
    # readable, every other one is not.
    every = keys + more
    net = {}
    for _, e in sub.events():
        for h in getattr(e, "block_hashes", []):
            net[h] = isinstance(e, BlockStored)
    assert [2 if net.get(k[16:]) else 0 for k in every] == native.tiers(every)

    # Sequence numbers increase by one per message.
    seqs = [seq for _, seq, _, _ in sub.messages]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))

    # A subscriber that joins now asks the replay endpoint for everything since the start:
    # AllBlocksCleared first (a new process), then exactly the payloads the first one received.
    late = replay(ctx, d, 0)
    assert [s for s, _ in late] == list(range(len(late)))
    first = decode_batch(late[0][1])
    assert isinstance(first.events[0], AllBlocksCleared)
    by_seq = dict(late)
    for _, seq, _, payload in sub.messages:
        assert by_seq[seq] == payload
    # ... or from a sequence number in the middle, after a gap.
    middle = seqs[len(seqs) // 2]
    assert [s for s, _ in replay(ctx, d, middle)] == [s for s in by_seq if s >= middle]

    assert d.metric("kvdepot_events_dropped_total") == 0
    assert d.metric("kvdepot_events_replay_requests_total") == 2
    d.stop()


def test_ssd_demotion_restart_and_recovered_announcements(tmp_path, ctx, daemons):
    ssd = ["--ssd-dir", str(tmp_path / "ssd"), "--ssd-segment-size", "2MiB",
           "--ssd-capacity", "64MiB"]
    d = Daemon(tmp_path, *ssd)
    daemons.append(d)
    native = Native(d.port)
    sub = Subscriber(ctx, d)
    sub.join(native, PROBE_NS)
    keys = [chunk_key(NS, i) for i in range(16)]
    for k in keys:
        native.put(k, b"s" * VALUE)
    # Write-back: what the host tier evicts is written to the SSD tier and announced there.
    sub.wait_for(lambda ev: keys[0][16:] in stored(ev, "DISK"), "a demotion")
    assert keys[0][16:] in removed(sub.events(), "CPU")

    # DELETE of a chunk on the SSD tier: removed from DISK.
    assert native.delete(keys[0])
    sub.wait_for(lambda ev: keys[0][16:] in removed(ev, "DISK"), "the SSD removal")

    d.stop()  # SIGTERM completes queued SSD writes; their announcements go out before exit
    while sub.receive(0.5) is not None:
        pass
    on_disk = {}
    for _, e in sub.events():
        if getattr(e, "medium", None) == "DISK":
            for h in e.block_hashes:
                on_disk[h] = isinstance(e, BlockStored)
    announced = {h for h, present in on_disk.items() if present}
    assert len(announced) >= 8, "the SSD tier should hold most of the 16 chunks"

    # The restarted daemon: sequence numbers start again at 0 with AllBlocksCleared, followed by
    # one BlockStored on DISK per recovered chunk, which a subscriber reads through replay.
    d2 = Daemon(tmp_path, *ssd)
    daemons.append(d2)
    recovered = []
    deadline = time.time() + 10
    while True:
        batches = [decode_batch(p) for _, p in replay(ctx, d2, 0)]
        events = [e for b in batches for e in b.events]
        recovered = [h for e in events if isinstance(e, BlockStored) for h in e.block_hashes]
        if events and len(recovered) >= len(announced):
            break
        assert time.time() < deadline, "the recovered chunks were not announced"
        time.sleep(0.05)
    assert isinstance(events[0], AllBlocksCleared)
    assert all(e.medium == "DISK" for e in events[1:])
    assert set(recovered) == announced
    d2.stop()


def test_bad_endpoint_settings_stop_the_start():
    rc = subprocess.run([KVDEPOTD, "--listen", "127.0.0.1:0", "--events-publish", "udp://1.2.3.4:5"],
                        capture_output=True, text=True, timeout=10)
    assert rc.returncode == 2
    assert "flag --events-publish (events.publish)" in rc.stderr
    rc = subprocess.run([KVDEPOTD, "--listen", "127.0.0.1:0", "--events-replay", "tcp://127.0.0.1:5"],
                        capture_output=True, text=True, timeout=10)
    assert rc.returncode == 2 and "events.replay is set without events.publish" in rc.stderr


def test_lmcache_keys_carry_their_model_and_chunk_hash(tmp_path, ctx, daemons):
    """A chunk PUT over lm:// (LMCache's protocol, docs/lmcache.md): its CacheEngineKey names the
    model and the chunk hash (hex), which the event carries; LMCache's key has no instance."""
    d = Daemon(tmp_path, "--lm-listen", "127.0.0.1:0")
    daemons.append(d)
    native = Native(d.port)
    sub = Subscriber(ctx, d)
    sub.join(native, PROBE_NS)
    lm = socket.create_connection(("127.0.0.1", d.lm_port), timeout=10)
    key = b"vllm@meta-llama/Llama-3.1-8B@1@0@-1a2b3c@bfloat16"
    payload = b"x" * 4096
    # LMCache's request header: command, length, fmt, dtype, location, shape[4], key (150 bytes).
    lm.sendall(struct.pack("iiiiiiiii150s", 1, len(payload), 1, 2, 0, 0, 0, 0, 0,
                           key.ljust(150)) + payload)
    sub.wait_for(lambda ev: any(isinstance(e, BlockStored) and e.block_hashes == [-0x1a2b3c]
                                for _, e in ev), "the lm:// chunk")
    topic = next(t for t, e in sub.events()
                 if isinstance(e, BlockStored) and e.block_hashes == [-0x1a2b3c])
    assert topic == "kv@@meta-llama/Llama-3.1-8B"
    lm.close()
    d.stop()
