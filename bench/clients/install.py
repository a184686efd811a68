"""The real client libraries, installed outside the repository (~/.cache/colibri-clients, or
$COLI_CLIENTS_CACHE) like the peers are: a venv with the Python clients and a node_modules with
the JS ones. Each is rebuilt when it is missing (its stamp is written after the last install
command), so a re-run costs nothing and a half-done install is redone."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

CACHE = Path(os.environ.get("COLI_CLIENTS_CACHE") or Path.home() / ".cache" / "colibri-clients").expanduser()
VENV, NODE = CACHE / "venv", CACHE / "node"
STAMP = ".colibri-clients-installed"
#: Unpinned on purpose: the matrix is about the clients people install today; each run
#: records the versions it used (versions()).
PYTHON_CLIENTS = ["openai", "anthropic", "langchain-openai", "pydantic-ai-slim[openai]"]
JS_CLIENTS = ["@mariozechner/pi-ai", "openai", "ai", "@ai-sdk/openai-compatible"]


def say(message: str) -> None:
    print(f"[clients] {message}", file=sys.stderr, flush=True)


def ensure() -> None:
    if not (VENV / STAMP).exists():
        say(f"installing the Python clients into {VENV}")
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(VENV)], check=True)
        subprocess.run([str(VENV / "bin" / "pip"), "install", "-q", *PYTHON_CLIENTS], check=True)
        (VENV / STAMP).write_text("\n".join(PYTHON_CLIENTS) + "\n")
    if not (NODE / STAMP).exists():
        if not shutil.which("npm"):
            raise SystemExit("npm is not on PATH: the JS clients need node 20+ and npm")
        say(f"installing the JS clients into {NODE}")
        NODE.mkdir(parents=True, exist_ok=True)
        (NODE / "package.json").write_text('{"name": "colibri-clients", "private": true, "type": "module"}\n')
        subprocess.run(["npm", "install", "--no-audit", "--no-fund", *JS_CLIENTS], cwd=NODE, check=True)
        (NODE / STAMP).write_text("\n".join(JS_CLIENTS) + "\n")


def versions() -> dict[str, str]:
    """The installed version of every client package."""
    out: dict[str, str] = {}
    py = subprocess.run([str(VENV / "bin" / "python"), "-c",
                         "import importlib.metadata as m, json, sys; print(json.dumps({n: m.version(n) for n in sys.argv[1:]}))",
                         *[p.split("[")[0] for p in PYTHON_CLIENTS]], capture_output=True, text=True)
    if py.returncode == 0:
        out.update(json.loads(py.stdout))
    for p in JS_CLIENTS:
        meta = NODE / "node_modules" / p / "package.json"
        if meta.exists():
            out[f"npm:{p}"] = json.loads(meta.read_text())["version"]
    return out


if __name__ == "__main__":
    ensure()
    print(json.dumps(versions(), indent=2))
