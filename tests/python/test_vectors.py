"""The committed test vectors, read by the independent Python implementation of the container
format (kvd_reference.py), and the C++ encoder checked byte for byte against that implementation."""
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

import kvd_reference as ref

VECTORS = Path(__file__).resolve().parents[1] / "vectors"
KVDEPOT = os.environ.get("KVDEPOT_BIN", "build/bin/kvdepot")


def manifest():
    for line in (VECTORS / "manifest.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            yield line.split()


@pytest.mark.parametrize("name,expect,arg", list(manifest()))
def test_reference_reader_agrees(name, expect, arg):
    data = (VECTORS / name).read_bytes()
    if expect == "error":
        with pytest.raises(ref.FormatError):
            ref.decode_raw(data)
        return
    want = np.load(VECTORS / arg)
    if name.startswith("cachegen-"):
        got = round_to(ref.decode_cachegen(data), ref.parse(data)[0]["dtype"])
    elif name.startswith("hack-"):
        got = round_to(ref.decode_hack(data), ref.parse(data)[0]["dtype"])
    else:
        got = ref.decode_raw(data)
    assert got.shape == want.shape
    assert got.tobytes() == want.tobytes()


def round_to(values: np.ndarray, dtype: str) -> np.ndarray:
    """float32 -> the container dtype with round-to-nearest-even (bf16 as uint16 bits)."""
    if dtype == "fp32":
        return values.astype("<f4")
    if dtype == "fp16":
        return values.astype("<f2")
    bits = values.astype("<f4").view("<u4").astype(np.uint64)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype("<u2")


@pytest.mark.parametrize("dtype,descr", [("fp16", "<f2"), ("fp32", "<f4")])
def test_cpp_encoder_matches_reference_writer(tmp_path, dtype, descr):
    arr = np.random.default_rng(7).standard_normal((2, 2, 9, 3, 5)).astype(descr)
    np.save(tmp_path / "a.npy", arr)
    proc = subprocess.run([KVDEPOT, "codec", "encode", "--quiet", str(tmp_path / "a.npy"),
                           str(tmp_path / "a.kvd")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "a.kvd").read_bytes() == ref.encode_raw(arr, dtype)
