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
    got = ref.decode_raw(data)
    want = np.load(VECTORS / arg)
    assert got.shape == want.shape
    assert got.tobytes() == want.tobytes()


@pytest.mark.parametrize("dtype,descr", [("fp16", "<f2"), ("fp32", "<f4")])
def test_cpp_encoder_matches_reference_writer(tmp_path, dtype, descr):
    arr = np.random.default_rng(7).standard_normal((2, 2, 9, 3, 5)).astype(descr)
    np.save(tmp_path / "a.npy", arr)
    proc = subprocess.run([KVDEPOT, "codec", "encode", "--quiet", str(tmp_path / "a.npy"),
                           str(tmp_path / "a.kvd")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "a.kvd").read_bytes() == ref.encode_raw(arr, dtype)
