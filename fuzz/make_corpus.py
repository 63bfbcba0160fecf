#!/usr/bin/python3
"""Writes the seed corpora under fuzz/corpus/<target>/ (small, valid or nearly valid inputs).

Run from anywhere; re-running rewrites the same files. The formats are those of docs/protocol.md,
docs/lmcache.md, docs/durability.md and docs/format.md (the container seeds are tests/vectors).
"""
import os
import struct

import xxhash

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS = os.path.join(ROOT, "fuzz", "corpus")


def put(target, name, data):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# ---- native protocol ------------------------------------------------------------------------
def frame(op, body=b"", rid=1, flags=0, status=0):
    return b"KVDP" + struct.pack("<BBHQIHH", 1, op, flags, rid, len(body), status, 0) + body


def key(k):
    return struct.pack("<H", len(k)) + k


def key_list(keys):
    return struct.pack("<I", len(keys)) + b"".join(key(k) for k in keys)


def put_body(items):
    return struct.pack("<I", len(items)) + b"".join(
        key(k) + struct.pack("<Q", len(v)) + v for k, v in items)


def scan_req(limit=10, tier=0, prefix=b"", cursor=b""):
    return struct.pack("<IBB", limit, tier, 0) + key(prefix) if prefix else (
        struct.pack("<IBBH", limit, tier, 0, 0)) + (key(cursor) if cursor else struct.pack("<H", 0))


PING, PUT, GET, LOOKUP, DELETE, STATS, SCAN = 1, 2, 3, 4, 5, 6, 7
AUTH, MAP, LEASE_GET, RELEASE, GET_AS = 8, 9, 10, 11, 12


def lease_get(keys, tier=0):
    return struct.pack("<B3x", tier) + key_list(keys)


def lease_ids(ids):
    return struct.pack("<I", len(ids)) + b"".join(struct.pack("<Q", i) for i in ids)


def get_as(codec, keys):
    return struct.pack("<B3x", codec) + key_list(keys)

# protocol: byte 0 picks the decoder, byte 1 the limits (bit 0: small).
for lim in (0, 1):
    put("protocol", f"header-get-{lim}", bytes([0, lim]) + frame(GET, key_list([b"k"]))[:24])
    put("protocol", f"header-resp-{lim}", bytes([1, lim]) + frame(GET | 0x80, b"x" * 8, flags=1)[:24])
    put("protocol", f"keylist-{lim}", bytes([2, lim]) + key_list([b"a", b"bb", b"ccc"]))
    put("protocol", f"putbody-{lim}", bytes([3, lim]) + put_body([(b"k1", b"value"), (b"k2", b"")]))
    put("protocol", f"scanreq-{lim}", bytes([7, lim]) + struct.pack("<IBBH", 5, 2, 0, 2) + b"ab" +
        struct.pack("<H", 1) + b"c")
# The zero-copy and authentication messages (decoders 9-14 of the protocol target).
put("protocol", "auth", bytes([9, 0]) + struct.pack("<H", 5) + b"token")
put("protocol", "mapinfo", bytes([10, 0]) + struct.pack("<QQiI", 1 << 20, 0, -1, 0) + bytes(64))
for lim in (0, 1):
    put("protocol", f"leaseget-{lim}", bytes([11, lim]) + lease_get([b"a", b"bb"], tier=2))
    put("protocol", f"leaseids-{lim}", bytes([13, lim]) + lease_ids([1, 2, 3]))
    put("protocol", f"getas-{lim}", bytes([14, lim]) + get_as(1, [b"k"]))
put("protocol", "leases", bytes([12, 0]) + struct.pack("<I", 2) +
    struct.pack("<HBBIQQQ", 0, 2, 0, 0, 1, 4096, 100) + struct.pack("<HBBIQQQ", 2, 0, 0, 0, 0, 0, 0))
put("protocol", "statuslist", bytes([4, 0]) + struct.pack("<IHH", 2, 0, 5))
put("protocol", "getprefix", bytes([5, 0]) + struct.pack("<IB3x", 3, 2))
put("protocol", "lookupresult", bytes([6, 0]) + struct.pack("<II3B", 1, 3, 2, 0, 3))
put("protocol", "scanresult", bytes([8, 0]) + struct.pack("<I", 1) + key(b"key") +
    struct.pack("<QBQ", 100, 2, 5) + struct.pack("<H", 3) + b"key")

# server: whole conversations.
put("server", "ping", frame(PING))
put("server", "put-get", frame(PUT, put_body([(b"k1", b"hello"), (b"k2", b"x" * 100)]), rid=1) +
    frame(GET, key_list([b"k1", b"k2", b"missing"]), rid=2))
put("server", "lookup-delete-scan", frame(PUT, put_body([(b"a", b"1"), (b"b", b"2")]), rid=1) +
    frame(LOOKUP, key_list([b"a", b"b", b"c"]), rid=2) +
    frame(SCAN, struct.pack("<IBBH", 10, 0, 0, 0) + struct.pack("<H", 0), rid=3) +
    frame(DELETE, key_list([b"a", b"zz"]), rid=4) + frame(STATS, rid=5))
put("server", "long-key", frame(PUT, put_body([(b"K" * 600, b"v" * 10)]), rid=9) +
    frame(GET, key_list([b"K" * 600]), rid=10))
put("server", "pipelined-gets", frame(PUT, put_body([(b"big", b"B" * 70000)])) +
    b"".join(frame(GET, key_list([b"big"]), rid=i) for i in range(3)))
put("server", "truncated-put", frame(PUT, put_body([(b"k", b"0123456789")]))[:-4])
put("server", "bad-magic", b"KVDX" + frame(PING)[4:])
put("server", "auth-without-auth", frame(AUTH, struct.pack("<H", 5) + b"token", rid=1) +
    frame(PING, rid=2))
put("server", "map-lease-release", frame(PUT, put_body([(b"a", b"A" * 5000), (b"b", b"B" * 10)]),
                                             rid=1) +
    frame(MAP, rid=2) + frame(LEASE_GET, lease_get([b"a", b"b", b"missing"]), rid=3) +
    frame(LEASE_GET, lease_get([b"a"], tier=1), rid=4) +
    frame(RELEASE, lease_ids([1, 2, 99]), rid=5) + frame(DELETE, key_list([b"a"]), rid=6) +
    frame(LEASE_GET, lease_get([b"a"]), rid=7))
put("server", "lease-bound", frame(PUT, put_body([(b"big", b"Z" * 700000)]), rid=1) +
    frame(LEASE_GET, lease_get([b"big", b"big", b"big"]), rid=2) + frame(RELEASE, lease_ids([1]),
                                                                          rid=3))

# ---- lm:// ----------------------------------------------------------------------------------
def lm_header(cmd, length=0, k=b"key", fmt=1, dtype=2, loc=0, shape=(1, 2, 3, 4)):
    return struct.pack("<9i", cmd, length, fmt, dtype, loc, *shape) + k.ljust(150, b" ")


for name, h in [("put", lm_header(1, 5)), ("get", lm_header(2)), ("exist", lm_header(3)),
                ("list", lm_header(4)), ("health", lm_header(5)),
                ("blank-key", lm_header(3, k=b"   ")), ("bad-cmd", lm_header(9))]:
    put("lm_header", name, h)
put("lm_server", "put-get", lm_header(1, 5, b"chunk") + b"hello" + lm_header(2, 0, b"chunk") +
    lm_header(3, 0, b"chunk"))
put("lm_server", "list-health", lm_header(1, 3, b"a") + b"abc" + lm_header(4) + lm_header(5))
put("lm_server", "get-missing", lm_header(2, 0, b"nope"))
put("lm_server", "put-empty-key", lm_header(1, 4, b"  ") + b"data" + lm_header(5))
put("lm_server", "bad-length", lm_header(1, -1))

# ---- resp:// (the Redis protocol, docs/resp.md) -----------------------------------------------
def multibulk(*args):
    out = b"*%d\r\n" % len(args)
    for a in args:
        a = a if isinstance(a, bytes) else a.encode()
        out += b"$%d\r\n%s\r\n" % (len(a), a)
    return out


RESP_SEEDS = {
    "set-get-multibulk": multibulk("SET", "greeting", "hello") + multibulk("GET", "greeting") +
    multibulk("GET", "nothing"),
    "inline-pipeline": b"PING\r\nSET k v\r\nGET k\r\nEXISTS k nothing\r\nDEL k\r\nSTRLEN k\r\n"
    b"TYPE k\r\n",
    "inline-quotes": b"SET \"quoted key\" 'single \\' quote'\r\nGET \"quoted key\"\r\n"
    b"ECHO \"\\x41\\n\\t\"\r\n\r\n",
    "hello3-resp3": b"HELLO 3\r\nGET nothing\r\nMGET nothing\r\nCONFIG GET save\r\nHELLO 2\r\n"
    b"GET nothing\r\n",
    "mset-mget-scan": multibulk("MSET", "a", "1", "b", "2", "c", "3") +
    multibulk("MGET", "a", "b", "nothing") + multibulk("SCAN", "0", "MATCH", "*", "COUNT", "2") +
    multibulk("DBSIZE"),
    "set-options": multibulk("SET", "k", "v", "NX", "GET") + multibulk("SET", "k", "w", "XX") +
    multibulk("SET", "k", "x", "EX", "10") + multibulk("SET", "k", "y", "NX", "XX"),
    "server-commands": multibulk("INFO") + multibulk("INFO", "keyspace") +
    multibulk("COMMAND", "COUNT") + multibulk("COMMAND", "INFO", "get", "nothing") +
    multibulk("COMMAND", "DOCS", "set") + multibulk("CLIENT", "SETNAME", "fuzz") +
    multibulk("CLIENT", "GETNAME") + multibulk("CLIENT", "ID") +
    multibulk("CLIENT", "SETINFO", "LIB-NAME", "redis-py") + multibulk("CONFIG", "GET", "*") +
    multibulk("SELECT", "0") + multibulk("SELECT", "1") + multibulk("AUTH", "default", "token") +
    multibulk("ECHO", "x") + multibulk("QUIT"),
    # Bulks over the parser's 16 KiB inline limit: a SET value (read into the stored buffer) and
    # an ECHO argument (refused, its bytes dropped).
    "large-set-value": b"*3\r\n$3\r\nSET\r\n$5\r\nlarge\r\n$20000\r\n" + b"v" * 20000 + b"\r\n" +
    multibulk("GET", "large") + multibulk("STRLEN", "large"),
    "large-non-value": b"*2\r\n$4\r\nECHO\r\n$17000\r\n" + b"e" * 17000 + b"\r\n" +
    multibulk("PING"),
    "malformed-nested": b"PING\r\n*1\r\n*1\r\n$4\r\nPING\r\n",
    "malformed-bulk-length": b"*1\r\n$3\r\nPINGPONG\r\n",
    "malformed-huge-bulk": b"*2\r\n$3\r\nGET\r\n$99999999999\r\n",
    "malformed-unbalanced": b"SET \"unbalanced\r\n",
    "unknown-and-arity": multibulk("NOSUCH", "a", "b") + multibulk("GET") +
    multibulk("GET", "a", "b") + b"*0\r\n*-1\r\n" + multibulk("PING", "x", "y"),
    "partial-request": b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$10\r\nabc",
}
for _name, _data in RESP_SEEDS.items():
    put("resp_server", _name, _data)
    # resp_codec: byte 0 picks the limits (bit 0: tiny), byte 1 seeds the split points.
    put("resp_codec", _name, bytes([0, len(_name)]) + _data)
for _name in ("inline-pipeline", "set-get-multibulk", "large-non-value", "mset-mget-scan"):
    put("resp_codec", _name + "-tiny", bytes([1, 7]) + RESP_SEEDS[_name])

# ---- SSD record / index entry / segment name --------------------------------------------------
def record_header(k, value_length=4096, value_checksum=0, seq=1):
    fixed = b"KVDR" + struct.pack("<HHQQQ", 1, len(k), value_length, value_checksum, seq)
    csum = xxhash.xxh3_64_intdigest(fixed + k)
    block = fixed + struct.pack("<Q", csum) + b"\0" * 24 + k
    return block.ljust(4096, b"\0")


put("ssd_record", "record", bytes([0]) + record_header(b"some-key"))
put("ssd_record", "record-fixup", bytes([0x80]) + record_header(b"k" * 100)[:200])
put("ssd_record", "index", bytes([1]) + struct.pack("<H6xQQQQ", 1, 3, 8192, 1000, 77))
put("ssd_record", "segname", bytes([2]) + b"seg-00000000000000ff.kvs")

# ---- config ----------------------------------------------------------------------------------
# The first byte picks the file-system shape (fuzz/targets/config_fuzz.cc): 0 a regular file
# holding the rest, 10 a symlink to it, 11 a directory, 12 a dangling symlink, 13 a FIFO, 14 a path
# through a regular file, 15 an over-long name.
SMALL_CONFIG = (b"listen: 127.0.0.1:0\nhost:\n  capacity: 64MiB\n  eviction: lru\n"
                b"limits:\n  max_key_bytes: 512\n  max_value_bytes: 1MiB\nssd:\n  dir: /tmp/x\n"
                b"  capacity: 64MiB\n  segment_size: 8MiB\nlm:\n  listen: 127.0.0.1:0\n"
                b"  namespace: ns\n")
put("config", "kvdepot.yaml",
    b"\0" + open(os.path.join(ROOT, "config", "kvdepot.yaml"), "rb").read())
put("config", "small.yaml", b"\0" + SMALL_CONFIG)
put("config", "quota.yaml", b"\0host:\n  quotas:\n    00112233445566778899aabbccddeeff: 2GiB\n")
put("config", "empty.yaml", b"\0")
put("config", "bad-size.yaml", b"\0host:\n  capacity: 64 MiB\n")
put("config", "symlink.yaml", b"\x0a" + SMALL_CONFIG)
for _shape, _name in ((11, "directory"), (12, "dangling-symlink"), (13, "fifo"),
                      (14, "not-a-directory"), (15, "name-too-long")):
    put("config", _name, bytes([_shape]) + SMALL_CONFIG)

# ---- server: GET_AS over real containers (the test vectors) -----------------------------------
_vec = os.path.join(ROOT, "tests", "vectors")
for _name in ("raw-fp16-small.kvd", "cachegen-fp16-small.kvd", "hack-fp16-tail.kvd"):
    _path = os.path.join(_vec, _name)
    if not os.path.exists(_path):
        continue
    _c = open(_path, "rb").read()
    put("server", "get-as-" + _name.split(".")[0], frame(PUT, put_body([(b"c", _c)]), rid=1) +
        b"".join(frame(GET_AS, get_as(codec, [b"c", b"none"]), rid=2 + codec) for codec in (0, 1, 2)))

# ---- containers: the test vectors; the valid ones also seed the codecs -------------------------
vectors = os.path.join(ROOT, "tests", "vectors")
for f in sorted(os.listdir(vectors)):
    if not f.endswith(".kvd"):
        continue
    data = open(os.path.join(vectors, f), "rb").read()
    put("container", f, data)
    if not f.startswith(("bad", "truncated", "version", "nonzero", "unknown")):
        put("codecs", f, data)
