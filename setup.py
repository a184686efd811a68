"""Build glue that pyproject.toml cannot express: shipping spec/ and schemas/ inside the
package (so `pip install .` finds them) and the Cython-bound C engine."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).parent
SHIPPED_DIRS = ("spec", "schemas", "web")
KERNEL_PATHS = ("portable", "avx2", "avxvnni", "avx512vnni", "avx512bf16")
#: The instruction set the engine outside the matmul kernels (attention, norms, sampling) is
#: compiled for: this machine's own by default. COLIBRI_MARCH=x86-64-v3 builds it for any AVX2
#: CPU, so that with COLIBRI_ISA=avx2 the whole engine runs as on an AVX2-only machine (issue 52);
#: each kernels_<path>.c still adds its own target and is picked at load from the CPU's features.
MARCH = os.environ.get("COLIBRI_MARCH", "native")


class BuildPyWithData(build_py):
    """Copy the top-level data folders into colibri/data/ of the build tree."""

    def run(self) -> None:
        super().run()
        for name in SHIPPED_DIRS:
            src = ROOT / name
            if src.is_dir():
                dst = Path(self.build_lib) / "colibri" / "data" / name
                shutil.rmtree(dst, ignore_errors=True)
                shutil.copytree(src, dst)


def extensions() -> list:
    if not (ROOT / "pyx" / "engine.pyx").exists():
        return []
    from Cython.Build import cythonize
    from setuptools import Extension

    import numpy

    ext = Extension(
        "colibri._engine",
        # the matmul kernels once per instruction set (csrc/kernels.h), picked at load
        sources=["pyx/engine.pyx", "csrc/engine.c", "csrc/pool.c", *(f"csrc/kernels_{p}.c" for p in KERNEL_PATHS)],
        depends=["csrc/engine.h", "csrc/kernels.h", "csrc/pool.h", "csrc/kernels.c", "pyx/cengine.pxd"],  # shipped in the sdist too
        include_dirs=["csrc", "pyx", numpy.get_include()],
        define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION"), ("COLIBRI_MARCH", f'"{MARCH}"')],
        # -fopenmp-simd: the `omp simd` hints only; the threads are the engine's own (csrc/pool.c)
        extra_compile_args=["-O3", f"-march={MARCH}", "-fopenmp-simd", "-std=c11", "-ffp-contract=fast"],
        extra_link_args=["-lpthread", "-lm"],
    )
    return cythonize([ext], language_level=3, include_path=["pyx"])


setup(cmdclass={"build_py": BuildPyWithData}, ext_modules=extensions())
