# Type stubs of the kvdepot package (PEP 561; py.typed marks the package as typed). They mirror
# client/python/src/kvdepot_module.cc; tests/lmcache/test_python_module.py checks that every public
# name of the module and every Client method is declared here.
import enum
from typing import Any, Callable, Dict, List, Literal, Optional, Sequence, Tuple, Union

Key = Union[bytes, str]
# Any object exporting a C-contiguous buffer (bytes, bytearray, memoryview, numpy arrays).
BufferLike = Any

__version__: str
__all__: List[str]

LM_HEADER_BYTES: int

class Tier(enum.IntEnum):
    """Where a key is held: the tier LOOKUP and scan report (NONE: not cached)."""
    NONE = 0
    GPU = 1
    HOST = 2
    SSD = 3

class DType(enum.IntEnum):
    """The element type of a namespace's KV tensors."""
    FP16 = 1
    BF16 = 2
    FP32 = 3

class Codec(enum.IntEnum):
    """A chunk container's codec: what GET_AS transcodes into and a namespace's codec."""
    RAW = 0
    CACHEGEN = 1
    HACK_INT2 = 2

TIER_NONE: Tier
TIER_GPU: Tier
TIER_HOST: Tier
TIER_SSD: Tier

class Error(RuntimeError):
    """A failed kvdepot call: the message starts with the status name."""

class Namespace:
    """A chunk-key namespace (docs/format.md §2)."""
    # dtype: a DType (default FP16); codec: a Codec (default RAW); plain ints work too.
    def __init__(self, model: str, tp_world_size: int = 1, tp_rank: int = 0,
                 dtype: int = ..., codec: int = ..., chunk_tokens: int = 256,
                 tenant: str = "", salt: str = "") -> None: ...
    def id(self) -> bytes: ...
    def label(self) -> str: ...
    @property
    def model(self) -> str: ...
    @property
    def dtype(self) -> DType: ...
    @property
    def codec(self) -> Codec: ...

def chunk_keys(ns: Namespace, tokens: Sequence[int], include_partial: bool = False) -> List[bytes]: ...
def lm_namespace_id(name: str = "lmcache") -> bytes: ...
def lm_encode_header(fmt: int, dtype: int, location: int, shape: Sequence[int]) -> bytes: ...

class Client:
    """A thread-safe client of kvdepotd that pools its connections."""
    def __init__(self, address: str = "127.0.0.1:7600", timeout_ms: int = 30000,
                 pool_size: int = 4, *, token: str = "", token_file: str = "",
                 tls: bool = False, tls_ca_file: str = "", tls_cert_file: str = "",
                 tls_key_file: str = "", tls_server_name: str = "",
                 cluster_routing: Literal["auto", "off"] = "auto") -> None:
        """cluster_routing: "auto" (default) asks `address` for the cluster's view
        (CLUSTER_INFO) at first use and sends each key's requests straight to its owner,
        refreshing the view every 5 s and after a failure; a daemon not in a cluster is used as
        is. "off": every request goes to `address`, which forwards (docs/cluster.md)."""
    # placement_key / placement_keys: in a cluster the key is placed by it instead of by
    # itself, e.g. by its prompt group's anchor (docs/cluster.md, "Prefix locality in
    # requests"); None places it by itself.
    def ping(self) -> None: ...
    def put(self, key: Key, value: BufferLike, *, placement_key: Optional[Key] = None) -> None: ...
    def put_parts(self, key: Key, parts: List[BufferLike], *,
                  placement_key: Optional[Key] = None) -> None: ...
    def get(self, key: Key, *, placement_key: Optional[Key] = None) -> Optional[bytes]: ...
    def get_into(self, key: Key, out: BufferLike, *,
                 placement_key: Optional[Key] = None) -> Optional[int]: ...
    def get_as(self, key: Key, codec: int, *,
               placement_key: Optional[Key] = None) -> Optional[bytes]: ...
    def get_lm(
        self, key: Key,
        allocate: Callable[[int, int, int, int, Tuple[int, int, int, int]], Optional[BufferLike]],
        *, placement_key: Optional[Key] = None,
    ) -> Optional[Tuple[int, int, int, int, Tuple[int, int, int, int]]]: ...
    def lookup(self, keys: List[Key], *,
               placement_keys: Optional[Sequence[Optional[Key]]] = None) -> Tuple[int, List[Tier]]: ...
    # Prompt-level calls: chunk i of the full chunks of `tokens`, placed in groups of G by its
    # group's anchor. group_chunks (G) 0: the cluster's G from the client's view (with
    # cluster_routing="off" or no cluster: placed per key); > 0 overrides it.
    def lookup_prefix(self, ns: Namespace, tokens: Sequence[int], *,
                      group_chunks: int = 0) -> Tuple[int, List[bytes], List[Tier]]: ...
    def put_prefix(self, ns: Namespace, tokens: Sequence[int], values: Sequence[BufferLike], *,
                   group_chunks: int = 0) -> None: ...
    def delete(self, key: Key, *, placement_key: Optional[Key] = None) -> bool: ...
    def stats(self) -> Dict[str, Any]: ...
    def scan(self, prefix: Key = b"", page: int = 4096) -> List[Tuple[bytes, int, Tier]]: ...
