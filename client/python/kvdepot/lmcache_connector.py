"""kvdepot as an LMCache remote-storage plugin.

LMCache (lmcache/v1/storage_backend/connector/__init__.py, ConnectorManager) loads each name in
`remote_storage_plugins` by importing `extra_config["remote_storage_plugin.<name>.module_path"]`
and taking `...class_name`; a ConnectorAdapter subclass is instantiated with no arguments, and the
first adapter whose can_parse(url) is true creates the connector. The URL is `remote_url`
(deprecated in LMCache) or `plugin://<name>`:

    remote_storage_plugins: ["kvdepot"]
    extra_config:
      remote_storage_plugin.kvdepot.module_path: kvdepot.lmcache_connector
      remote_storage_plugin.kvdepot.class_name: KvdepotConnectorAdapter
      remote_storage_plugin.kvdepot.address: "127.0.0.1:7600"   # or unix:/path/kvdepotd.sock
      remote_storage_plugin.kvdepot.namespace: lmcache          # optional: key namespace name
      remote_storage_plugin.kvdepot.pool_size: 8                # optional: pooled connections

or, with the older `remote_url: "kvdepot://127.0.0.1:7600"` (kvdepot://unix/PATH for a socket),
the same plugin lines without `address`.

Chunks are stored like the lm:// listener stores them (namespace id + key string, a 32-byte
metadata header in front of the payload), so the two paths share chunks. Payloads move without
Python-side copies: put sends the header and the MemoryObj's buffer as they are; get receives
the header, lets LMCache allocate the MemoryObj from it, and receives the payload straight into
it. Blocking calls run in a thread pool (the extension releases the GIL), never on the event loop.
"""
import asyncio
import concurrent.futures
from typing import List, Optional
from urllib.parse import urlparse

import kvdepot

try:  # the real LMCache classes when LMCache is installed
    from lmcache.v1.storage_backend.connector import ConnectorAdapter
    from lmcache.v1.storage_backend.connector.base_connector import RemoteConnector
except ImportError:  # stand-ins, so that the module imports (and is testable) without LMCache
    class RemoteConnector:  # type: ignore[no-redef]
        pass

    class ConnectorAdapter:  # type: ignore[no-redef]
        def __init__(self, schema: str = "") -> None:
            self.schema = schema

        def can_parse(self, url: str) -> bool:
            return self.schema != "" and url.startswith(self.schema)

SCHEME = "kvdepot://"


def _dtype_tables():
    """LMCache's dtype <-> int tables (lmcache.v1.protocol), or identity without LMCache."""
    try:
        from lmcache.v1.protocol import DTYPE_TO_INT, INT_TO_DTYPE
        return DTYPE_TO_INT, INT_TO_DTYPE
    except ImportError:
        return None, None


def _memory_format(value: int):
    try:
        from lmcache.v1.memory_management import MemoryFormat
        return MemoryFormat(value)
    except ImportError:
        return value


def address_from_url(url: str) -> str:
    """kvdepot://HOST:PORT -> HOST:PORT; kvdepot://unix/PATH -> unix:/PATH."""
    if not url.startswith(SCHEME):
        raise ValueError(f"not a kvdepot URL: {url}")
    parsed = urlparse(url)
    if parsed.hostname == "unix":
        return "unix:" + parsed.path
    if parsed.hostname is None or parsed.port is None:
        raise ValueError(f"kvdepot URL needs HOST:PORT or unix/PATH: {url}")
    host = f"[{parsed.hostname}]" if ":" in parsed.hostname else parsed.hostname
    return f"{host}:{parsed.port}"


class KvdepotConnector(RemoteConnector):
    """LMCache RemoteConnector over the kvdepot client (thread-safe, pooled connections)."""

    def __init__(self, url: str, loop: Optional[asyncio.AbstractEventLoop] = None,
                 local_cpu_backend=None, config=None, namespace: Optional[str] = None,
                 pool_size: Optional[int] = None, plugin_name: Optional[str] = None):
        try:  # newer LMCache: RemoteConnector.__init__(config, metadata); older: no arguments
            super().__init__(getattr(local_cpu_backend, "config", config),
                             getattr(local_cpu_backend, "metadata", None))
        except TypeError:
            super().__init__()
        extra = (getattr(config, "extra_config", None) or {}) if config is not None else {}
        if url.startswith("plugin://"):
            plugin_name = plugin_name or url[len("plugin://"):]
        plugin_name = plugin_name or "kvdepot"

        def option(name, default):
            return extra.get(f"remote_storage_plugin.{plugin_name}.{name}",
                             extra.get(f"kvdepot.{name}", default))
        namespace = namespace or option("namespace", "lmcache")
        pool_size = int(pool_size or option("pool_size", 8))
        address = (address_from_url(url) if url.startswith(SCHEME)
                   else option("address", "127.0.0.1:7600"))
        self.url = url
        self.loop = loop
        self.local_cpu_backend = local_cpu_backend
        # Security (docs/security.md): token_file, and TLS with tls_ca_file / tls_cert_file.
        self.client = kvdepot.Client(
            address, pool_size=pool_size, token_file=option("token_file", ""),
            tls=str(option("tls", "false")).lower() == "true",
            tls_ca_file=option("tls_ca_file", ""), tls_cert_file=option("tls_cert_file", ""),
            tls_key_file=option("tls_key_file", ""))
        self.prefix = kvdepot.lm_namespace_id(namespace)
        self.executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=pool_size, thread_name_prefix="kvdepot")
        self.dtype_to_int, self.int_to_dtype = _dtype_tables()

    def _key(self, key) -> bytes:
        text = key.to_string() if hasattr(key, "to_string") else str(key)
        return self.prefix + text.encode()

    async def _run(self, fn, *args):
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.executor, fn, *args)

    # ---- the RemoteConnector interface ----------------------------------------------------------
    async def exists(self, key) -> bool:
        return await self._run(self.exists_sync, key)

    def exists_sync(self, key) -> bool:
        prefix, _ = self.client.lookup([self._key(key)])
        return prefix == 1

    def support_batched_contains(self) -> bool:
        return True

    def batched_contains(self, keys, stop_after_first_not_exits: bool = True) -> List[bool]:
        """One LOOKUP round trip for all keys."""
        if not keys:
            return []
        prefix, tiers = self.client.lookup([self._key(k) for k in keys])
        if stop_after_first_not_exits:
            return [i < prefix for i in range(len(keys))]
        return [t != kvdepot.TIER_NONE for t in tiers]

    async def put(self, key, memory_obj) -> None:
        await self._run(self._put_blocking, key, memory_obj)

    def _put_blocking(self, key, memory_obj) -> None:
        shape = list(memory_obj.get_shape())
        dtype = memory_obj.get_dtype()
        fmt = memory_obj.get_memory_format()
        dtype_code = self.dtype_to_int[dtype] if self.dtype_to_int else int(dtype)
        header = kvdepot.lm_encode_header(int(getattr(fmt, "value", fmt)), dtype_code, 0,
                                          shape + [0] * (4 - len(shape)))
        self.client.put_parts(self._key(key), [header, memory_obj.byte_array])

    async def get(self, key):
        return await self._run(self._get_blocking, key)

    def _get_blocking(self, key):
        allocated = []

        def allocate(size, fmt, dtype, location, shape):
            dims = list(shape)
            while len(dims) > 1 and dims[-1] == 0:
                dims.pop()
            try:
                import torch
                dims = torch.Size(dims)
            except ImportError:
                pass
            obj = self.local_cpu_backend.allocate(
                dims, self.int_to_dtype[dtype] if self.int_to_dtype else dtype,
                _memory_format(fmt))
            if obj is None:
                return None
            allocated.append(obj)
            return obj.byte_array

        try:
            found = self.client.get_lm(self._key(key), allocate)
        except kvdepot.Error:
            found = None
        if found is None or not allocated:
            for obj in allocated:  # dropped: give the memory back
                if hasattr(obj, "ref_count_down"):
                    obj.ref_count_down()
            return None
        return allocated[0]

    async def list(self) -> List[str]:
        return await self._run(self._list_blocking)

    def _list_blocking(self) -> List[str]:
        n = len(self.prefix)
        return [k[n:].decode(errors="replace") for k, _, _ in self.client.scan(self.prefix)]

    def remove_sync(self, key) -> bool:
        return self.client.delete(self._key(key))

    def support_ping(self) -> bool:
        return True

    async def ping(self) -> int:
        try:
            await self._run(self.client.ping)
            return 0
        except kvdepot.Error:
            return 1

    async def close(self) -> None:
        self.executor.shutdown(wait=True)
        self.client = None

    def __repr__(self) -> str:
        return f"<KvdepotConnector {self.url}>"


class KvdepotConnectorAdapter(ConnectorAdapter):
    """Creates a KvdepotConnector for kvdepot:// URLs (LMCache's remote-storage plugin)."""

    def __init__(self) -> None:
        super().__init__(SCHEME)

    def can_parse(self, url: str) -> bool:
        if url.startswith("plugin://"):  # plugin://{type}[.{instance}]
            return url[len("plugin://"):].split(".", 1)[0] == "kvdepot"
        return url.startswith(SCHEME)

    def create_connector(self, context) -> KvdepotConnector:
        return KvdepotConnector(context.url, loop=context.loop,
                                local_cpu_backend=context.local_cpu_backend,
                                config=context.config,
                                plugin_name=getattr(context, "plugin_name", None))
