"""The kvdepot Python module (pybind11 over the client library) against a kvdepotd subprocess."""
import hashlib
import struct
import threading
from pathlib import Path

import numpy as np
import pytest

kvdepot = pytest.importorskip("kvdepot", reason="the kvdepot Python module is not built")

VECTORS = Path(__file__).resolve().parents[1] / "vectors"


@pytest.fixture
def client(daemon):
    return kvdepot.Client(daemon.addr, timeout_ms=10000, pool_size=4)


def test_put_get_bytes_and_buffers(client):
    client.ping()
    client.put(b"k-bytes", b"hello")
    assert client.get(b"k-bytes") == b"hello"
    client.put("k-str", bytearray(b"from a bytearray"))  # str keys are UTF-8
    assert client.get(b"k-str") == b"from a bytearray"
    arr = np.arange(3 * 1024 * 1024, dtype=np.float16).reshape(3, 1024, 1024)
    client.put(b"k-array", arr)
    assert client.get(b"k-array") == arr.tobytes()
    assert client.get(b"absent") is None


def test_get_into_caller_buffers(client):
    arr = np.random.default_rng(1).standard_normal((256, 1024), dtype=np.float32)
    client.put(b"t", arr)
    out = np.empty_like(arr)
    assert client.get_into(b"t", out) == arr.nbytes
    assert np.array_equal(out, arr)
    big = bytearray(arr.nbytes + 100)
    assert client.get_into(b"t", big) == arr.nbytes
    assert bytes(big[:arr.nbytes]) == arr.tobytes()
    assert client.get_into(b"absent", big) is None
    with pytest.raises(kvdepot.Error, match="out_of_range"):
        client.get_into(b"t", bytearray(10))
    client.ping()  # the connection survived the refused get
    with pytest.raises(BufferError):
        client.get_into(b"t", b"read-only bytes")
    with pytest.raises((BufferError, ValueError)):  # numpy raises ValueError
        client.get_into(b"t", np.empty((1024, 256), dtype=np.float32).T)  # not contiguous


def test_put_parts_concatenates_without_joining(client):
    header = kvdepot.lm_encode_header(1, 3, 0, (2, 4))
    assert len(header) == kvdepot.LM_HEADER_BYTES == 32
    payload = np.ones(1000, dtype=np.uint8)
    client.put_parts(b"p", [header, memoryview(payload)])
    assert client.get(b"p") == header + payload.tobytes()


def test_get_lm_allocates_from_the_header(client):
    payload = np.arange(4096, dtype=np.uint16)
    client.put_parts(b"lm", [kvdepot.lm_encode_header(1, 3, 1, (2, 8, 256, 0)), payload])
    seen = []

    def allocate(size, fmt, dtype, location, shape):
        seen.append((size, fmt, dtype, location, shape))
        return np.empty(size, dtype=np.uint8)
    targets = []

    def allocate_keep(*args):
        targets.append(allocate(*args))
        return targets[-1]
    assert client.get_lm(b"lm", allocate_keep) == (payload.nbytes, 1, 3, 1, (2, 8, 256, 0))
    assert seen == [(payload.nbytes, 1, 3, 1, (2, 8, 256, 0))]
    assert targets[0].tobytes() == payload.tobytes()
    assert client.get_lm(b"lm", lambda *a: None) is None  # dropped by the allocator
    assert client.get_lm(b"absent", allocate) is None
    client.put(b"plain", b"no header here at all, not an lmcache value")
    assert client.get_lm(b"plain", allocate) is None

    def failing(*args):
        raise KeyError("allocation failed")
    with pytest.raises(KeyError):
        client.get_lm(b"lm", failing)
    client.ping()


def test_batched_lookup_delete_scan_stats(client):
    keys = [f"b{i}".encode() for i in range(5)]
    for k in keys[:3]:
        client.put(k, k)
    prefix, tiers = client.lookup(keys)
    assert prefix == 3 and tiers == [kvdepot.TIER_HOST] * 3 + [kvdepot.TIER_NONE] * 2
    assert client.delete(b"b1") and not client.delete(b"b1")
    assert client.lookup(keys)[0] == 1
    assert [k for k, _, _ in client.scan(b"b")] == [b"b0", b"b2"]
    stats = client.stats()
    assert isinstance(stats, dict) and stats["tiers"]["host"]["chunks"] == 2


def test_tiers_dtypes_and_codecs_are_int_enums(client):
    import enum
    for cls, members in ((kvdepot.Tier, {"NONE": 0, "GPU": 1, "HOST": 2, "SSD": 3}),
                         (kvdepot.DType, {"FP16": 1, "BF16": 2, "FP32": 3}),
                         (kvdepot.Codec, {"RAW": 0, "CACHEGEN": 1, "HACK_INT2": 2})):
        assert issubclass(cls, enum.IntEnum) and cls.__doc__
        assert {m.name: int(m) for m in cls} == members
    assert kvdepot.TIER_HOST is kvdepot.Tier.HOST and kvdepot.TIER_HOST == 2  # old ints still work
    client.put(b"e0", b"x")
    prefix, tiers = client.lookup([b"e0", b"e1"])
    assert tiers == [kvdepot.Tier.HOST, kvdepot.Tier.NONE]
    assert all(type(t) is kvdepot.Tier for t in tiers)
    assert [type(t) for _, _, t in client.scan(b"e")] == [kvdepot.Tier]
    ns = kvdepot.Namespace("m", dtype=kvdepot.DType.BF16, codec=kvdepot.Codec.CACHEGEN)
    assert ns.dtype is kvdepot.DType.BF16 and ns.codec is kvdepot.Codec.CACHEGEN
    assert kvdepot.Namespace("m", dtype=2, codec=1).id() == ns.id()  # ints are the same fields


def test_get_as_transcodes_on_the_daemon(client):
    raw = (VECTORS / "raw-fp16-small.kvd").read_bytes()
    client.put(b"chunk", raw)
    assert client.get_as(b"chunk", kvdepot.Codec.RAW) == raw
    encoded = client.get_as(b"chunk", kvdepot.Codec.CACHEGEN)
    assert encoded[:4] == b"\x89KVD" and encoded != raw
    assert client.get_as(b"missing", kvdepot.Codec.RAW) is None
    client.put(b"not-a-chunk", b"plain bytes")
    with pytest.raises(kvdepot.Error):
        client.get_as(b"not-a-chunk", kvdepot.Codec.CACHEGEN)


def test_every_class_and_method_is_documented():
    for name in kvdepot.__all__:
        obj = getattr(kvdepot, name)
        if callable(obj):
            assert obj.__doc__, name
    for cls in (kvdepot.Client, kvdepot.Namespace):
        for name, member in vars(cls).items():
            if not name.startswith("_"):
                assert member.__doc__, f"{cls.__name__}.{name}"
    import pydoc
    text = pydoc.render_doc(kvdepot, renderer=pydoc.plaintext)
    assert "class Client" in text and "get_as" in text


def test_the_type_stub_declares_every_public_name():
    import ast
    import pathlib
    stub = pathlib.Path(kvdepot.__file__).with_name("__init__.pyi")
    assert stub.exists(), "the .pyi is not installed beside the module"
    assert stub.with_name("py.typed").exists()
    tree = ast.parse(stub.read_text())
    declared, methods = set(), {}
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            declared.add(node.name)
        elif isinstance(node, ast.AnnAssign):
            declared.add(node.target.id)
        if isinstance(node, ast.ClassDef):
            methods[node.name] = {n.name for n in node.body if isinstance(n, ast.FunctionDef)}
            methods[node.name] |= {t.id for n in node.body if isinstance(n, ast.Assign)
                                   for t in n.targets}
    public = {n for n in dir(kvdepot) if not n.startswith("_") and
              not isinstance(getattr(kvdepot, n), type(kvdepot))}  # submodules are not names
    assert public - declared == set(), "public names missing from __init__.pyi"
    assert set(kvdepot.__all__) <= declared
    for cls in ("Client", "Namespace"):
        real = {n for n in dir(getattr(kvdepot, cls)) if not n.startswith("_")}
        assert real - methods[cls] == set(), f"{cls} members missing from __init__.pyi"
    for cls in ("Tier", "DType", "Codec"):
        assert {m.name for m in getattr(kvdepot, cls)} == methods[cls]


def test_chunk_keys_match_the_format_golden_vector(client):
    ns = kvdepot.Namespace("m")
    keys = kvdepot.chunk_keys(ns, [1, 2, 3], include_partial=True)
    assert [k.hex() for k in keys] == [
        "6ec8a8d6cc1bbc471232558193f70b33a74e37fefaeb850c155dce61be75c680"
        "0b60ab1a0ebf666fdbd5de066a85eec0"]
    assert kvdepot.chunk_keys(ns, [1, 2, 3]) == []  # partial chunks are left out by default
    ns = kvdepot.Namespace("meta-llama/Llama-3.1-8B-Instruct", tp_world_size=2, tp_rank=1,
                           dtype=2, codec=1, tenant="acme", salt="s3cret")
    tokens = [(i * 2654435761) % 2**32 for i in range(600)]
    keys = kvdepot.chunk_keys(ns, tokens)
    assert len(keys) == 2 and keys[0].hex().startswith("2464864f1f3642583b7154cc1f55fdba")
    client.put(keys[0], b"chunk 0")
    prefix, found, tiers = client.lookup_prefix(ns, tokens)
    assert prefix == 1 and found == keys and tiers == [kvdepot.TIER_HOST, kvdepot.TIER_NONE]
    with pytest.raises(kvdepot.Error, match="invalid_argument"):
        kvdepot.Namespace("m", tp_world_size=2, tp_rank=2)


def test_lm_namespace_id_is_pinned():
    d = hashlib.sha256(b"kvdepot.lm.v1\x00" + struct.pack("<I", 7) + b"lmcache").digest()
    assert kvdepot.lm_namespace_id() == d[:16] == kvdepot.lm_namespace_id("lmcache")
    assert kvdepot.lm_namespace_id("other") != d[:16]


def test_threads_share_one_client(client):
    errors = []
    value = np.random.default_rng(2).integers(0, 255, 2 * 1024 * 1024, dtype=np.uint8)

    def worker(t):
        try:
            out = np.empty_like(value)
            for i in range(10):
                key = f"thread-{t}-{i}".encode()
                client.put(key, value)
                assert client.get_into(key, out) == value.nbytes
                assert np.array_equal(out, value)
        except Exception as e:  # noqa: BLE001
            errors.append(e)
    threads = [threading.Thread(target=worker, args=(t,)) for t in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors


def test_errors_are_exceptions_not_crashes():
    c = kvdepot.Client("127.0.0.1:1", timeout_ms=1000)
    with pytest.raises(kvdepot.Error, match="unavailable"):
        c.ping()
    with pytest.raises(TypeError):
        c.get(12)
    assert issubclass(kvdepot.Error, RuntimeError)


def test_token_and_tls(make_daemon, tmp_path):
    """kvdepot.Client with a token file and TLS (docs/security.md)."""
    import subprocess
    crt, key = tmp_path / "server.crt", tmp_path / "server.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-days", "1", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost", "-keyout", str(key),
                    "-out", str(crt)], check=True, capture_output=True)
    tokens = tmp_path / "tokens"
    tokens.write_text("python-token-0123456789 *\n")
    d = make_daemon("--auth-token-file", str(tokens), "--lm-allow-unauthenticated", "true",
                    "--tls-cert-file", str(crt), "--tls-key-file", str(key))
    c = kvdepot.Client(d.addr, timeout_ms=10000, token_file=str(tokens), tls_ca_file=str(crt))
    c.put(b"k", b"v")
    assert c.get(b"k") == b"v"
    with pytest.raises(kvdepot.Error, match="unauthenticated"):
        kvdepot.Client(d.addr, token="wrong-token-0123456789", tls_ca_file=str(crt)).ping()
    with pytest.raises(kvdepot.Error, match="certificate"):  # not signed by a system CA
        kvdepot.Client(d.addr, token_file=str(tokens), tls=True).ping()
    c.ping()


def test_cluster_routing_keyword(daemon):
    # A daemon not in a cluster: "auto" (the default) asks it for CLUSTER_INFO once, then
    # behaves as "off" (docs/cluster.md, Smart clients).
    for routing in ("auto", "off"):
        c = kvdepot.Client(daemon.addr, timeout_ms=10000, cluster_routing=routing)
        c.put(b"routed-" + routing.encode(), b"v")
        assert c.get(b"routed-" + routing.encode()) == b"v"
        assert c.lookup([b"routed-" + routing.encode(), b"absent"])[0] == 1
    with pytest.raises(kvdepot.Error, match="cluster_routing='sideways'"):
        kvdepot.Client(daemon.addr, cluster_routing="sideways")


def test_placement_keys_and_prompt_level_calls(client):
    """placement_key= / placement_keys= and put_prefix / lookup_prefix (docs/cluster.md, "Prefix
    locality in requests"). A single daemon ignores placement keys; what this checks is that
    every method takes them and that the prompt-level calls agree with chunk_keys. The cluster
    case (Python against C++ and C on real daemons and etcd) is tests/cluster/cluster_prefix_test.cc."""
    client.put(b"placed-0", b"v0", placement_key=b"anchor")
    client.put_parts(b"placed-1", [b"v", b"1"], placement_key="anchor")
    assert client.get(b"placed-0", placement_key=b"anchor") == b"v0"
    out = bytearray(8)
    assert client.get_into(b"placed-1", out, placement_key=b"anchor") == 2 and out[:2] == b"v1"
    assert client.lookup([b"placed-0", b"placed-1", b"x"],
                         placement_keys=[b"anchor", None, b"anchor"])[0] == 2
    assert client.get_lm(b"placed-0", lambda *a: None, placement_key=b"anchor") is None
    with pytest.raises(ValueError, match="placement_keys has 1 entries for 2 keys"):
        client.lookup([b"placed-0", b"placed-1"], placement_keys=[b"anchor"])
    assert client.delete(b"placed-0", placement_key=b"anchor")
    assert not client.delete(b"placed-0", placement_key=None)

    ns = kvdepot.Namespace("prefix-model", chunk_tokens=16)
    tokens = list(range(5 * 16 + 7))  # 5 full chunks and a partial one, which is not stored
    values = [bytes([i]) * (100 + i) for i in range(5)]
    client.put_prefix(ns, tokens, values)
    prefix, keys, tiers = client.lookup_prefix(ns, tokens)
    assert prefix == 5 and keys == kvdepot.chunk_keys(ns, tokens)
    assert tiers == [kvdepot.Tier.HOST] * 5
    assert [client.get(k) for k in keys] == values
    assert client.lookup_prefix(ns, tokens, group_chunks=4)[0] == 5  # an explicit G
    client.put_prefix(ns, tokens[:32], [np.zeros(64, dtype=np.uint8)] * 2, group_chunks=2)
    with pytest.raises(kvdepot.Error, match="invalid_argument: put_prefix: 4 chunk values for "
                                            "87 tokens; expected 5"):
        client.put_prefix(ns, tokens, values[:4])
