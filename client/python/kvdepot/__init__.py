"""kvdepot: the Python client of kvdepotd.

    import kvdepot
    c = kvdepot.Client("127.0.0.1:7600")
    c.put(b"key", numpy_array)              # any C-contiguous buffer, sent without a copy
    n = c.get_into(b"key", out_array)       # received straight into a writable buffer
    data = c.get(b"key")                    # or returned as bytes (None on a miss)
    ns = kvdepot.Namespace("meta-llama/Llama-3.1-8B-Instruct", dtype=kvdepot.DType.BF16)
    keys = kvdepot.chunk_keys(ns, token_ids)
    prefix, tiers = c.lookup(keys)          # one round trip; tiers: [kvdepot.Tier.HOST, ...]
    small = c.get_as(keys[0], kvdepot.Codec.HACK_INT2)  # transcoded by the daemon (GET_AS)
    c.stats()["tiers"]["host"]["hits"]     # the daemon's STATS document as a dict

Network calls release the GIL. Failures raise kvdepot.Error. Tier, DType and Codec are IntEnums:
they compare equal to the plain ints of earlier releases. Type stubs ship beside the module
(__init__.pyi). `kvdepot.lmcache_connector` plugs kvdepot into LMCache as a remote-storage plugin
(docs/lmcache.md).
"""
from ._kvdepot import (  # noqa: F401
    LM_HEADER_BYTES,
    Codec,
    DType,
    Tier,
    TIER_GPU,
    TIER_HOST,
    TIER_NONE,
    TIER_SSD,
    Client,
    Error,
    Namespace,
    chunk_keys,
    lm_encode_header,
    lm_namespace_id,
)

__version__ = "0.1.0"

# What `from kvdepot import *` and help(kvdepot) list.
__all__ = [
    "Client",
    "Codec",
    "DType",
    "Error",
    "LM_HEADER_BYTES",
    "Namespace",
    "TIER_GPU",
    "TIER_HOST",
    "TIER_NONE",
    "TIER_SSD",
    "Tier",
    "chunk_keys",
    "lm_encode_header",
    "lm_namespace_id",
]
