"""Build llama.cpp's `llama-server` and `llama-bench` from the sources vendored in the llama-cpp-python sdist.

PyPI is the only reachable source of llama.cpp, and taking it from the same sdist that the
llama-cpp-python peer compiles keeps the two peers on one llama.cpp revision.
"""
from __future__ import annotations

import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

from cachedir import CACHE, sh, step

SRC = CACHE / "src"
BUILD = CACHE / "llama.cpp" / "build"
LLAMA_SERVER = BUILD / "bin" / "llama-server"
LLAMA_BENCH = BUILD / "bin" / "llama-bench"

# No tests, no examples, no network code: the server only reads a local GGUF.
CMAKE_FLAGS = ["-DCMAKE_BUILD_TYPE=Release", "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF",
               "-DLLAMA_OPENSSL=OFF", "-DLLAMA_CURL=OFF", "-DBUILD_SHARED_LIBS=OFF"]


def ensure_sdist() -> Path:
    """The llama-cpp-python sdist in src/ (also used by the llama-cpp-python peer via --find-links)."""
    found = sorted(SRC.glob("llama_cpp_python-*.tar.gz"))
    if found:
        return found[-1]
    with step("llama-cpp-python sdist (for its vendored llama.cpp)"):
        sh([sys.executable, "-m", "pip", "download", "--no-binary", ":all:", "--no-deps", "-d", SRC,
            "llama-cpp-python"], "llama-server-install")
    return sorted(SRC.glob("llama_cpp_python-*.tar.gz"))[-1]


def ensure_llama_server() -> Path:
    if LLAMA_SERVER.exists() and LLAMA_BENCH.exists():
        return LLAMA_SERVER
    sdist = ensure_sdist()
    tree = SRC / sdist.name.removesuffix(".tar.gz")
    if not (tree / "vendor" / "llama.cpp" / "CMakeLists.txt").exists():
        shutil.rmtree(tree, ignore_errors=True)
        with tarfile.open(sdist) as t:
            t.extractall(SRC, filter="data")
    generator = ["-G", "Ninja"] if shutil.which("ninja") else []
    with step(f"llama-server + llama-bench (cmake {' '.join(generator) or 'make'}, -j2) into {BUILD}"):
        sh(["cmake", "-S", tree / "vendor" / "llama.cpp", "-B", BUILD, *generator, *CMAKE_FLAGS],
           "llama-server-install")
        sh(["cmake", "--build", BUILD, "--target", "llama-server", "llama-bench", "-j2"], "llama-server-install")
    return LLAMA_SERVER


def llama_server_version() -> str:
    """`llama-server --version` prints e.g. 'version: 6568 (3ecb2f67)' on stderr."""
    out = subprocess.run([str(LLAMA_SERVER), "--version"], capture_output=True, text=True, timeout=30)
    for line in (out.stdout + out.stderr).splitlines():
        if line.startswith("version:"):
            return line.removeprefix("version:").strip()
    return "unknown"
