"""A client of LMCache's remote-server protocol written from its description (docs/lmcache.md),
with nothing but `struct` and sockets: the current layout (LmClient) and the legacy one without
`location` (LegacyLmClient: 182-byte requests, 32-byte replies)."""
import socket
import struct

PUT, GET, EXIST, LIST, HEALTH = 1, 2, 3, 4, 5
SUCCESS, FAIL = 200, 400
CLIENT_FMT = "iiiiiiiii150s"  # command, length, fmt, dtype, location, shape[4], key
SERVER_FMT = "iiiiiiiii"      # code, length, fmt, dtype, shape[4], location
assert struct.calcsize(CLIENT_FMT) == 186 and struct.calcsize(SERVER_FMT) == 36
LEGACY_CLIENT_FMT = "iiiiiiii150s"  # command, length, fmt, dtype, shape[4], key
LEGACY_SERVER_FMT = "iiiiiiii"      # code, length, fmt, dtype, shape[4]
assert struct.calcsize(LEGACY_CLIENT_FMT) == 182 and struct.calcsize(LEGACY_SERVER_FMT) == 32


def client_header(command, key=b"", length=0, fmt=1, dtype=2, location=0, shape=(0, 0, 0, 0)):
    if isinstance(key, str):
        key = key.encode()
    return struct.pack(CLIENT_FMT, command, length, fmt, dtype, location, *shape,
                       key.ljust(150))


def legacy_client_header(command, key=b"", length=0, fmt=1, dtype=2, shape=(0, 0, 0, 0)):
    if isinstance(key, str):
        key = key.encode()
    return struct.pack(LEGACY_CLIENT_FMT, command, length, fmt, dtype, *shape, key.ljust(150))


class LmClient:
    def __init__(self, port, timeout=10):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def close(self):
        self.sock.close()

    def recv_exact(self, n, into=None):
        buf = into if into is not None else bytearray(n)
        view, got = memoryview(buf), 0
        while got < n:
            r = self.sock.recv_into(view[got:], n - got)
            if r == 0:
                raise ConnectionError("closed by the server")
            got += r
        return buf

    def reply(self):
        code, length, fmt, dtype, s0, s1, s2, s3, location = struct.unpack(
            SERVER_FMT, self.recv_exact(36))
        return {"code": code, "length": length, "fmt": fmt, "dtype": dtype,
                "shape": (s0, s1, s2, s3), "location": location}

    def put(self, key, payload, fmt=1, dtype=2, location=0, shape=(0, 0, 0, 0)):
        self.sock.sendall(client_header(PUT, key, len(payload), fmt, dtype, location, shape))
        self.sock.sendall(payload)

    def get(self, key, into=None):
        self.sock.sendall(client_header(GET, key))
        r = self.reply()
        if r["code"] == SUCCESS:
            r["data"] = self.recv_exact(r["length"], into)
        return r

    def exists(self, key):
        self.sock.sendall(client_header(EXIST, key))
        return self.reply()["code"] == SUCCESS

    def health(self):
        self.sock.sendall(client_header(HEALTH))
        return self.reply()["code"] == SUCCESS

    def list(self):
        self.sock.sendall(client_header(LIST))
        r = self.reply()
        assert r["code"] == SUCCESS
        body = bytes(self.recv_exact(r["length"]))
        return body.split(b"\n") if body else []


class LegacyLmClient(LmClient):
    """LMCache before `location` joined its metadata messages (no HEALTH command)."""

    def reply(self):
        code, length, fmt, dtype, s0, s1, s2, s3 = struct.unpack(
            LEGACY_SERVER_FMT, self.recv_exact(32))
        return {"code": code, "length": length, "fmt": fmt, "dtype": dtype,
                "shape": (s0, s1, s2, s3)}

    def put(self, key, payload, fmt=1, dtype=2, location=0, shape=(0, 0, 0, 0)):
        self.sock.sendall(legacy_client_header(PUT, key, len(payload), fmt, dtype, shape))
        self.sock.sendall(payload)

    def get(self, key, into=None):
        self.sock.sendall(legacy_client_header(GET, key))
        r = self.reply()
        if r["code"] == SUCCESS:
            r["data"] = self.recv_exact(r["length"], into)
        return r

    def exists(self, key):
        self.sock.sendall(legacy_client_header(EXIST, key))
        return self.reply()["code"] == SUCCESS

    def list(self):
        self.sock.sendall(legacy_client_header(LIST))
        r = self.reply()
        assert r["code"] == SUCCESS
        body = bytes(self.recv_exact(r["length"]))
        return body.split(b"\n") if body else []


def native_stats(port):
    """STATS over kvdepot's own protocol v1 (docs/protocol.md): the daemon's JSON document."""
    import json
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(struct.pack("<4sBBHQIHH", b"KVDP", 1, 6, 0, 1, 0, 0, 0))
        head = b""
        while len(head) < 24:
            head += s.recv(24 - len(head))
        body_len = struct.unpack_from("<I", head, 16)[0]
        body = b""
        while len(body) < body_len:
            body += s.recv(body_len - len(body))
        return json.loads(body)
