"""kvdepot as the second-level (L2) storage of LMCache's multi-process (MP) mode.

LMCache's ``native_plugin`` L2 adapter type imports ``module_path``, instantiates
``class_name(**adapter_params)`` and wraps it in its NativeConnectorL2Adapter::

    lmcache server --l1-size-gb 20 --eviction-policy LRU \\
      --l2-adapter '{"type": "native_plugin", "module_path": "kvdepot.lmcache_mp",
                     "class_name": "KvdepotL2Connector",
                     "adapter_params": {"address": "127.0.0.1:7600", "num_workers": 4}}'

``KvdepotL2Connector`` is C++ (the ``_kvdepot_lmcache_mp`` extension): worker threads with one
kvdepotd connection each, GET straight into LMCache's buffers, pipelined SETs from them, an
eventfd for completions, no GIL during I/O. adapter_params (all optional):

    address          kvdepotd's native listener, "HOST:PORT" or "unix:/path" (127.0.0.1:7600)
    num_workers      worker threads = connections (4)
    timeout_ms       per send/receive (10000); also bounds how long close() waits
    key_prefix       prepended to LMCache's keys, e.g. to keep them apart from other tenants ("")
    token / token_file   kvdepot auth token (docs/security.md)
    tls, tls_ca_file, tls_cert_file, tls_key_file, tls_server_name   TLS over TCP
    max_pipeline, max_pipeline_bytes   SETs in flight per connection (32, and only one past
                     262144 bytes of values)
    cluster_routing  "auto" (default): in a kvdepot cluster, address is only the seed; each key
                     goes straight to its owner (docs/cluster.md, Smart clients). "off": all to
                     address, which forwards

docs/lmcache.md ("5. LMCache MP mode") has the contract and the results it reports.
"""
import json

from ._kvdepot_lmcache_mp import KvdepotL2Connector  # noqa: F401

MODULE_PATH = "kvdepot.lmcache_mp"
CLASS_NAME = "KvdepotL2Connector"


def l2_adapter_json(**adapter_params) -> str:
    """The ``--l2-adapter`` JSON that loads KvdepotL2Connector with these adapter_params."""
    return json.dumps({"type": "native_plugin", "module_path": MODULE_PATH,
                       "class_name": CLASS_NAME, "adapter_params": adapter_params})
