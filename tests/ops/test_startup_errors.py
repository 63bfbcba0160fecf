"""kvdepotd's start-up errors, run on the real binary (issue 19): every bad command line or
configuration makes it exit at once, with status 2 when a value on the command line or in the
config file is wrong (the file itself included: missing, a directory, not a regular file, a value
that can never work) and 1 when the environment refuses a valid configuration (a busy port, a
file a setting names is missing or unreadable, a directory it cannot write). Never by a signal,
and with exactly one `kvdepotd: error: ...` line on stderr that names the setting (YAML key and
flag), its value and the cause; every other stderr line is a logfmt info line. A SIGHUP whose
file cannot be read keeps the daemon serving its running configuration and logs why.
docs/operations.md documents the exit statuses and the size grammar."""
import grp
import os
import pathlib
import signal
import socket
import stat
import subprocess
import tempfile

import pytest

from kvd import KVDEPOTD, Daemon, http_get, logfmt

ERROR_PREFIX = "kvdepotd: error: "


def base_flags(tmp_path):
    """Flags of a daemon that would start: TCP on an ephemeral port, no unix socket, no metrics."""
    return ["--listen", "127.0.0.1:0", "--unix", "", "--metrics-listen", "",
            "--data-dir", str(tmp_path / "data"), "--host-capacity", "64MiB"]


@pytest.fixture
def short_dir():
    """A directory under /tmp for Unix socket paths: pytest's tmp_path lies under the build tree,
    which in CI is deep enough that a socket path in it would exceed sun_path (107 bytes)."""
    with tempfile.TemporaryDirectory(prefix="kvd-") as d:
        yield pathlib.Path(d)


def run_failing(args, expected_rc, *needles):
    """Runs kvdepotd with `args`, which must make it exit within 20 s with `expected_rc`, never by
    a signal, writing exactly one error line that contains every needle. Returns that line."""
    p = subprocess.run([KVDEPOTD, *map(str, args)], capture_output=True, text=True, timeout=20,
                       stdin=subprocess.DEVNULL)
    lines = p.stderr.splitlines()
    assert p.returncode >= 0, f"killed by signal {-p.returncode}:\n{p.stderr}"
    assert p.returncode == expected_rc, p.stderr
    errors = [l for l in lines if l.startswith(ERROR_PREFIX)]
    assert len(errors) == 1, p.stderr
    others = [l for l in lines if not l.startswith(ERROR_PREFIX)]
    assert all(l.startswith("ts=") and " level=info " in l for l in others), p.stderr
    for needle in needles:
        assert str(needle) in errors[0], (needle, errors[0])
    return errors[0]


def listening_socket():
    """A TCP socket listening on an ephemeral loopback port, and that port."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    return s, s.getsockname()[1]


# ---- the config file (exit 2) -------------------------------------------------------------------

@pytest.mark.parametrize("option", ["--config", "--check-config"])
def test_config_path_is_a_directory(tmp_path, option):
    run_failing([option, tmp_path], 2, f"--config {tmp_path}", "is a directory")


def test_config_file_missing(tmp_path):
    missing = tmp_path / "nope.yaml"
    run_failing(["--config", missing], 2, f"--config {missing}", "No such file or directory")


def test_config_file_is_a_dangling_symlink(tmp_path):
    link = tmp_path / "kvdepot.yaml"
    link.symlink_to(tmp_path / "gone.yaml")
    run_failing(["--config", link], 2, f"--config {link}", "No such file or directory")


def test_config_file_is_a_fifo(tmp_path):
    # Opening a FIFO for reading would wait for a writer: the daemon must refuse it at once.
    fifo = tmp_path / "kvdepot.yaml"
    os.mkfifo(fifo)
    run_failing(["--config", fifo], 2, f"--config {fifo}", "not a regular file")


def test_config_file_is_a_device(tmp_path):
    run_failing(["--config", "/dev/zero"], 2, "--config /dev/zero", "not a regular file")


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a mode-000 file anyway; the FIFO, "
                    "device and dangling-symlink cases cover unreadable config paths")
def test_config_file_unreadable(tmp_path):
    config = tmp_path / "kvdepot.yaml"
    config.write_text("listen: 127.0.0.1:0\n")
    config.chmod(0)
    run_failing(["--config", config], 2, f"--config {config}", "Permission denied")


# ---- values (exit 2) ----------------------------------------------------------------------------

BAD_SIZES = ["64 MiB", "-1", "1XB", "99999999999TiB", "64M", "64mib", ""]


@pytest.mark.parametrize("size", BAD_SIZES)
def test_bad_size_flag(tmp_path, size):
    run_failing(base_flags(tmp_path) + ["--host-capacity", size], 2, "--host-capacity",
                "host.capacity", f"'{size}'")


@pytest.mark.parametrize("size", BAD_SIZES)
def test_bad_size_in_config_file(tmp_path, size):
    config = tmp_path / "kvdepot.yaml"
    config.write_text(f'listen: 127.0.0.1:0\nunix: ""\nssd:\n  capacity: "{size}"\n')
    run_failing(["--config", config], 2, f"{config}:4", "ssd.capacity", "--ssd-capacity",
                f"'{size}'")


def test_unix_path_longer_than_sun_path(tmp_path):
    path = tmp_path / ("s" * 200)
    run_failing(base_flags(tmp_path) + ["--unix", path], 2, "--unix", str(path), "at most 107")


def test_listen_address_not_host_port(tmp_path):
    run_failing(base_flags(tmp_path) + ["--listen", "localhost:7600"], 2, "--listen",
                "localhost:7600")


def test_unknown_flag(tmp_path):
    run_failing(base_flags(tmp_path) + ["--host-capacty", "1GiB"], 2, "--host-capacty")


def test_cluster_etcd_without_advertise(tmp_path):
    run_failing(base_flags(tmp_path) + ["--cluster-etcd", "http://127.0.0.1:2379"], 2,
                "cluster.advertise", "--cluster-advertise")


@pytest.mark.parametrize("advertise", ["0.0.0.0:7600", "[::]:7600", "127.0.0.1:0", "node1"])
def test_cluster_advertise_not_reachable(tmp_path, advertise):
    run_failing(base_flags(tmp_path) + ["--cluster-advertise", advertise], 2,
                "--cluster-advertise", advertise)


def cluster_tls_flags(tmp_path):
    """A cluster member whose listener speaks TLS (etcd need not run: these fail before joining)."""
    return base_flags(tmp_path) + ["--cluster-etcd", "http://127.0.0.1:2379",
                                   "--cluster-advertise", "127.0.0.1:7600",
                                   "--tls-cert-file", tmp_path / "server.crt",
                                   "--tls-key-file", tmp_path / "server.key"]


def test_cluster_with_tls_needs_a_ca_for_the_members(tmp_path):
    # Members forward to each other over TLS: something must verify their certificates.
    run_failing(cluster_tls_flags(tmp_path), 2, "cluster.etcd", "tls.cert_file",
                "cluster.tls_ca_file", "--cluster-tls-ca-file", "tls.client_ca_file")


def test_cluster_tls_ca_without_tls(tmp_path):
    run_failing(base_flags(tmp_path) + ["--cluster-etcd", "http://127.0.0.1:2379",
                                        "--cluster-advertise", "127.0.0.1:7600",
                                        "--cluster-tls-ca-file", tmp_path / "ca.crt"], 2,
                "cluster.tls_ca_file", "tls.cert_file", "--cluster-tls-ca-file")


def test_cluster_etcd_not_an_http_url(tmp_path):
    run_failing(base_flags(tmp_path) + ["--cluster-etcd", "127.0.0.1:2379"], 2,
                "--cluster-etcd", "http://HOST:PORT")


# ---- the environment (exit 1) -------------------------------------------------------------------

def test_busy_native_port(tmp_path):
    s, port = listening_socket()
    with s:
        run_failing(base_flags(tmp_path) + ["--listen", f"127.0.0.1:{port}"], 1,
                    f"listen 127.0.0.1:{port}", "address already in use", "--listen")


def test_busy_metrics_port(tmp_path):
    s, port = listening_socket()
    with s:
        run_failing(base_flags(tmp_path) + ["--metrics-listen", f"127.0.0.1:{port}"], 1,
                    f"metrics.listen 127.0.0.1:{port}", "address already in use",
                    "--metrics-listen")


def test_busy_lm_port(tmp_path):
    s, port = listening_socket()
    with s:
        run_failing(base_flags(tmp_path) + ["--lm-listen", f"127.0.0.1:{port}"], 1,
                    f"lm.listen 127.0.0.1:{port}", "address already in use", "--lm-listen")


def test_busy_resp_port(tmp_path):
    s, port = listening_socket()
    with s:
        run_failing(base_flags(tmp_path) + ["--resp-listen", f"127.0.0.1:{port}"], 1,
                    f"resp.listen 127.0.0.1:{port}", "address already in use", "--resp-listen")


def test_unix_socket_directory_missing(tmp_path, short_dir):
    path = short_dir / "no-such-dir" / "kvdepotd.sock"
    run_failing(base_flags(tmp_path) + ["--unix", path], 1, f"unix {path}", "--unix",
                "does not exist")


def test_unix_socket_path_taken_by_a_file(tmp_path, short_dir):
    path = short_dir / "kvdepotd.sock"
    path.write_text("not a socket")
    run_failing(base_flags(tmp_path) + ["--unix", path], 1, f"unix {path}", "--unix",
                "not a socket")


def test_missing_tls_certificate(tmp_path):
    run_failing(base_flags(tmp_path) + ["--tls-cert-file", tmp_path / "server.crt",
                                        "--tls-key-file", tmp_path / "server.key"], 1,
                f"tls.cert_file {tmp_path / 'server.crt'}", "--tls-cert-file",
                "No such file or directory")


def make_cert(tmp_path):
    """A self-signed certificate and its key (server.crt, server.key) made by openssl(1)."""
    crt, key = tmp_path / "server.crt", tmp_path / "server.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-days", "1", "-subj", "/CN=localhost",
                    "-keyout", key, "-out", crt], check=True, capture_output=True, timeout=30)
    return crt, key


def test_cluster_tls_ca_missing(tmp_path):
    make_cert(tmp_path)
    ca = tmp_path / "ca.crt"
    run_failing(cluster_tls_flags(tmp_path) + ["--cluster-tls-ca-file", ca], 1,
                f"cluster.tls_ca_file {ca}", "--cluster-tls-ca-file", "No such file or directory")


def test_cluster_tls_ca_not_a_certificate(tmp_path):
    make_cert(tmp_path)
    ca = tmp_path / "ca.crt"
    ca.write_text("not a PEM certificate\n")
    line = run_failing(cluster_tls_flags(tmp_path) + ["--cluster-tls-ca-file", ca], 1,
                       f"cluster.tls_ca_file {ca}", "--cluster-tls-ca-file")
    assert "asio.ssl error" not in line


def test_bad_tls_key(tmp_path):
    crt, _ = make_cert(tmp_path)
    bad = tmp_path / "bad.key"
    bad.write_text("-----BEGIN PRIVATE KEY-----\nnot base64 at all\n-----END PRIVATE KEY-----\n")
    line = run_failing(base_flags(tmp_path) + ["--tls-cert-file", crt, "--tls-key-file", bad], 1,
                       f"tls.key_file {bad}", "--tls-key-file")
    assert "asio.ssl error" not in line


def test_tls_key_of_another_certificate(tmp_path):
    crt, _ = make_cert(tmp_path)
    other = tmp_path / "other"
    other.mkdir()
    _, other_key = make_cert(other)
    line = run_failing(base_flags(tmp_path) + ["--tls-cert-file", crt, "--tls-key-file",
                                               other_key], 1,
                       f"tls.key_file {other_key}", "--tls-key-file")
    assert "asio.ssl error" not in line


def test_missing_token_file(tmp_path):
    missing = tmp_path / "tokens"
    run_failing(base_flags(tmp_path) + ["--auth-token-file", missing], 1,
                f"auth.token_file {missing}", "--auth-token-file", "No such file or directory")


def test_token_file_is_a_directory(tmp_path):
    run_failing(base_flags(tmp_path) + ["--auth-token-file", tmp_path], 1,
                f"auth.token_file {tmp_path}", "--auth-token-file", "is a directory")


def test_data_dir_cannot_be_created(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    run_failing(base_flags(tmp_path) + ["--data-dir", blocker / "data"], 1,
                f"data_dir {blocker / 'data'}", "--data-dir", "Not a directory")


def test_data_dir_is_a_file(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    run_failing(base_flags(tmp_path) + ["--data-dir", blocker], 1, f"data_dir {blocker}",
                "--data-dir", "not a directory")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes a mode-500 directory anyway; the "
                    "file-in-the-way cases cover directories that cannot be used")
def test_data_dir_not_writable(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    data.chmod(0o500)
    run_failing(base_flags(tmp_path) + ["--data-dir", data], 1, f"data_dir {data}", "--data-dir",
                "Permission denied")


def test_ssd_dir_cannot_be_created(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    run_failing(base_flags(tmp_path) + ["--ssd-dir", blocker / "ssd", "--ssd-capacity", "64MiB",
                                        "--ssd-segment-size", "8MiB",
                                        "--limits-max-value-bytes", "1MiB"], 1,
                f"ssd.dir {blocker / 'ssd'}", "--ssd-dir", "Not a directory")


# ---- one daemon per directory and per socket (issue 23) ------------------------------------------

def test_second_daemon_on_the_same_data_dir_names_the_first(tmp_path):
    first = Daemon(tmp_path)
    try:
        line = run_failing(base_flags(tmp_path), 1, f"data_dir {tmp_path / 'data'}",
                           "another kvdepotd", f"(pid {first.proc.pid})", "--data-dir")
        assert "LOCK" not in line.split("kvdepotd.pid")[0], line  # not RocksDB's lock message
    finally:
        assert first.stop() == 0


def test_second_daemon_on_the_same_ssd_dir_names_the_first(tmp_path):
    ssd = ["--ssd-dir", tmp_path / "ssd", "--ssd-capacity", "64MiB", "--ssd-segment-size", "8MiB"]
    first = Daemon(tmp_path, *map(str, ssd))
    try:
        flags = base_flags(tmp_path) + ["--data-dir", tmp_path / "data2"] + ssd
        run_failing(flags, 1, f"ssd.dir {tmp_path / 'ssd'}", "another kvdepotd",
                    f"(pid {first.proc.pid})", "--ssd-dir")
    finally:
        assert first.stop() == 0


def test_second_daemon_on_a_live_unix_socket_refuses_and_leaves_it(tmp_path, short_dir):
    path = short_dir / "kvdepotd.sock"
    first = Daemon(tmp_path, "--unix", str(path))
    try:
        inode = path.stat().st_ino
        flags = base_flags(tmp_path) + ["--data-dir", tmp_path / "data2", "--unix", path]
        run_failing(flags, 1, f"unix {path}", "another kvdepotd", "--unix")
        assert path.stat().st_ino == inode  # the first daemon's socket is still there
        p = subprocess.run([str(pathlib.Path(KVDEPOTD).parent / "kvdepot"), "--addr",
                            f"unix:{path}", "ping"], capture_output=True, timeout=20)
        assert p.returncode == 0, p.stderr
    finally:
        assert first.stop() == 0
    assert not path.exists()  # the first daemon removed its own socket at exit


def test_a_stale_unix_socket_is_replaced(tmp_path, short_dir):
    path = short_dir / "kvdepotd.sock"
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(path))
    s.close()  # bound, never listened on: nobody answers
    d = Daemon(tmp_path, "--unix", str(path))
    try:
        assert path.is_socket()
    finally:
        assert d.stop() == 0


def test_unix_socket_mode_and_group(tmp_path, short_dir):
    path = short_dir / "kvdepotd.sock"
    group = grp.getgrgid(os.getgid()).gr_name
    d = Daemon(tmp_path, "--unix", str(path), "--unix-mode", "0640", "--unix-group", group)
    try:
        st = path.stat()
        assert stat.S_IMODE(st.st_mode) == 0o640
        assert st.st_gid == os.getgid()
    finally:
        assert d.stop() == 0


def test_unix_group_unknown(tmp_path, short_dir):
    path = short_dir / "kvdepotd.sock"
    run_failing(base_flags(tmp_path) + ["--unix", path, "--unix-group", "no-such-group-kvd"], 1,
                "unix_group no-such-group-kvd", "no such group", "--unix-group")
    assert not path.exists()


def test_unix_mode_not_octal(tmp_path):
    run_failing(base_flags(tmp_path) + ["--unix-mode", "rw"], 2, "--unix-mode", "octal")


# ---- limits.max_value_bytes derived from host.capacity (issue 23) ------------------------------

def test_small_host_capacity_starts_with_a_derived_value_limit(tmp_path):
    d = Daemon(tmp_path, "--host-capacity", "16MiB")
    try:
        line = d.wait_for_line(r'msg="effective configuration"')
        limit = int(logfmt(line)["limits.max_value_bytes"])
        assert 15 << 20 <= limit < 16 << 20, line
    finally:
        assert d.stop() == 0


def test_explicit_value_limit_over_host_capacity_names_both_keys(tmp_path):
    run_failing(base_flags(tmp_path) + ["--host-capacity", "16MiB",
                                        "--limits-max-value-bytes", "64MiB"], 2,
                "limits.max_value_bytes", "host.capacity", "set explicitly",
                "--limits-max-value-bytes", "--host-capacity")


# ---- SIGHUP whose file cannot be read ----------------------------------------------------------

def test_sighup_with_the_config_replaced_by_a_directory_keeps_serving(tmp_path):
    config = tmp_path / "kvdepot.yaml"
    text = (f'listen: 127.0.0.1:0\nunix: ""\ndata_dir: {tmp_path / "data"}\n'
            f"metrics:\n  listen: 127.0.0.1:0\nhost:\n  capacity: 128MiB\n")
    config.write_text(text)
    d = Daemon(tmp_path, config=config)
    try:
        config.unlink()
        config.mkdir()  # a mis-mounted ConfigMap
        for _ in range(2):  # a second reload finds the same directory: still no harm
            mark = len(d.lines)
            d.proc.send_signal(signal.SIGHUP)
            failed = logfmt(d.wait_for_line(r'msg="config reload failed', start=mark))
            assert failed["level"] == "error", failed
            assert str(config) in failed["error"] and "is a directory" in failed["error"], failed
        assert d.proc.poll() is None, "\n".join(d.lines)
        assert b"pong" in d.cli("ping").stdout
        assert http_get(d.base + "/healthz") == (200, "ok\n")

        # A readable file again: the next SIGHUP applies it.
        config.rmdir()
        config.write_text(text.replace("128MiB", "64MiB"))
        mark = len(d.lines)
        d.proc.send_signal(signal.SIGHUP)
        done = logfmt(d.wait_for_line(r'msg="config reloaded"', start=mark))
        assert done["applied"] == "host.capacity", done
        assert d.stop() == 0
    finally:
        d.kill()

