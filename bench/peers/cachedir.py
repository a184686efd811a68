"""The cache folder that holds every peer's venv, build, model file and log, and the install steps.

Everything heavy lives here, outside the repository, so a `git clean` never costs hours and
nothing of the peers can end up in git. Each step checks for its final artefact first, so a
re-run only rebuilds what is missing; a half-done step is redone because its artefact (or the
stamp written after its last command) is not there.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

CACHE = Path(os.environ.get("COLI_PEERS_CACHE") or Path.home() / ".cache" / "colibri-peers").expanduser()
LOGS = CACHE / "logs"
STAMP = ".colibri-peers-installed"  # written into a venv after its last install command succeeded


def say(message: str) -> None:
    """A progress line on stderr (stdout stays free for --list)."""
    print(f"[peers {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def tail(path: Path, lines: int = 40) -> str:
    """The last lines of a log, for error messages."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return f"(no log at {path})"
    return "\n".join(text.splitlines()[-lines:])


@contextlib.contextmanager
def step(what: str) -> Iterator[None]:
    """Announce an install step and how long it took."""
    say(f"installing {what} ...")
    t0 = time.monotonic()
    yield
    say(f"installed {what} in {time.monotonic() - t0:.0f} s")


def sh(argv: list[str | Path], log_name: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> None:
    """Run one install command with its output appended to logs/LOG_NAME.log; raise with the log's tail."""
    LOGS.mkdir(parents=True, exist_ok=True)
    log = LOGS / f"{log_name}.log"
    with log.open("a") as out:
        out.write(f"\n$ {' '.join(map(str, argv))}\n")
        out.flush()
        code = subprocess.call([str(a) for a in argv], stdout=out, stderr=subprocess.STDOUT,
                               stdin=subprocess.DEVNULL, env={**os.environ, **(env or {})}, cwd=cwd)
    if code:
        raise RuntimeError(f"exit {code}: {' '.join(map(str, argv))}\n--- tail of {log} ---\n{tail(log)}")


def venv_dir(name: str) -> Path:
    return CACHE / "venvs" / name


def venv_ready(name: str, script: str, packages: list[str] | None = None) -> bool:
    """Installed means: the console script exists and the stamp of the last step was written,
    naming the same packages (a changed pin reinstalls, so the versions the published matrix
    records are the ones a fresh harness gets)."""
    v = venv_dir(name)
    if not (v / "bin" / script).exists() or not (v / STAMP).exists():
        return False
    return packages is None or _stamp_packages(packages) in (v / STAMP).read_text().splitlines()


def _stamp_packages(packages: list[str]) -> str:
    return "packages: " + " ".join(packages)


def ensure_venv(name: str, script: str, packages: list[str], env: dict[str, str] | None = None,
                after: list[list[str | Path]] | None = None) -> Path:
    """A venv at venvs/NAME with PACKAGES pip-installed and AFTER commands run, unless already there."""
    v = venv_dir(name)
    if venv_ready(name, script, packages):
        return v
    with step(f"{name} ({' '.join(packages)}) into {v}; log: {LOGS / (name + '-install.log')}"):
        (v / STAMP).unlink(missing_ok=True)
        if not (v / "bin" / "python").exists():
            shutil.rmtree(v, ignore_errors=True)
            sh([sys.executable, "-m", "venv", v], f"{name}-install")
        sh([v / "bin" / "python", "-m", "pip", "install", *packages], f"{name}-install", env=env)
        for argv in after or []:
            sh(argv, f"{name}-install", env=env)
        if not (v / "bin" / script).exists():
            raise RuntimeError(f"{name}: pip succeeded but {v / 'bin' / script} is missing")
        (v / STAMP).write_text(time.strftime("%Y-%m-%dT%H:%M:%S\n") + _stamp_packages(packages) + "\n")
    return v


def dist_version(venv: Path, dist: str) -> str:
    """The installed version of DIST inside VENV, read from its metadata without starting its Python."""
    import importlib.metadata as md

    for site in sorted(venv.glob("lib/python*/site-packages")):
        for d in md.distributions(path=[str(site)]):
            if (d.metadata["Name"] or "").lower().replace("_", "-") == dist.lower():
                return d.version
    return "unknown"
