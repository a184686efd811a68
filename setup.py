"""Build glue that pyproject.toml cannot express: shipping spec/ and schemas/ inside the
package (so `pip install .` finds them) and the Cython-bound C engine."""
from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).parent
SHIPPED_DIRS = ("spec", "schemas", "web")
KERNEL_PATHS = ("portable", "avx2", "avxvnni", "avx512vnni")


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
        sources=["pyx/engine.pyx", "csrc/engine.c", *(f"csrc/kernels_{p}.c" for p in KERNEL_PATHS)],
        depends=["csrc/engine.h", "csrc/kernels.h", "csrc/kernels.c", "pyx/cengine.pxd"],  # shipped in the sdist too
        include_dirs=["csrc", "pyx", numpy.get_include()],
        define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
        extra_compile_args=["-O3", "-march=native", "-fopenmp", "-std=c11", "-ffp-contract=fast"],
        extra_link_args=["-fopenmp", "-lm"],
    )
    return cythonize([ext], language_level=3, include_path=["pyx"])


setup(cmdclass={"build_py": BuildPyWithData}, ext_modules=extensions())
