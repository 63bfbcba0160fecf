"""The kvdepot binary as a user runs it, checked against numpy: .npy interoperability in both
directions, bit-exact raw round trips, JSON output, and clean failures (one stderr line, an exit
code, never a signal) on hostile files."""
import json
import os
import random
import subprocess
from pathlib import Path

import numpy as np
import pytest

KVDEPOT = os.environ.get("KVDEPOT_BIN", "build/bin/kvdepot")
REAL = Path(os.environ.get("KVDEPOT_SHARED_DATA", "../shared/data")) / "tinystories656k-kv-768tok.npy"


def run(*args, check=True):
    proc = subprocess.run([KVDEPOT, *map(str, args)], capture_output=True, text=True, timeout=60)
    assert proc.returncode >= 0, f"killed by signal {-proc.returncode}: {args}"
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def assert_clean_failure(proc):
    assert proc.returncode in (1, 2), (proc.returncode, proc.stderr)
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("kvdepot: error: "), proc.stderr


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
@pytest.mark.parametrize("order", ["<", ">"])
def test_numpy_written_arrays_round_trip(tmp_path, dtype, order):
    rng = np.random.default_rng(1)
    a = rng.standard_normal((3, 2, 17, 3, 80)).astype(np.dtype(dtype).newbyteorder(order))
    np.save(tmp_path / "a.npy", a)
    run("codec", "encode", tmp_path / "a.npy", tmp_path / "a.kvd")
    run("codec", "decode", tmp_path / "a.kvd", tmp_path / "b.npy")
    b = np.load(tmp_path / "b.npy")
    assert b.dtype == np.dtype(dtype).newbyteorder("<")
    assert b.shape == a.shape
    assert np.array_equal(a.astype(b.dtype).view(np.uint8), b.view(np.uint8))


def test_bf16_travels_as_uint16_bits(tmp_path):
    f32 = np.random.default_rng(2).standard_normal((1, 2, 5, 2, 8)).astype(np.float32)
    bits = (f32.view(np.uint32) >> 16).astype(np.uint16)  # truncated bf16 bit patterns
    np.save(tmp_path / "bf.npy", bits)
    assert_clean_failure(run("codec", "encode", tmp_path / "bf.npy", tmp_path / "x.kvd", check=False))
    run("codec", "encode", "--dtype", "bf16", tmp_path / "bf.npy", tmp_path / "bf.kvd")
    info = json.loads(run("codec", "inspect", "--json", tmp_path / "bf.kvd").stdout)
    assert info["dtype"] == "bf16"
    run("codec", "decode", tmp_path / "bf.kvd", tmp_path / "out.npy")
    out = np.load(tmp_path / "out.npy")
    assert out.dtype == np.uint16 and np.array_equal(out, bits)
    run("codec", "decode", "--dtype", "fp32", tmp_path / "bf.kvd", tmp_path / "out32.npy")
    out32 = np.load(tmp_path / "out32.npy")
    assert np.array_equal(out32, (bits.astype(np.uint32) << 16).view(np.float32))


def test_synth_output_loads_in_numpy(tmp_path):
    run("codec", "synth", tmp_path / "s.npy", "--layers", "2", "--tokens", "64", "--heads", "4",
        "--dim", "16", "--seed", "3")
    s = np.load(tmp_path / "s.npy")
    assert s.shape == (2, 2, 64, 4, 16) and s.dtype == np.float16
    assert np.isfinite(s).all() and s.std() > 0


def test_inspect_and_compare_json(tmp_path):
    run("codec", "synth", tmp_path / "s.npy", "--tokens", "32", "--heads", "2", "--dim", "64")
    run("codec", "encode", tmp_path / "s.npy", tmp_path / "s.kvd")
    info = json.loads(run("codec", "inspect", "--json", tmp_path / "s.kvd").stdout)
    assert info["codec"] == "raw" and info["shape"] == [2, 2, 32, 2, 64]
    assert info["fp16_bytes"] == 2 * 2 * 32 * 2 * 64 * 2
    assert info["encoded_bytes"] == (tmp_path / "s.kvd").stat().st_size
    assert [s["kind"] for s in info["sections"]] == ["payload"]
    a = np.load(tmp_path / "s.npy").astype(np.float64)
    b = a * (1 + 1e-3)
    np.save(tmp_path / "b.npy", b.astype(np.float32))
    cmp = json.loads(run("codec", "compare", "--json", tmp_path / "s.npy", tmp_path / "b.npy").stdout)
    b32 = b.astype(np.float32).astype(np.float64)
    want = np.linalg.norm(a - b32) / np.linalg.norm(a)
    assert cmp["rel_l2"] == pytest.approx(want, rel=1e-6)
    assert cmp["max_abs"] == pytest.approx(np.abs(a - b32).max(), rel=1e-6)
    assert cmp["snr_db"] == pytest.approx(10 * np.log10((a * a).sum() / ((a - b32) ** 2).sum()), rel=1e-6)
    assert cmp["bit_exact"] is False


@pytest.mark.skipif(not REAL.exists(), reason=f"{REAL} not present")
def test_real_kv_round_trip(tmp_path):
    run("codec", "encode", REAL, tmp_path / "r.kvd")
    run("codec", "decode", tmp_path / "r.kvd", tmp_path / "r.npy")
    assert (tmp_path / "r.npy").read_bytes()[128:] == np.load(REAL).tobytes()
    assert np.array_equal(np.load(tmp_path / "r.npy"), np.load(REAL))


def test_rejected_numpy_arrays(tmp_path):
    cases = {
        "f64.npy": np.zeros((1, 2, 1, 1, 1), np.float64),
        "4d.npy": np.zeros((2, 1, 1, 1), np.float16),
        "kv3.npy": np.zeros((1, 3, 1, 1, 1), np.float16),
        "fortran.npy": np.asfortranarray(np.ones((2, 2, 2, 2, 2), np.float16)),
        "int.npy": np.zeros((1, 2, 1, 1, 1), np.int32),
    }
    for name, arr in cases.items():
        np.save(tmp_path / name, arr)
        assert_clean_failure(run("codec", "encode", tmp_path / name, tmp_path / "o.kvd", check=False))
    assert not (tmp_path / "o.kvd").exists()


def test_hostile_files_never_crash(tmp_path):
    run("codec", "synth", tmp_path / "s.npy", "--tokens", "3", "--heads", "1", "--dim", "4")
    run("codec", "encode", tmp_path / "s.npy", tmp_path / "s.kvd")
    rng = random.Random(4)
    for src, cmd in [("s.kvd", "decode"), ("s.kvd", "inspect"), ("s.npy", "encode")]:
        data = bytearray((tmp_path / src).read_bytes())
        for trial in range(60):
            bad = bytearray(data)
            if trial % 3 == 0:
                bad = bad[: rng.randrange(len(bad))]
            else:
                for _ in range(rng.randrange(1, 4)):
                    bad[rng.randrange(len(bad))] = rng.randrange(256)
            (tmp_path / "bad").write_bytes(bytes(bad))
            args = [cmd, tmp_path / "bad"] + ([] if cmd == "inspect" else [tmp_path / "out"])
            proc = run("codec", *args, check=False)
            if proc.returncode != 0:
                assert_clean_failure(proc)
