"""The engine's threads wait passively unless the environment says otherwise, and the start-up
line says how many there are and why (issue 52; bench/contention.py measures the effect)."""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile

from colibri.engine_threads import threads_note, usable_cores

#: The children run outside the checkout, so they import the installed package (under tox, a
#: wheel; the checkout's colibri/ has no compiled engine there).
CWD = tempfile.gettempdir()
PROBE = ("import os; from colibri.engine_threads import load_engine_module, threads_note; load_engine_module(); "
         "print(os.environ.get('OMP_WAIT_POLICY')); print(threads_note(0))")


def run_probe(**env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    return subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120,
                          env={**clean, "OMP_DISPLAY_ENV": "true", **env}, check=True, cwd=CWD)


def test_libgomp_reads_passive_and_the_environment_is_restored() -> None:
    out = run_probe()
    assert "OMP_WAIT_POLICY = 'PASSIVE'" in out.stderr  # libgomp's own report of what it read
    first, note = out.stdout.splitlines()
    assert first == "None"  # children of the server keep their own default
    assert "sleep at barriers" in note and f"{usable_cores()} thread" in note


def test_a_users_choice_wins() -> None:
    out = run_probe(OMP_WAIT_POLICY="active")
    assert "OMP_WAIT_POLICY = 'ACTIVE'" in out.stderr
    assert "as the environment says (OMP_WAIT_POLICY=active)" in out.stdout


def test_the_note_names_the_count_and_its_origin() -> None:
    assert threads_note(3).startswith("3 threads (--engine-threads)")
    assert threads_note(1).startswith("1 thread (--engine-threads)")
    assert threads_note(0).startswith(f"{usable_cores()} thread")
    assert "every core this process may use" in threads_note(0)


def test_the_servers_first_import_of_the_engine_sets_the_policy() -> None:
    """`colibri serve` first loads the engine reading its slot maximum (settings.py): that import
    must go through load_engine_module too, or libgomp spins in the served process."""
    clean = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    out = subprocess.run([sys.executable, "-c", "from colibri.settings import engine_max_slots; engine_max_slots()"],
                         capture_output=True, text=True, timeout=120, env={**clean, "OMP_DISPLAY_ENV": "true"},
                         check=True, cwd=CWD)
    assert "OMP_WAIT_POLICY = 'PASSIVE'" in out.stderr
