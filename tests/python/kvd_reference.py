"""An independent reader and writer of the kvdepot chunk container, format v1, written from
docs/format.md alone (it shares no code with the C++ implementation). Tests use it to check the
committed test vectors and the C++ encoder byte for byte; other implementations can copy it."""
import struct

import numpy as np
import xxhash

MAGIC = b"\x89KVD\r\n\x1a\n"
HEADER = struct.Struct("<8sHHBBHIIIIIIQQQ")  # 64 bytes
ENTRY = struct.Struct("<IIQQQ")  # 32 bytes
CODECS = {0: "raw", 1: "cachegen", 2: "hack-int2"}
DTYPES = {1: ("fp16", "<f2"), 2: ("bf16", "<u2"), 3: ("fp32", "<f4")}
KINDS = {1: "params", 2: "payload", 3: "tables", 4: "scales", 5: "codes", 6: "sums", 7: "tail",
         8: "index", 9: "metadata"}
assert HEADER.size == 64 and ENTRY.size == 32


class FormatError(Exception):
    pass


def _align(n):
    return (n + 63) // 64 * 64


def parse(data: bytes):
    """Returns (header dict, [section dict]); raises FormatError naming the field."""
    if len(data) < 64:
        raise FormatError("truncated header")
    (magic, version, header_bytes, codec, dtype, flags, layers, kv, tokens, heads, dim, count,
     total, reserved, header_sum) = HEADER.unpack_from(data)
    if magic != MAGIC:
        raise FormatError("magic")
    if version != 1:
        raise FormatError("version")
    if header_bytes != 64:
        raise FormatError("header_bytes")
    if not 1 <= count <= 16:
        raise FormatError("section_count")
    table_end = 64 + 32 * count
    if len(data) < table_end:
        raise FormatError("truncated table")
    if xxhash.xxh3_64_intdigest(data[:56] + data[64:table_end]) != header_sum:
        raise FormatError("header checksum")
    if codec not in CODECS:
        raise FormatError("codec")
    if dtype not in DTYPES:
        raise FormatError("dtype")
    if flags != 0 or reserved != 0 or kv != 2:
        raise FormatError("flags/reserved/kv")
    for name, value, limit in (("layers", layers, 1024), ("tokens", tokens, 65536),
                               ("kv_heads", heads, 1024), ("head_dim", dim, 1024)):
        if not 1 <= value <= limit:
            raise FormatError(name)
    if total != len(data):
        raise FormatError("total_bytes")
    sections, end = [], table_end
    for i in range(count):
        kind, sflags, offset, length, checksum = ENTRY.unpack_from(data, 64 + 32 * i)
        if sflags & ~1:
            raise FormatError("section flags")
        if kind not in KINDS and not sflags & 1:
            raise FormatError("unknown section kind")
        if offset != _align(end) or offset + length > total:
            raise FormatError("section offset/length")
        if any(data[end:offset]):
            raise FormatError("padding")
        body = data[offset:offset + length]
        if xxhash.xxh3_64_intdigest(body) != checksum:
            raise FormatError("section checksum")
        sections.append({"kind": KINDS.get(kind, kind), "flags": sflags, "bytes": body})
        end = offset + length
    if end != total:
        raise FormatError("last section end")
    header = {"codec": CODECS[codec], "dtype": DTYPES[dtype][0],
              "shape": (layers, 2, tokens, heads, dim)}
    return header, sections


def decode_raw(data: bytes) -> np.ndarray:
    header, sections = parse(data)
    assert header["codec"] == "raw"
    payloads = [s for s in sections if s["kind"] == "payload"]
    if len(payloads) != 1:
        raise FormatError("payload count")
    descr = {v[0]: v[1] for v in DTYPES.values()}[header["dtype"]]
    arr = np.frombuffer(payloads[0]["bytes"], dtype=descr)
    if arr.size != np.prod(header["shape"]):
        raise FormatError("payload length")
    return arr.reshape(header["shape"])


def encode(codec: int, dtype: int, shape, sections) -> bytes:
    """sections: [(kind, flags, bytes)] in order. shape: (layers, 2, tokens, heads, dim)."""
    layers, kv, tokens, heads, dim = shape
    table_end = 64 + 32 * len(sections)
    offsets, end = [], table_end
    for _, _, body in sections:
        offsets.append(_align(end))
        end = offsets[-1] + len(body)
    out = bytearray(end)
    table = b"".join(ENTRY.pack(kind, flags, off, len(body), xxhash.xxh3_64_intdigest(body))
                     for (kind, flags, body), off in zip(sections, offsets))
    out[64:table_end] = table
    for (_, _, body), off in zip(sections, offsets):
        out[off:off + len(body)] = body
    head = HEADER.pack(MAGIC, 1, 64, codec, dtype, 0, layers, kv, tokens, heads, dim,
                       len(sections), end, 0, 0)
    header_sum = xxhash.xxh3_64_intdigest(head[:56] + table)
    out[:64] = head[:56] + struct.pack("<Q", header_sum)
    return bytes(out)


def encode_raw(arr: np.ndarray, dtype: str) -> bytes:
    code = {v[0]: k for k, v in DTYPES.items()}[dtype]
    body = np.ascontiguousarray(arr).astype(DTYPES[code][1]).tobytes()
    return encode(0, code, arr.shape, [(2, 0, body)])


def _f16(bits):
    return float(np.array([bits], np.uint16).view(np.float16)[0])


def decode_cachegen(data: bytes) -> np.ndarray:
    """Decodes a cachegen container to float32 values of its decoded tensor (before the final
    rounding to the container dtype), following docs/format.md §1.5."""
    header, sections = parse(data)
    assert header["codec"] == "cachegen"
    by_kind = {s["kind"]: s["bytes"] for s in sections}
    L, _, T, H, D = header["shape"]
    C = H * D
    params = by_kind["params"]
    version, prob_bits, scale_dtype, cpl, reserved = struct.unpack_from("<BBBBI", params)
    if version != 1 or prob_bits != 12 or reserved != 0 or cpl != min(16, -(-512 // T)):
        raise FormatError("params")
    bins = list(params[8:8 + 2 * L])
    groups = -(-C // (32 * cpl))
    freq_all = np.frombuffer(by_kind["tables"], "<u2")
    sdt = {1: "<f2", 3: "<f4"}[scale_dtype]
    scales = np.frombuffer(by_kind["scales"], sdt).astype(np.float32).reshape(2 * L, C, 2)
    index = np.frombuffer(by_kind["index"], "<u4")
    words = np.frombuffer(by_kind["codes"], "<u2")
    out = np.zeros((2 * L, T, C), np.float32)
    table_at = 0
    for lk in range(2 * L):
        freq = [int(f) for f in freq_all[table_at:table_at + bins[lk]]]
        table_at += bins[lk]
        if sum(freq) != 4096:
            raise FormatError("table sum")
        cum = [sum(freq[:s]) for s in range(len(freq))]
        slot_sym = [s for s, f in enumerate(freq) for _ in range(f)]
        for g in range(groups):
            gi = lk * groups + g
            pos, end = (int(index[gi - 1]) if gi else 0), int(index[gi])
            lanes = [j for j in range(32) if g * cpl * 32 + j < C]
            state = {}
            for j in lanes:
                state[j] = int(words[pos]) | int(words[pos + 1]) << 16
                pos += 2
            for k in range(cpl):
                for t in range(T):
                    for j in lanes:
                        c = (g * cpl + k) * 32 + j
                        if c >= C:
                            continue
                        x = state[j]
                        slot = x & 4095
                        s = slot_sym[slot]
                        x = freq[s] * (x >> 12) + slot - cum[s]
                        if x < 1 << 16:
                            if pos >= end:
                                raise FormatError("group ends early")
                            x = (x << 16) | int(words[pos])
                            pos += 1
                        state[j] = x
                        lo, step = scales[lk, c]
                        out[lk, t, c] = np.float32(lo) + np.float32(np.float32(s) * step)
            if pos != end or any(v != 1 << 16 for v in state.values()):
                raise FormatError("group end")
    return out.reshape(L, 2, T, H, D)


def decode_hack(data: bytes) -> np.ndarray:
    """Decodes a hack-int2 container to float32 values of its decoded tensor (before the final
    rounding to the container dtype), following docs/format.md §1.5."""
    header, sections = parse(data)
    assert header["codec"] == "hack-int2"
    by_kind = {s["kind"]: s["bytes"] for s in sections}
    L, _, T, H, D = header["shape"]
    (version, P, orientation, rounding, sb, _r8, S, _r32,
     seed) = struct.unpack("<BBBBB3sIIQ", by_kind["params"])
    if version != 1 or P not in (32, 64, 128) or sb != (1 if P <= 64 else 2):
        raise FormatError("params")
    B = (T - S) // P
    G = -(-D // P)
    scales = np.frombuffer(by_kind["scales"], "<u2").reshape(-1, 2)
    codes_bytes = np.frombuffer(by_kind["codes"], np.uint8)
    codes = np.stack([(codes_bytes >> (2 * k)) & 3 for k in range(4)], axis=1).reshape(-1)
    dt = {"fp16": "<f2", "bf16": "<u2", "fp32": "<f4"}[header["dtype"]]
    U = T - B * P
    tail = np.frombuffer(by_kind["tail"], dt).reshape(L, 2, U, H, D)
    if header["dtype"] == "bf16":
        tail = (tail.astype(np.uint32) << 16).view(np.float32)
    out = np.zeros((L, 2, T, H, D), np.float32)
    unquantized = list(range(S)) + list(range(S + B * P, T))
    for u, t in enumerate(unquantized):
        out[:, :, t] = tail[:, :, u]
    f16 = lambda bits: np.float32(np.array([bits], np.uint16).view(np.float16)[0])
    part_at = 0
    for layer in range(L):
        for kv in range(2):
            for head in range(H):
                for block in range(B):
                    g = ((layer * 2 + kv) * H + head) * B + block
                    base = g * P * D
                    for t in range(P):
                        for d in range(D):
                            if kv == 0:
                                code = codes[base + t * D + d]
                                p = t * G + d // P if orientation == 1 else d
                            else:
                                code = codes[base + d * P + t]
                                p = d
                            scale, mn = scales[part_at + p]
                            value = f16(mn) + np.float32(np.float32(code) * f16(scale))
                            out[layer, kv, S + block * P + t, head, d] = value
                    part_at += (P * G) if (kv == 0 and orientation == 1) else D
    if part_at != len(scales):
        raise FormatError("partition count")
    return out
