"""Start `colibri serve` on a free loopback port for a test, and always stop it."""
from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def live_server(*args: str, env: dict[str, str] | None = None, ready_timeout: float = 60.0,
                process: list | None = None) -> Iterator[str]:
    """Yield the base URL of a fresh `colibri serve`; `process`, when given, receives the Popen."""
    import colibri

    port = free_port()
    # The server imports the same colibri the tests import (the installed wheel under tox).
    where = os.path.dirname(os.path.dirname(os.path.abspath(colibri.__file__)))
    child_env = {**os.environ, **(env or {}), "PYTHONPATH": where}
    proc = subprocess.Popen([sys.executable, "-m", "colibri.cli", "serve", "--port", str(port), *args],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=child_env,
                            start_new_session=True,
                            cwd=tempfile.gettempdir())  # import the installed package, not the source tree
    base = f"http://127.0.0.1:{port}"
    if process is not None:
        process.append(proc)
    try:
        deadline = time.monotonic() + ready_timeout
        while True:
            if proc.poll() is not None:
                out = proc.stdout.read().decode() if proc.stdout else ""
                raise RuntimeError(f"colibri serve exited with {proc.returncode}:\n{out}")
            try:
                with urllib.request.urlopen(base + "/health", timeout=1) as r:
                    if json.loads(r.read())["status"] == "ok":
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("colibri serve did not become ready")
            time.sleep(0.1)
        yield base
    finally:
        stop_group(proc, timeout=20)
        if proc.stdout:
            proc.stdout.close()


def stop_group(proc: subprocess.Popen, timeout: float) -> None:
    """Stop a server started in its own process group: SIGTERM (a clean shutdown), SIGKILL if it
    outlasts `timeout` seconds."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
