"""The client SDK as an engine uses it: `cmake --install` puts the headers, static libraries and
CMake package under a prefix, and a project outside the tree (tests/sdk/consumer) finds it with
find_package(kvdepot), builds against it alone and runs (docs/sdk.md)."""
import os
import shutil
import subprocess

import pytest

from kvd import REPO

CMAKE = os.environ.get("KVDEPOT_CMAKE", shutil.which("cmake"))
BUILD_DIR = os.environ.get("KVDEPOT_BUILD_DIR", str(REPO / "build"))
CXX = os.environ.get("KVDEPOT_CXX", "")
WITH_CUDA = os.environ.get("KVDEPOT_WITH_CUDA", "OFF") == "ON"
CUDA_ROOT = os.environ.get("KVDEPOT_CUDA_ROOT", "")


def run(cmd, timeout):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, " ".join(cmd) + "\n" + p.stdout + p.stderr
    return p.stdout


@pytest.mark.skipif(bool(os.environ.get("KVDEPOT_SANITIZE", "")),
                    reason="sanitizer build: its libraries need the sanitizer runtime; the plain "
                           "build tests the SDK")
def test_installed_sdk_builds_and_runs_a_consumer(tmp_path):
    prefix = tmp_path / "prefix"
    run([CMAKE, "--install", BUILD_DIR, "--prefix", str(prefix)], 120)
    libs = ["libkvdepot_codec.a", "libkvdepot_client.a", "libkvdepot_lmcache.so"]
    headers = ["kvdepot/base/status.h", "kvdepot/codec/hack.h", "kvdepot/kvdepot.h",
               "kvdepot/client/client.h"]
    if WITH_CUDA:
        libs += ["libkvdepot_cuda.a", "libkvdepot_client_gpu.a"]
        headers += ["kvdepot/cuda/hack.h", "kvdepot/client/gpu_fetch.h"]
    for lib in libs:
        assert (prefix / "lib" / lib).is_file(), lib
    for header in headers:
        assert (prefix / "include" / header).is_file(), header
    assert (prefix / "lib/cmake/kvdepot/kvdepotConfig.cmake").is_file()

    build = tmp_path / "consumer"
    configure = [CMAKE, "-S", str(REPO / "tests/sdk/consumer"), "-B", str(build),
                 f"-DCMAKE_PREFIX_PATH={prefix}", "-DCMAKE_BUILD_TYPE=Release"]
    if CXX:
        configure.append(f"-DCMAKE_CXX_COMPILER={CXX}")
    if CUDA_ROOT:
        configure.append(f"-DCUDAToolkit_ROOT={CUDA_ROOT}")
    run(configure, 180)
    run([CMAKE, "--build", str(build)], 300)
    p = subprocess.run([str(build / "sdk_consumer")], capture_output=True, text=True, timeout=60)
    print(p.stdout + p.stderr)
    assert p.returncode == 0, p.stdout + p.stderr
    lines = p.stdout.splitlines()
    assert len(lines) == (6 if WITH_CUDA else 5), p.stdout
    assert all(line.startswith("ok: ") for line in lines), p.stdout
    assert "MakePrefixChain" in p.stdout, p.stdout
    if WITH_CUDA:
        assert "workspace was not created" in p.stdout, p.stdout
