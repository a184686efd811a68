"""The engine's own thread team (csrc/pool.c): its waits spin briefly and then sleep, the start-up line
says how many threads there are, why, and how they wait, and every wait policy and thread count
computes the same logits (issue 52; bench/contention.py and gguf_bench.py --wait measure the speed)."""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile

import numpy as np
import pytest

from colibri.engine_threads import SPIN_ENV, spin_us, threads_note, usable_cores

#: The children run outside the checkout, so they import the installed package (under tox, a
#: wheel; the checkout's colibri/ has no compiled engine there).
CWD = tempfile.gettempdir()


def test_the_note_names_the_count_and_its_origin() -> None:
    assert threads_note(3).startswith("3 threads (--engine-threads)")
    assert threads_note(1).startswith("1 thread (--engine-threads)")
    assert threads_note(0).startswith(f"{usable_cores()} thread")
    assert "every core this process may use" in threads_note(0)


AFFINITY_PROBE = """
import os
from colibri.engine_threads import threads_note
from colibri.model import Model
from colibri.paths import EMBEDDED_MODEL
os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
print(Model(EMBEDDED_MODEL).engine(n_threads=0).n_threads, threads_note(0))
"""


def test_the_default_count_is_the_cores_this_process_may_use() -> None:
    """Pinned to one core (as taskset or a container's cpuset would), the engine's default team is one
    thread, and the start-up note says so; OMP_NUM_THREADS no longer counts (the team is not OpenMP's)."""
    env = {**os.environ, "OMP_NUM_THREADS": "3"}
    out = subprocess.run([sys.executable, "-c", AFFINITY_PROBE], capture_output=True, text=True, cwd=CWD, env=env,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    count, note = out.stdout.strip().split(" ", 1)
    assert count == "1" and note.startswith("1 thread (--engine-threads 0: every core this process may use)")


def test_the_spin_default_is_the_engines_and_the_help_says_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from colibri._engine import SPIN_US_DEFAULT, SPIN_US_MAX
    from colibri.settings import BY_NAME

    monkeypatch.delenv(SPIN_ENV, raising=False)
    assert (SPIN_US_DEFAULT, SPIN_US_MAX) == (50, 1_000_000) and spin_us() == SPIN_US_DEFAULT
    assert f"spin for up to {SPIN_US_DEFAULT} us" in BY_NAME["n_threads"].help_text()


def test_the_note_says_how_the_threads_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(SPIN_ENV, raising=False)
    assert spin_us() == 50
    assert "spin up to 50 us at a wait, then sleep" in threads_note(2) and "(default;" in threads_note(2)
    monkeypatch.setenv(SPIN_ENV, "0")
    assert spin_us() == 0
    assert threads_note(2).endswith(f"threads sleep at every wait ({SPIN_ENV}=0)")
    monkeypatch.setenv(SPIN_ENV, "20")
    assert spin_us() == 20 and f"({SPIN_ENV}=20;" in threads_note(2)


@pytest.mark.parametrize("raw", ["abc", "-5", "12us", "", "2000000", " 5", "+5", "-0", "\u00b2", "\u0663"])
def test_a_spin_that_is_not_a_whole_number_of_microseconds_is_the_default(raw: str,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The engine (pool.c) reads only 0..1000000 and otherwise keeps its default; the note says what
    it does."""
    monkeypatch.setenv(SPIN_ENV, raw)
    assert spin_us() == 50
    assert f"{SPIN_ENV}={raw} is not a whole number of microseconds up to 1000000" in threads_note(2)


PROBE = """
import sys
import numpy as np
from colibri.model import Model
from colibri.paths import EMBEDDED_MODEL
model = Model(EMBEDDED_MODEL)
toks = list(range(5, 40))
for threads in (1, 2, 3):
    eng = model.engine(n_slots=2, n_threads=threads)
    _, prefill = eng.prefill(0, toks, all_logits=True)
    eng.prefill(1, toks[:7])
    steps = [eng.decode([0, 1], [toks[i], toks[-i]]) for i in range(1, 4)]
    # raw float32 bytes: np.save needs a seekable file with some numpy versions, and stdout is a pipe
    sys.stdout.buffer.write(np.concatenate([prefill.ravel()] + [s.ravel() for s in steps]).astype(np.float32).tobytes())
"""


@pytest.mark.parametrize("spin", ["0", "50", "1000000"])
def test_every_wait_and_thread_count_gives_the_same_logits(spin: str) -> None:
    """One thread, two and three (more than this machine's cores), with waits that always sleep,
    the default, and waits that always spin: bit-identical logits for a 35-row prefill (its rows
    quantized by every thread) and batched decodes."""
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, timeout=300,
                         env={**os.environ, SPIN_ENV: spin}, cwd=CWD)
    assert out.returncode == 0, out.stderr.decode(errors="replace")[-3000:]
    runs = np.frombuffer(out.stdout, dtype=np.float32).reshape(3, -1)
    assert runs[0].size > 35 * 100 and np.isfinite(runs[0]).all()
    assert np.array_equal(runs[0], runs[1]) and np.array_equal(runs[0], runs[2])
