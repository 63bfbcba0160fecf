"""kvdepot.lmcache_mp.KvdepotL2Connector against a real kvdepotd, driven the way LMCache's MP mode
drives a `native_plugin` connector.

MpAdapterHarness reproduces, from the LMCache sources pinned in docs/lmcache.md (section 5), what
`_create_native_plugin_l2_adapter` (native_plugin_l2_adapter.py) and NativeConnectorL2Adapter
(native_connector_l2_adapter.py) do with the native object: import module_path, instantiate
class_name(**adapter_params), check the required methods; then one demux thread that poll()s the
connector's eventfd (500 ms), calls drain_completions() and routes each (future_id, ok, error,
result_bools) to store / lookup / load / delete results by the future id recorded at submit (the
submit happens under the adapter's lock), signalling one Python eventfd per category; close()
stops the demux thread, then closes the connector. It is written for this test, not copied:
LMCache's wrapper imports torch-backed modules (MemoryObj, Bitmap, ObjectKey) that this
environment does not have. MemoryObj is replaced by a numpy-backed object with LMCache's
`byte_array` (an itemsize-1 memoryview) and `get_size()`, ObjectKey by a dataclass serialized
with the wrapper's key format.
"""
import dataclasses
import importlib
import os
import select
import signal
import threading
import time

import numpy as np
import pytest

pytest.importorskip("kvdepot", reason="the kvdepot Python module is not built")

ADAPTER = {"module_path": "kvdepot.lmcache_mp", "class_name": "KvdepotL2Connector"}
REQUIRED = ["event_fd", "submit_batch_get", "submit_batch_set", "submit_batch_exists",
            "drain_completions", "close"]
WAIT_S = 10  # bound on every wait in these tests


@dataclasses.dataclass(frozen=True)
class ObjectKey:
    model_name: str
    kv_rank: int
    chunk_hash: bytes
    object_group_id: int = 0
    cache_salt: str = ""

    def wire(self):
        """The wrapper's serialization: model@rank(8 hex)@group(hex)@hash(hex)[@salt]."""
        base = (f"{self.model_name}@{self.kv_rank:08x}@{self.object_group_id:x}"
                f"@{self.chunk_hash.hex()}")
        return f"{base}@{self.cache_salt}" if self.cache_salt else base


class MemoryObj:
    def __init__(self, nbytes, fill=None):
        self.array = np.empty(nbytes, dtype=np.uint8) if fill is None else fill

    @property
    def byte_array(self):
        return memoryview(self.array)

    def get_size(self):
        return self.array.nbytes


def keys_for(n, model="meta-llama/Llama-3.1-8B", salt="", start=0):
    return [ObjectKey(model, 3, (start + i).to_bytes(32, "big"), 0, salt) for i in range(n)]


def random_objects(n, nbytes, seed):
    rng = np.random.default_rng(seed)
    return [MemoryObj(nbytes, rng.integers(0, 256, nbytes, dtype=np.uint8)) for _ in range(n)]


def load_native_plugin(**adapter_params):
    """_create_native_plugin_l2_adapter's loading and validation steps."""
    module = importlib.import_module(ADAPTER["module_path"])
    cls = getattr(module, ADAPTER["class_name"])
    native = cls(**adapter_params)
    for method in REQUIRED:
        if not callable(getattr(native, method, None)):
            native.close()
            raise TypeError(f"missing required method {method}")
    return native


def readable(fd, timeout_s):
    r, _, _ = select.select([fd], [], [], timeout_s)
    return bool(r)


class MpAdapterHarness:
    """NativeConnectorL2Adapter's calling sequence (see the module docstring)."""

    def __init__(self, native):
        self.client = native
        self.client_fd = int(native.event_fd())
        self.efd = {k: os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
                    for k in ("store", "lookup", "load")}
        self.pending = {}  # future id -> (op, task id, keys)
        self.results = {"store": {}, "lookup": {}, "load": {}, "delete": {}}
        self.raw = {}  # task id -> the completion tuple, for assertions
        self.delete_events = {}
        self.locked = {}
        self.next_task = 0
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.unknown_futures = 0
        self.thread = threading.Thread(target=self._demux, daemon=True)
        self.thread.start()

    def _submit(self, op, keys, submit):
        with self.lock:
            task = self.next_task
            self.next_task += 1
            fid = int(submit())
            self.pending[fid] = (op, task, list(keys))
        return task

    def submit_store_task(self, keys, objects):
        wire = [k.wire() for k in keys]
        views = [o.byte_array for o in objects]
        return self._submit("store", keys, lambda: self.client.submit_batch_set(wire, views))

    def submit_lookup_and_lock_task(self, keys):
        wire = [k.wire() for k in keys]
        return self._submit("lookup", keys, lambda: self.client.submit_batch_exists(wire))

    def submit_load_task(self, keys, objects):
        wire = [k.wire() for k in keys]
        views = [o.byte_array for o in objects]
        return self._submit("load", keys, lambda: self.client.submit_batch_get(wire, views))

    def delete(self, keys, timeout=WAIT_S):
        done = threading.Event()
        wire = [k.wire() for k in keys]
        with self.lock:
            task = self.next_task
            self.next_task += 1
            fid = int(self.client.submit_batch_delete(wire))
            self.pending[fid] = ("delete", task, list(keys))
            self.delete_events[task] = done
        assert done.wait(timeout), "delete did not complete"
        return self.results["delete"].pop(task)

    def wait(self, category, task, timeout=WAIT_S):
        """What the store/prefetch controllers do: wait on the category's eventfd, then query."""
        deadline = time.monotonic() + timeout
        while True:
            with self.lock:
                if task in self.results[category]:
                    return self.results[category].pop(task)
            left = deadline - time.monotonic()
            assert left > 0, f"{category} task {task} did not complete within {timeout}s"
            # Several test threads share one eventfd (LMCache has one controller per category),
            # so one may consume another's wake-up: wait in short steps.
            if readable(self.efd[category], min(left, 0.05)):
                try:
                    os.eventfd_read(self.efd[category])
                except BlockingIOError:
                    pass

    def _demux(self):
        poller = select.poll()
        poller.register(self.client_fd, select.POLLIN)
        while not self.stop.is_set():
            if not poller.poll(500):
                continue
            completions = self.client.drain_completions()
            if not completions:
                continue
            with self.lock:
                for fid, ok, error, bools in completions:
                    entry = self.pending.pop(int(fid), None)
                    if entry is None:
                        self.unknown_futures += 1
                        continue
                    op, task, keys = entry
                    self.raw[task] = (ok, error, bools)
                    if op == "store":
                        # Newest wrapper: per-key flags when given; the oldest reads only ok.
                        flags = [bool(b) for b in bools] if bools is not None else [ok] * len(keys)
                        self.results["store"][task] = bool(ok) and all(flags)
                        os.eventfd_write(self.efd["store"], 1)
                    elif op == "lookup":
                        hits = [i for i, f in enumerate(bools or []) if f] if ok else []
                        for i in hits:
                            self.locked[keys[i]] = self.locked.get(keys[i], 0) + 1
                        self.results["lookup"][task] = set(hits)
                        os.eventfd_write(self.efd["lookup"], 1)
                    elif op == "load":
                        if bools is not None:
                            loaded = {i for i, f in enumerate(bools) if f}
                        else:
                            loaded = set(range(len(keys))) if ok else set()
                        self.results["load"][task] = loaded
                        os.eventfd_write(self.efd["load"], 1)
                    elif op == "delete":
                        self.results["delete"][task] = (ok, bools)
                        event = self.delete_events.pop(task, None)
                        if event is not None:
                            event.set()

    def close(self):
        self.stop.set()
        self.thread.join(timeout=5)
        self.client.close()
        for fd in self.efd.values():
            os.close(fd)


@pytest.fixture
def adapter(daemon):
    h = MpAdapterHarness(load_native_plugin(address=daemon.addr, num_workers=3,
                                            timeout_ms=5000))
    yield h
    h.close()


def drain_until(native, futures, timeout=WAIT_S):
    """Raw eventfd protocol: poll the fd, drain, until every future id has completed."""
    done = {}
    deadline = time.monotonic() + timeout
    fd = native.event_fd()
    while set(futures) - set(done):
        left = deadline - time.monotonic()
        assert left > 0, f"futures {sorted(set(futures) - set(done))} never completed"
        if readable(fd, left):
            for fid, ok, error, bools in native.drain_completions():
                assert fid not in done, "a future completed twice"
                done[fid] = (ok, error, bools)
    return done


def test_native_plugin_loading_and_interface(daemon):
    native = load_native_plugin(address=daemon.addr)
    assert callable(native.submit_batch_delete)  # the optional eviction method
    assert isinstance(native.event_fd(), int) and native.event_fd() >= 0
    native.close()
    native.close()  # idempotent
    with pytest.raises(TypeError):
        load_native_plugin(address=daemon.addr, no_such_param=1)
    with pytest.raises(ValueError, match="num_workers"):
        load_native_plugin(address=daemon.addr, num_workers=0)
    from kvdepot.lmcache_mp import l2_adapter_json
    assert '"type": "native_plugin"' in l2_adapter_json(address=daemon.addr)


def test_store_lookup_load_through_the_wrapper_sequence(adapter):
    keys = keys_for(8, salt="tenant-a")
    objs = random_objects(8, 256 * 1024, seed=1)
    assert adapter.wait("store", adapter.submit_store_task(keys, objs)) is True

    absent = keys_for(2, start=1000)
    task = adapter.submit_lookup_and_lock_task(keys + absent)
    assert adapter.wait("lookup", task) == set(range(8))
    assert adapter.locked[keys[0]] == 1

    outs = [MemoryObj(256 * 1024) for _ in range(8)]
    task = adapter.submit_load_task(keys, outs)
    assert adapter.wait("load", task) == set(range(8))
    assert adapter.raw[task][0] is True
    for got, want in zip(outs, objs):
        assert np.array_equal(got.array, want.array)


def test_load_miss_is_per_key_and_fails_ok(adapter):
    keys = keys_for(3, start=50)
    objs = random_objects(3, 4096, seed=2)
    assert adapter.wait("store", adapter.submit_store_task(keys[:2], objs[:2])) is True
    outs = [MemoryObj(4096) for _ in range(3)]
    task = adapter.submit_load_task(keys, outs)
    assert adapter.wait("load", task) == {0, 1}
    ok, error, bools = adapter.raw[task]
    # ok is false on any miss, so a wrapper that reads only ok never uses the missed buffer.
    assert (ok, bools) == (False, [True, True, False])
    assert "1 of 3 keys not found" in error
    assert np.array_equal(outs[1].array, objs[1].array)


def test_raw_eventfd_submit_poll_drain(daemon):
    native = load_native_plugin(address=daemon.addr, num_workers=2)
    fd = native.event_fd()
    assert not readable(fd, 0)
    objs = random_objects(16, 64 * 1024, seed=3)
    wire = [k.wire() for k in keys_for(16, start=200)]
    futures = [native.submit_batch_set(wire[i:i + 4], [o.byte_array for o in objs[i:i + 4]])
               for i in range(0, 16, 4)]
    assert len(set(futures)) == 4
    done = drain_until(native, futures)
    assert all(ok and bools == [True] * 4 for ok, _, bools in done.values())
    assert not readable(fd, 0), "the eventfd stays readable after everything was drained"
    assert native.drain_completions() == []

    f = native.submit_batch_exists(wire + ["absent"])
    ok, error, bools = drain_until(native, [f])[f]
    assert ok and bools == [True] * 16 + [False]
    f = native.submit_batch_get([], [])
    assert drain_until(native, [f])[f] == (True, "", None)
    native.close()


def test_delete_is_per_key(adapter):
    keys = keys_for(2, start=300)
    assert adapter.wait("store", adapter.submit_store_task(keys[:1],
                                                           random_objects(1, 100, 4))) is True
    ok, bools = adapter.delete(keys)
    assert ok is True and bools == [True, False]
    task = adapter.submit_lookup_and_lock_task(keys)
    assert adapter.wait("lookup", task) == set()


def test_error_paths(daemon):
    native = load_native_plugin(address=daemon.addr, key_prefix="mp/")
    wire = [k.wire() for k in keys_for(2, start=400)]
    with pytest.raises(ValueError, match="memoryviews"):
        native.submit_batch_set(wire, [bytearray(10)])
    with pytest.raises(BufferError):
        native.submit_batch_get(wire[:1], [b"read-only bytes"])
    with pytest.raises(TypeError):
        native.submit_batch_exists("one-key-not-a-list")

    f = native.submit_batch_set(wire, [bytearray(b"x" * 1000), bytearray(b"y" * 10)])
    assert drain_until(native, [f])[f][0] is True
    # A buffer of the wrong size: that key fails, the other loads.
    for wrong, message in ((500, "out_of_range"), (2000, "1000 bytes, the buffer 2000")):
        right = bytearray(10)
        f = native.submit_batch_get(wire, [bytearray(wrong), right])
        ok, error, bools = drain_until(native, [f])[f]
        assert (ok, bools) == (False, [False, True]) and message in error
        assert right == bytearray(b"y" * 10)
    # A key over kvdepot's 256-byte limit fails alone.
    f = native.submit_batch_exists([wire[0], "k" * 300])
    ok, error, bools = drain_until(native, [f])[f]
    assert (ok, bools) == (False, [True, False]) and "kvdepot keys are 1..256 bytes" in error
    # Bytes keys work too; one that is not UTF-8 is quoted with replacement characters.
    f = native.submit_batch_exists([b"\xff" * 300])
    ok, error, bools = drain_until(native, [f])[f]
    assert (ok, bools) == (False, [False]) and "\ufffd" in error
    native.close()
    with pytest.raises(RuntimeError, match="closed"):
        native.submit_batch_exists(wire)


def test_unreachable_daemon_fails_fast(tmp_path):
    native = load_native_plugin(address=f"unix:{tmp_path}/no-daemon.sock", num_workers=2)
    f = native.submit_batch_get(["a", "b", "c"], [bytearray(8) for _ in range(3)])
    ok, error, bools = drain_until(native, [f], timeout=5)[f]
    assert (ok, bools) == (False, [False] * 3) and "unavailable" in error
    native.close()


def test_close_with_requests_in_flight(daemon):
    native = load_native_plugin(address=daemon.addr, num_workers=2, timeout_ms=5000)
    objs = random_objects(8, 1 << 20, seed=5)
    wire = [k.wire() for k in keys_for(8, start=500)]
    targets = [[bytearray(1 << 20) for _ in range(8)] for _ in range(12)]
    futures = []
    # The daemon is stopped while the batches are submitted and until close() has begun, so work
    # is still queued when close() is called (on a loaded machine the two workers could otherwise
    # finish all of it first, and there would be nothing left to cancel); it resumes 0.2 s into
    # close(), whose workers then finish the keys in flight and fail the rest as closed.
    os.kill(daemon.proc.pid, signal.SIGSTOP)
    resume = threading.Timer(0.2, os.kill, (daemon.proc.pid, signal.SIGCONT))
    try:
        for round_ in range(12):
            futures.append(native.submit_batch_set(wire, [o.byte_array for o in objs]))
            futures.append(native.submit_batch_get(wire, targets[round_]))
        start = time.monotonic()
        resume.start()
        native.close()
        elapsed = time.monotonic() - start
    finally:
        resume.cancel()
        os.kill(daemon.proc.pid, signal.SIGCONT)
    assert elapsed < 5, "close() waited longer than one I/O timeout"
    # Every submitted batch still has exactly one completion: done, or failed as closed.
    done = drain_until(native, futures, timeout=1)
    cancelled = [e for ok, e, _ in done.values() if not ok and "closed" in e]
    assert len(done) == len(futures)
    assert all(ok or "closed" in e or "not found" in e for ok, e, _ in done.values())
    assert cancelled, "close() let every queued batch run to the end"


def test_daemon_killed_mid_batch_gives_failures_not_a_hang(make_daemon):
    d = make_daemon("--host-capacity", "512MiB")
    h = MpAdapterHarness(load_native_plugin(address=d.addr, num_workers=2, timeout_ms=3000))
    try:
        keys = keys_for(48, start=600)
        objs = random_objects(48, 4 << 20, seed=6)
        assert h.wait("store", h.submit_store_task(keys, objs), timeout=30) is True
        outs = [MemoryObj(4 << 20) for _ in range(48)]
        task = h.submit_load_task(keys, outs)
        d.proc.kill()  # SIGKILL while the 192 MiB load is being received
        d.proc.wait(timeout=WAIT_S)
        loaded = h.wait("load", task)
        ok, error, bools = h.raw[task]
        assert len(loaded) < 48 and ok is False and bools.count(True) == len(loaded)
        for i in loaded:
            assert np.array_equal(outs[i].array, objs[i].array)
        # Later batches fail at once too (nothing listens any more).
        start = time.monotonic()
        assert h.wait("store", h.submit_store_task(keys[:2], objs[:2])) is False
        assert h.wait("lookup", h.submit_lookup_and_lock_task(keys[:4])) == set()
        assert time.monotonic() - start < 5
    finally:
        start = time.monotonic()
        h.close()
        assert time.monotonic() - start < 8


def test_controllers_submit_from_several_threads(adapter):
    errors = []

    def worker(seed):
        try:
            keys = keys_for(4, start=1000 * seed)
            objs = random_objects(4, 32 * 1024, seed)
            for _ in range(5):
                assert adapter.wait("store", adapter.submit_store_task(keys, objs)) is True
                outs = [MemoryObj(32 * 1024) for _ in range(4)]
                assert adapter.wait("load", adapter.submit_load_task(keys, outs)) == set(range(4))
                assert all(np.array_equal(a.array, b.array) for a, b in zip(outs, objs))
        except AssertionError as e:  # reported below, from the main thread
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(1, 5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not errors and not any(t.is_alive() for t in threads)
    assert adapter.unknown_futures == 0


def test_reconnects_after_a_daemon_restart(make_daemon, tmp_path):
    sock = f"{tmp_path}/kvdepotd.sock"
    first = make_daemon("--unix", sock)
    native = load_native_plugin(address=f"unix:{sock}", num_workers=1)
    wire = [k.wire() for k in keys_for(3, start=700)]
    f = native.submit_batch_set(wire, [bytearray(b"v" * 4096) for _ in wire])
    assert drain_until(native, [f])[f][0] is True
    first.proc.kill()
    first.proc.wait(timeout=WAIT_S)
    make_daemon("--unix", sock)  # a new daemon on the same socket, with an empty host tier
    # The worker's pooled connection is dead; the request is retried once on a new one.
    f = native.submit_batch_exists(wire)
    assert drain_until(native, [f])[f] == (True, "", [False] * 3)
    f = native.submit_batch_set(wire, [bytearray(b"w" * 4096) for _ in wire])
    assert drain_until(native, [f])[f] == (True, "", [True] * 3)
    native.close()


def test_lookups_overtake_queued_loads(daemon):
    native = load_native_plugin(address=daemon.addr, num_workers=1)
    objs = random_objects(8, 4 << 20, seed=7)
    outs = [bytearray(4 << 20) for _ in range(4)]
    wire = [k.wire() for k in keys_for(8, start=800)]
    busy = native.submit_batch_set(wire, [o.byte_array for o in objs])
    # The daemon stopped: the one worker cannot finish, so everything below queues behind it.
    daemon.proc.send_signal(signal.SIGSTOP)
    try:
        loads = [native.submit_batch_get(wire[:1], [out]) for out in outs]
        lookup = native.submit_batch_exists(wire)
    finally:
        daemon.proc.send_signal(signal.SIGCONT)
    order = []
    deadline = time.monotonic() + WAIT_S
    while len(order) < 6 and time.monotonic() < deadline:
        if readable(native.event_fd(), 0.1):
            order += [fid for fid, _, _, _ in native.drain_completions()]
    assert set(order) == {busy, lookup, *loads}
    assert order.index(lookup) < min(order.index(f) for f in loads)
    native.close()
