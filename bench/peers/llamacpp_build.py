"""Build llama.cpp's `llama-server`, `llama-bench`, `llama-batched-bench` and `llama-quantize` from the sources vendored in the llama-cpp-python sdist.

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
# The llama.cpp revision of both llama.cpp peers: the one vendored in this llama-cpp-python sdist
# (pinned, as every peer in catalog.py, so a fresh cache rebuilds what docs/compat records).
LLAMA_CPP_PYTHON_VERSION = "0.3.36"
BUILD = CACHE / "llama.cpp" / "build"
LLAMA_SERVER = BUILD / "bin" / "llama-server"
LLAMA_BENCH = BUILD / "bin" / "llama-bench"
LLAMA_BATCHED_BENCH = BUILD / "bin" / "llama-batched-bench"
LLAMA_QUANTIZE = BUILD / "bin" / "llama-quantize"  # makes the Q8_0/Q4_0/BF16/F32 files the engine benchmark compares
TARGETS = {"llama-server": LLAMA_SERVER, "llama-bench": LLAMA_BENCH, "llama-batched-bench": LLAMA_BATCHED_BENCH,
           "llama-quantize": LLAMA_QUANTIZE}

FLAGS_STAMP = BUILD / "colibri-peers-flags.txt"  # the flags the binaries were built with

# No tests, no examples, no network code: the server only reads a local GGUF.
CMAKE_FLAGS = ["-DCMAKE_BUILD_TYPE=Release", "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF",
               "-DLLAMA_OPENSSL=OFF", "-DLLAMA_CURL=OFF", "-DBUILD_SHARED_LIBS=OFF"]

# This VM's CPU advertises AMX, so ggml's -march=native build turns on its AMX kernels, and those
# segfault on the first matmul of the Q4_1 model (in ggml_backend_amx_mul_mat). AVX-512 is kept.
# Also given to the llama-cpp-python build, which compiles the same ggml.
COMPILER_ENV = {"CFLAGS": "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16",
                "CXXFLAGS": "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"}


def ensure_sdist() -> Path:
    """The llama-cpp-python sdist in src/ (also used by the llama-cpp-python peer via --find-links)."""
    want = SRC / f"llama_cpp_python-{LLAMA_CPP_PYTHON_VERSION}.tar.gz"
    if want.exists():
        return want
    with step(f"llama-cpp-python {LLAMA_CPP_PYTHON_VERSION} sdist (for its vendored llama.cpp)"):
        sh([sys.executable, "-m", "pip", "download", "--no-binary", ":all:", "--no-deps", "-d", SRC,
            f"llama-cpp-python=={LLAMA_CPP_PYTHON_VERSION}"], "llama-server-install")
    return want


def _source_tree() -> Path:
    """The sdist unpacked in src/ (unpacked again when incomplete)."""
    sdist = ensure_sdist()
    tree = SRC / sdist.name.removesuffix(".tar.gz")
    if not (tree / "vendor" / "llama.cpp" / "CMakeLists.txt").exists():
        shutil.rmtree(tree, ignore_errors=True)
        with tarfile.open(sdist) as t:
            t.extractall(SRC, filter="data")
    return tree


def _flags() -> str:
    return " ".join([*CMAKE_FLAGS, *(f"{k}={v}" for k, v in COMPILER_ENV.items())])


def _configured() -> bool:
    """The build tree was configured with today's flags (else a flag fix would never take effect)."""
    return FLAGS_STAMP.exists() and FLAGS_STAMP.read_text() == _flags()


def llama_server_built() -> bool:
    return _configured() and all(path.exists() for path in TARGETS.values())


def ensure_llama_server() -> Path:
    if llama_server_built():
        return LLAMA_SERVER
    if _configured():  # a binary added since the tree was built: an incremental build of what is missing
        missing = [name for name, path in TARGETS.items() if not path.exists()]
        with step(f"{', '.join(missing)} (incremental, -j2) into {BUILD}"):
            sh(["cmake", "--build", BUILD, "--target", *missing, "-j2"], "llama-server-install", env=COMPILER_ENV)
        return LLAMA_SERVER
    tree = _source_tree()
    generator = ["-G", "Ninja"] if shutil.which("ninja") else []
    with step(f"llama-server + llama-bench (cmake {' '.join(generator) or 'make'}, -j2) into {BUILD}"):
        shutil.rmtree(BUILD, ignore_errors=True)  # CFLAGS are read only when the cache is first made
        sh(["cmake", "-S", tree / "vendor" / "llama.cpp", "-B", BUILD, *generator, *CMAKE_FLAGS],
           "llama-server-install", env=COMPILER_ENV)
        sh(["cmake", "--build", BUILD, "--target", *TARGETS, "-j2"], "llama-server-install", env=COMPILER_ENV)
        FLAGS_STAMP.write_text(_flags())
    return LLAMA_SERVER


# The same revision built for a CPU without AVX-512 (issue 52's AVX2 comparison): no -march=native,
# AVX2 + FMA + F16C (+ the SSE/AVX/BMI2 levels below them, on by default once native is off), every
# AVX-512, VNNI and AMX option off. Only llama-bench and llama-batched-bench: the comparison is the
# engines', not the servers'.
BUILD_AVX2 = CACHE / "llama.cpp" / "build-avx2"
LLAMA_BENCH_AVX2 = BUILD_AVX2 / "bin" / "llama-bench"
LLAMA_BATCHED_BENCH_AVX2 = BUILD_AVX2 / "bin" / "llama-batched-bench"
AVX2_FLAGS = ["-DGGML_NATIVE=OFF", "-DGGML_AVX=ON", "-DGGML_AVX2=ON", "-DGGML_FMA=ON", "-DGGML_F16C=ON",
              "-DGGML_BMI2=ON", "-DGGML_AVX_VNNI=OFF", "-DGGML_AVX512=OFF", "-DGGML_AVX512_VBMI=OFF",
              "-DGGML_AVX512_VNNI=OFF", "-DGGML_AVX512_BF16=OFF", "-DGGML_AMX_TILE=OFF", "-DGGML_AMX_INT8=OFF",
              "-DGGML_AMX_BF16=OFF"]
AVX2_STAMP = BUILD_AVX2 / "colibri-peers-flags.txt"


def ensure_llama_bench_avx2() -> Path:
    """llama-bench (and llama-batched-bench, LLAMA_BATCHED_BENCH_AVX2) built for AVX2 only, in their own
    build tree; rebuilt when missing or built with other flags."""
    flags = " ".join([*CMAKE_FLAGS, *AVX2_FLAGS])
    built = LLAMA_BENCH_AVX2.exists() and LLAMA_BATCHED_BENCH_AVX2.exists()
    if built and AVX2_STAMP.exists() and AVX2_STAMP.read_text() == flags:
        return LLAMA_BENCH_AVX2
    tree = _source_tree()
    generator = ["-G", "Ninja"] if shutil.which("ninja") else []
    with step(f"llama-bench and llama-batched-bench for AVX2 only (cmake, -j2) into {BUILD_AVX2}"):
        shutil.rmtree(BUILD_AVX2, ignore_errors=True)
        sh(["cmake", "-S", tree / "vendor" / "llama.cpp", "-B", BUILD_AVX2, *generator, *CMAKE_FLAGS, *AVX2_FLAGS],
           "llama-bench-avx2-install")
        sh(["nice", "-n", "10", "cmake", "--build", BUILD_AVX2, "--target", "llama-bench", "llama-batched-bench",
            "-j2"],
           "llama-bench-avx2-install")
        AVX2_STAMP.write_text(flags)
    return LLAMA_BENCH_AVX2


def llama_server_version() -> str:
    """`llama-server --version` prints e.g. 'version: 0.5.0-dev (build 1, commit 0c1e570)' on stderr."""
    out = subprocess.run([str(LLAMA_SERVER), "--version"], capture_output=True, text=True, timeout=30)
    for line in (out.stdout + out.stderr).splitlines():
        if line.startswith("version:"):
            return line.removeprefix("version:").strip()
    return "unknown"
