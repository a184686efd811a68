"""How the C engine's threads wait between parallel loops, and how many of them it uses (issue 52).

The engine splits every matmul and each layer's attention over a team of threads of its own
(csrc/pool.c): a decode step of SmolLM2-135M is about 150 such loops, each ending in a wait. How
those waits are spent decides two things at once (BENCHMARKS.md, "Late night" and "Decode beside
busy cores"):

- sleeping at once (libgomp's OMP_WAIT_POLICY=passive, which the engine used before its own team)
  costs a wake-up per loop, about 7 us on this project's VM: 2 threads decoded 256-263 tok/s where
  spinning ones reached 356-376;
- spinning holds a core that, when other work keeps the cores busy, the descheduled thread being
  waited for needs: libgomp's spinning threads fell to 0.3-0.7 tok/s on a loaded machine and lost
  4-6x beside one or two busy loops, and no fixed spin count avoided both.

So a wait spins for up to COLIBRI_SPIN_US microseconds (default 50) and then sleeps, and once a spin
has outlasted that budget the next 64 waits sleep at once: on free cores the waits end while
spinning, on busy ones the team behaves as if passive. COLIBRI_SPIN_US=0 always sleeps. The engine
reads it when it is loaded.
"""
from __future__ import annotations

import os
import re
from types import ModuleType

SPIN_ENV = "COLIBRI_SPIN_US"


def load_engine_module() -> ModuleType:
    """colibri._engine (one place to import it from)."""
    from . import _engine

    return _engine


def _valid(raw: str) -> bool:
    """ASCII digits only, at most the engine's maximum: what csrc/pool.c accepts (no sign, no spaces)."""
    return re.fullmatch(r"[0-9]{1,7}", raw) is not None and int(raw) <= load_engine_module().SPIN_US_MAX


def spin_us() -> int:
    """The spin budget the engine reads: COLIBRI_SPIN_US if it is a whole number of microseconds up
    to the engine's maximum, else its default (csrc/pool.c reads it the same way)."""
    raw = os.environ.get(SPIN_ENV)
    return int(raw) if raw is not None and _valid(raw) else int(load_engine_module().SPIN_US_DEFAULT)


def fixed_wait_env(spin: bool) -> dict[str, str]:
    """The environment that makes a child's engine threads always spin (the largest budget the engine
    reads) or always sleep: for benchmarks comparing wait policies."""
    return {SPIN_ENV: str(load_engine_module().SPIN_US_MAX) if spin else "0"}


def usable_cores() -> int:
    """Cores this process may run on (its affinity mask, e.g. taskset or a container's cpuset)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def wait_note() -> str:
    raw = os.environ.get(SPIN_ENV)
    if raw is None:
        origin = "default"
    elif _valid(raw):
        origin = f"{SPIN_ENV}={raw}"
    else:
        origin = (f"{SPIN_ENV}={raw} is not a whole number of microseconds up to "
                  f"{load_engine_module().SPIN_US_MAX}: the default")
    spin = spin_us()
    if spin == 0:
        return f"threads sleep at every wait ({SPIN_ENV}=0)"
    return (f"threads spin up to {spin} us at a wait, then sleep, and sleep at once after a spin runs out "
            f"({origin}; {SPIN_ENV}=0 always sleeps)")


def threads_note(requested: int) -> str:
    """One start-up line: the engine's thread count, how it was chosen, and how its threads wait."""
    if requested > 0:
        used, how = requested, "--engine-threads"
    else:
        used, how = usable_cores(), "--engine-threads 0: every core this process may use"
    return f"{used} thread{'s' if used != 1 else ''} ({how}); {wait_note()}"
