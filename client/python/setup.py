"""Builds kvdepot._kvdepot from the client library's sources (no CMake, no daemon libraries):
the extension compiles the kvdepot client and the parts of kvdepot_codec that it uses."""
import os

from pybind11.setup_helpers import Pybind11Extension, build_ext
from setuptools import setup

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", ".."))
CODEC = ["status.cc", "tensor.cc", "codec_id.cc", "sha256.cc", "chunk_key.cc", "protocol.cc",
         "lm_value.cc"]
CLIENT = ["client.cc", "client_cluster.cc", "cluster_routes.cc", "socket_io.cc"]
CLUSTER = ["topology.cc"]  # placement, for the client's cluster routing


def repo_sources():
    """setuptools wants source paths relative to this directory and inside it: one stub per
    repository source, under build/, that #includes it."""
    stubs = os.path.join("build", "kvdepot-sources")
    os.makedirs(os.path.join(HERE, stubs), exist_ok=True)
    out = []
    for folder, names in (("codec", CODEC), ("client", CLIENT), ("cluster", CLUSTER)):
        for name in names:
            stub = os.path.join(stubs, f"{folder}_{name}")
            text = f'#include "{os.path.join(REPO, folder, "src", name)}"\n'
            path = os.path.join(HERE, stub)
            if not os.path.exists(path) or open(path).read() != text:
                with open(path, "w") as f:
                    f.write(text)
            out.append(stub)
    return out


INCLUDES = [os.path.join(REPO, "codec", "include"), os.path.join(REPO, "client", "include"),
            os.path.join(REPO, "client", "src"), os.path.join(REPO, "cluster", "include")]
LIBRARIES = ["ssl", "crypto"]  # the client's TLS (OpenSSL)

setup(
    ext_modules=[
        Pybind11Extension("kvdepot._kvdepot", ["src/kvdepot_module.cc"] + repo_sources(),
                          include_dirs=INCLUDES, libraries=LIBRARIES, cxx_std=20,
                          extra_compile_args=["-O2"]),
        # LMCache MP mode's native_plugin L2 connector (kvdepot.lmcache_mp).
        Pybind11Extension("kvdepot._kvdepot_lmcache_mp",
                          ["src/lmcache_mp_module.cc", "src/lmcache_mp_connector.cc"]
                          + repo_sources(),
                          include_dirs=INCLUDES, libraries=LIBRARIES, cxx_std=20,
                          extra_compile_args=["-O2"]),
    ],
    cmdclass={"build_ext": build_ext},
)
