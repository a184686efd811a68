"""The C programs under bench/kernels/ (issue 52: kernels measured, not assumed) still compile
against the engine's current kernels.h: they call the kernels through its function types, so a
changed signature breaks them, and nothing else builds them (tile_rows.c missed a new argument
once). Syntax and types only (-fsyntax-only): building and running them is BENCHMARKS.md's work."""
from __future__ import annotations

import platform
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PROGRAMS = sorted((ROOT / "bench" / "kernels").glob("*.c"))
#: bf16_dot.c uses AVX-512 BF16 intrinsics, which need the target named (not the CPU to have it)
FLAGS = {"bf16_dot.c": ["-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512bf16"]}

pytestmark = pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64") or shutil.which("gcc") is None,
                                reason="the bench programs are x86 programs built with gcc")


def test_every_program_is_checked() -> None:
    assert {p.name for p in PROGRAMS} >= {"bf16_dot.c", "stream_rows.c", "tile_rows.c"}


@pytest.mark.parametrize("program", PROGRAMS, ids=lambda p: p.name)
def test_the_bench_program_compiles_against_the_engines_kernels(program: Path) -> None:
    cmd = ["gcc", "-fsyntax-only", "-std=c11", "-march=x86-64-v3", "-Werror=implicit-function-declaration",
           "-Werror=incompatible-pointer-types", "-I", str(ROOT / "csrc"), *FLAGS.get(program.name, []), str(program)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
