"""How the C engine's OpenMP threads wait between steps, and how many of them it uses (issue 52).

The engine splits every matmul and the attention of each layer over its threads: a decode step
of SmolLM2-135M is about 150 parallel regions, each ending in a barrier. libgomp's default is to
spin at a barrier (up to 300000 polls) before sleeping. On a machine where other work keeps the
cores busy, a spinning thread holds a core the descheduled thread it waits for needs, and never
sleeps long enough to earn the scheduler's wake-up preference. Measured on 2 cores shared with
other work (load average ~20), beside 0, 1 and 2 busy-looping processes: 2 spinning threads decoded
0.3-0.7 tok/s, one thread 6-25, two sleeping ("passive") threads 24-56 (bench/contention.py,
BENCHMARKS.md). So the engine's threads wait passively unless the user's own OMP_WAIT_POLICY or
GOMP_SPINCOUNT says otherwise.

libgomp reads its environment once, when it is loaded: the first import of colibri._engine.
`load_engine_module` sets the policy just for that import and restores the environment after, so
child processes (a llama.cpp peer, a test server) keep their own defaults.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path
from types import ModuleType

WAIT_ENV = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")
DEFAULT_POLICY = "PASSIVE"

_wait_note = ""


def _libgomp_loaded() -> bool:
    try:
        return "libgomp" in Path("/proc/self/maps").read_text()
    except OSError:  # not Linux: no way to tell; the policy below still applies if it is not loaded
        return False


def load_engine_module() -> ModuleType:
    """colibri._engine, imported with passive OpenMP waiting unless the environment chose."""
    global _wait_note
    if "colibri._engine" in sys.modules:
        if not _wait_note:  # imported directly, not through here: libgomp read the environment as it was
            _wait_note = "OpenMP waiting as libgomp read the environment (colibri._engine was imported directly)"
        return sys.modules["colibri._engine"]
    chosen = [f"{k}={os.environ[k]}" for k in WAIT_ENV if k in os.environ]
    if chosen:
        _wait_note = f"OpenMP waiting as the environment says ({', '.join(chosen)})"
    elif _libgomp_loaded():
        _wait_note = ("OpenMP waiting as libgomp's default (spinning): another module loaded libgomp first; "
                      "set OMP_WAIT_POLICY=passive before starting Python")
    else:
        _wait_note = "threads sleep at barriers (OMP_WAIT_POLICY=passive, set by colibri: spinning collapses on busy cores)"
        os.environ["OMP_WAIT_POLICY"] = DEFAULT_POLICY
    try:
        from . import _engine
    finally:
        if not chosen:
            os.environ.pop("OMP_WAIT_POLICY", None)
    return _engine


def usable_cores() -> int:
    """Cores this process may run on (its affinity mask, e.g. taskset or a container's cpuset)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def threads_note(requested: int) -> str:
    """One start-up line: the engine's thread count, how it was chosen, and how its threads wait."""
    if requested > 0:
        used, how = requested, "--engine-threads"
    else:
        used, how = usable_cores(), "--engine-threads 0: every core this process may use"
    return f"{used} thread{'s' if used != 1 else ''} ({how}); {_wait_note or 'OpenMP waiting as libgomp defaults'}"
