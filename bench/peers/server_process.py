"""Start a server in its own process group on a free loopback port, wait until it answers, stop it.

Each server gets its own session (start_new_session=True) so that stopping it kills exactly the
group it leads, workers included (vLLM and LiteLLM fork), and so a Ctrl-C in the terminal reaches
the harness, which then stops the server itself instead of leaving half of it behind.
"""
from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import httpx
from cachedir import LOGS, tail


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start(name: str, argv: list[str], env: dict[str, str], cwd: Path) -> tuple[subprocess.Popen, Path]:
    """Launch ARGV with its output in logs/NAME.log (overwritten per start); return the process and the log."""
    LOGS.mkdir(parents=True, exist_ok=True)
    cwd.mkdir(parents=True, exist_ok=True)  # some servers write files into their working folder
    log = LOGS / f"{name}.log"
    with log.open("w") as out:
        out.write(f"$ {' '.join(argv)}\n")
        out.flush()
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env={**os.environ, **env}, cwd=cwd, start_new_session=True)
    return proc, log


def wait_ready(name: str, proc: subprocess.Popen, url: str, timeout: float, log: Path) -> float:
    """Poll URL until it answers 200; return the seconds it took. Raise with the log's tail otherwise."""
    t0 = time.monotonic()
    last = "no answer yet"
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"{name} exited with {proc.returncode} before it answered {url}\n"
                               f"--- tail of {log} ---\n{tail(log)}")
        try:
            r = httpx.get(url, timeout=5)
            if r.status_code == 200:
                return time.monotonic() - t0
            last = f"HTTP {r.status_code}"  # e.g. llama-server's 503 while it loads the model
        except httpx.HTTPError as e:
            last = type(e).__name__
        if time.monotonic() - t0 > timeout:
            raise RuntimeError(f"{name} did not answer {url} within {timeout:.0f} s (last: {last})\n"
                               f"--- tail of {log} ---\n{tail(log)}")
        time.sleep(0.5)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False


def stop(proc: subprocess.Popen, grace: float = 20.0) -> None:
    """SIGTERM the group this process leads (its PID is the group id), wait, then SIGKILL what is left.

    The wait covers the whole group, not just the leader: vLLM's engine core and LiteLLM's workers
    can outlive their parent by a few seconds.
    """
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while (proc.poll() is None or _group_alive(proc.pid)) and time.monotonic() < deadline:
        time.sleep(0.2)
    if proc.poll() is None or _group_alive(proc.pid):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
