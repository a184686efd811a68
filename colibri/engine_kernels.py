"""Which kernel path the engine's matmuls run: this CPU's default, or one capped by
COLIBRI_ISA (issue 52), so that every path can be tested and measured on one machine.

    COLIBRI_ISA=portable|avx2|avxvnni|avx512vnni|avx512bf16   (unset or "best": no cap)

Uncapped, the engine runs the widest path the CPU runs, but avx512bf16 only on AMD, where its BF16
pairs were measured faster than widening (on the Intel Xeon measured, slower). A cap gives the
widest path the CPU runs that is not wider than it (engine.h,
colibri_config.kernels): a cap wider than the CPU runs gives the CPU's widest, and a path the CPU
lacks a narrower one (Zen 4 has AVX-512 VNNI but not AVX-VNNI, so avxvnni gives avx2). The
path in use is `Engine.kernels`, and `colibri serve` prints it at start-up. The cap reaches only
the matmuls: the rest of the engine is compiled for the build machine (-march=native) unless the
build set COLIBRI_MARCH (setup.py), which the start-up line then names. avx512bf16 alone changes
what is computed, not only how fast: a BF16 matrix multiplies its inputs rounded to bfloat16
(csrc/kernels.h, W_BF16P), so `COLIBRI_ISA=avx512vnni` is the way to exact F32 sums on such a CPU.
"""
from __future__ import annotations

import os
from types import ModuleType

from .engine_errors import EngineArgumentError

ISA_ENV = "COLIBRI_ISA"


def kernel_cap(engine_module: ModuleType) -> int:
    """The COLIBRI_KERNELS_* number COLIBRI_ISA names (0 when unset)."""
    name = os.environ.get(ISA_ENV, "").strip().lower() or "best"
    paths = engine_module.KERNEL_PATHS
    if name not in paths:
        raise EngineArgumentError(f"{ISA_ENV}={name!r} names no kernel path; choose from {', '.join(paths)}")
    return int(paths[name])


def kernels_note(engine: object) -> str:
    """The start-up line's words on the kernel path: which, and whether it was capped."""
    from .engine_threads import load_engine_module

    module = load_engine_module()
    best, march = module.kernels_available(), module.build_march()
    used = getattr(engine, "kernels", best)
    built = "" if march == "native" else f"; the rest of the engine built for -march={march} (COLIBRI_MARCH)"
    if used == best:
        return f"kernels {used} (this CPU's default; {ISA_ENV} caps it){built}"
    return f"kernels {used} ({ISA_ENV}={os.environ.get(ISA_ENV)}; this CPU runs {', '.join(module.kernels_runnable())}){built}"
