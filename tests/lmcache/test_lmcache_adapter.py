"""kvdepot.lmcache_connector loaded the way LMCache loads a remote-storage plugin (the fake
LMCache in fake_lmcache/ mirrors ConnectorManager's discovery), then driven through LMCache's
RemoteConnector interface; chunks are shared with the lm:// listener."""
import asyncio

import pytest

pytest.importorskip("kvdepot", reason="the kvdepot Python module is not built")

from lmcache.v1.memory_management import LocalCPUBackend, MemoryFormat  # noqa: E402 (fake)
from lmcache.v1.storage_backend.connector import Config, CreateConnector  # noqa: E402 (fake)
from lm_wire import SUCCESS, LmClient  # noqa: E402


class Key:
    """LMCache's CacheEngineKey as far as a connector sees it."""

    def __init__(self, chunk_hash):
        self.text = f"meta-llama/Llama-3.1-8B@1@0@{chunk_hash:x}@bfloat16"

    def to_string(self):
        return self.text


def plugin_config(**extra):
    return Config(["kvdepot"], {
        "remote_storage_plugin.kvdepot.module_path": "kvdepot.lmcache_connector",
        "remote_storage_plugin.kvdepot.class_name": "KvdepotConnectorAdapter",
        **extra})


def test_plugin_discovery_and_the_remote_connector_interface(daemon):
    async def scenario():
        loop = asyncio.get_running_loop()
        backend = LocalCPUBackend()
        conn = CreateConnector(f"kvdepot://127.0.0.1:{daemon.port}", loop, backend,
                               plugin_config())
        assert conn.support_ping() and await conn.ping() == 0
        key = Key(0xabc)
        assert not await conn.exists(key) and not conn.exists_sync(key)
        assert await conn.get(key) is None
        obj = backend.allocate((2, 4, 256, 128), "bfloat16", MemoryFormat.KV_2LTD)
        obj.buffer[:] = bytes(range(256)) * (len(obj.buffer) // 256)
        await conn.put(key, obj)
        assert await conn.exists(key)
        got = await conn.get(key)
        assert got is not None and got is not obj
        assert got.get_shape() == (2, 4, 256, 128) and got.get_dtype() == "bfloat16"
        assert got.get_memory_format() == MemoryFormat.KV_2LTD
        assert bytes(got.buffer) == bytes(obj.buffer)
        await conn.put(Key(1), backend.allocate((1, 1, 16, 8), "float16", MemoryFormat.KV_2LTD))
        assert sorted(await conn.list()) == sorted([key.to_string(), Key(1).to_string()])
        assert conn.support_batched_contains()
        assert conn.batched_contains([key, Key(1), Key(2), key]) == [True, True, False, False]
        assert conn.batched_contains([key, Key(2), Key(1)], False) == [True, False, True]
        assert conn.remove_sync(Key(1)) and not conn.remove_sync(Key(1))
        # The allocator running out of memory is a miss, not an error.
        full = CreateConnector(f"kvdepot://127.0.0.1:{daemon.port}", loop, LocalCPUBackend(16),
                               plugin_config())
        assert await full.get(key) is None
        await full.close()
        await conn.close()
    asyncio.run(scenario())


def test_chunks_are_shared_with_the_lm_listener(daemon):
    async def scenario():
        backend = LocalCPUBackend()
        conn = CreateConnector(f"kvdepot://127.0.0.1:{daemon.port}",
                               asyncio.get_running_loop(), backend, plugin_config())
        obj = backend.allocate((2, 2, 16, 64), "float16", MemoryFormat.KV_2LTD)
        obj.buffer[:] = b"\x07" * len(obj.buffer)
        await conn.put(Key(5), obj)
        lm = LmClient(daemon.lm_port)
        r = lm.get(Key(5).to_string())
        assert r["code"] == SUCCESS and bytes(r["data"]) == bytes(obj.buffer)
        assert (r["fmt"], r["dtype"], r["shape"]) == (1, 2, (2, 2, 16, 64))
        lm.put(Key(6).to_string(), b"\x01" * 512, fmt=1, dtype=3, shape=(1, 2, 4, 32))
        # An lm:// PUT has no reply; an EXIST on the same connection is answered only after the
        # PUT before it was stored, so it orders the PUT before the read on the other connection.
        assert lm.exists(Key(6).to_string())
        got = await conn.get(Key(6))
        assert got.get_shape() == (1, 2, 4, 32) and got.get_dtype() == "bfloat16"
        assert bytes(got.buffer) == b"\x01" * 512
        lm.close()
        await conn.close()
    asyncio.run(scenario())


def test_namespace_option_separates_deployments(daemon):
    async def scenario():
        loop = asyncio.get_running_loop()
        backend = LocalCPUBackend()
        a = CreateConnector(f"kvdepot://127.0.0.1:{daemon.port}", loop, backend, plugin_config())
        b = CreateConnector(f"kvdepot://127.0.0.1:{daemon.port}", loop, backend,
                            plugin_config(**{"remote_storage_plugin.kvdepot.namespace": "staging"}))
        await a.put(Key(9), backend.allocate((1, 1, 1, 8), "uint8", MemoryFormat.KV_2LTD))
        assert await a.exists(Key(9)) and not await b.exists(Key(9))
        assert await b.list() == []
        await a.close()
        await b.close()
    asyncio.run(scenario())


def test_urls():
    from kvdepot.lmcache_connector import KvdepotConnectorAdapter, address_from_url
    assert address_from_url("kvdepot://127.0.0.1:7600") == "127.0.0.1:7600"
    assert address_from_url("kvdepot://[::1]:7600") == "[::1]:7600"
    assert address_from_url("kvdepot://unix/run/kvdepotd.sock") == "unix:/run/kvdepotd.sock"
    with pytest.raises(ValueError):
        address_from_url("kvdepot://host-without-port")
    adapter = KvdepotConnectorAdapter()
    assert adapter.can_parse("kvdepot://h:1") and not adapter.can_parse("lm://h:1")
    assert adapter.can_parse("plugin://kvdepot") and adapter.can_parse("plugin://kvdepot.b")
    assert not adapter.can_parse("plugin://fs")


def test_plugin_url_without_remote_url(daemon):
    """LMCache's newer form: no remote_url; the plugin is addressed as plugin://<name> and reads
    its address from extra_config."""
    async def scenario():
        backend = LocalCPUBackend()
        config = Config(["kvdepot.a"], {
            "remote_storage_plugin.kvdepot.a.module_path": "kvdepot.lmcache_connector",
            "remote_storage_plugin.kvdepot.a.class_name": "KvdepotConnectorAdapter",
            "remote_storage_plugin.kvdepot.a.address": daemon.addr,
            "remote_storage_plugin.kvdepot.a.pool_size": "2"})
        conn = CreateConnector("plugin://kvdepot.a", asyncio.get_running_loop(), backend, config,
                               plugin_name="kvdepot.a")
        await conn.put(Key(3), backend.allocate((1, 1, 4, 4), "float32", MemoryFormat.KV_2LTD))
        assert await conn.exists(Key(3)) and await conn.ping() == 0
        await conn.close()
    asyncio.run(scenario())
