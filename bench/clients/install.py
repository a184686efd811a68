"""The real client libraries, installed outside the repository (~/.cache/colibri-clients, or
$COLI_CLIENTS_CACHE) like the peers are: a venv with the Python clients (and the `llm` CLI), a
venv of its own for aider, and a node_modules with the JS ones. Each is installed again when it
is missing or its list changed (its stamp, written after the last install command, holds the
list), so a re-run costs nothing, a half-done install is redone and a client added or re-pinned
is installed."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

CACHE = Path(os.environ.get("COLI_CLIENTS_CACHE") or Path.home() / ".cache" / "colibri-clients").expanduser()
VENV, NODE, AIDER = CACHE / "venv", CACHE / "node", CACHE / "aider"
STAMP = ".colibri-clients-installed"
#: The first clients are unpinned on purpose: the matrix is about the clients people install
#: today; each run records the versions it used (versions()). Those added later are pinned to
#: the version the matrix was first made with.
PYTHON_CLIENTS = ["openai", "anthropic", "langchain-openai", "pydantic-ai-slim[openai]", "llm==0.36"]
JS_CLIENTS = ["@mariozechner/pi-ai", "openai", "ai", "@ai-sdk/openai-compatible",
              "@anthropic-ai/sdk@1.17.0", "@ai-sdk/anthropic@3.0.140"]
#: aider pins its whole dependency tree (litellm, openai, ...): a venv of its own.
AIDER_CLIENTS = ["aider-chat==0.86.2"]


def say(message: str) -> None:
    print(f"[clients] {message}", file=sys.stderr, flush=True)


def package(spec: str) -> str:
    """The package a requirement names: `pydantic-ai-slim[openai]` -> `pydantic-ai-slim`,
    `llm==0.36` -> `llm`, `@ai-sdk/anthropic@3.0.140` -> `@ai-sdk/anthropic`."""
    head, _, _ = spec[1:].partition("@") if spec.startswith("@") else (spec, "", "")
    return ("@" + head if spec.startswith("@") else head).split("[")[0].split("==")[0]


def installed(folder: Path, specs: list[str]) -> bool:
    """The stamp lists what was installed last: a changed list (a client added or re-pinned)
    installs again."""
    stamp = folder / STAMP
    return stamp.exists() and stamp.read_text().split() == specs


def ensure() -> None:
    for venv, specs in ((VENV, PYTHON_CLIENTS), (AIDER, AIDER_CLIENTS)):
        if not installed(venv, specs):
            say(f"installing {' '.join(specs)} into {venv}")
            if not (venv / "bin" / "pip").exists():
                subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
            subprocess.run([str(venv / "bin" / "pip"), "install", "-q", *specs], check=True)
            (venv / STAMP).write_text("\n".join(specs) + "\n")
    if not installed(NODE, JS_CLIENTS):
        if not shutil.which("npm"):
            raise SystemExit("npm is not on PATH: the JS clients need node 20+ and npm")
        say(f"installing the JS clients into {NODE}")
        NODE.mkdir(parents=True, exist_ok=True)
        if not (NODE / "package.json").exists():
            (NODE / "package.json").write_text('{"name": "colibri-clients", "private": true, "type": "module"}\n')
        subprocess.run(["npm", "install", "--no-audit", "--no-fund", *JS_CLIENTS], cwd=NODE, check=True)
        (NODE / STAMP).write_text("\n".join(JS_CLIENTS) + "\n")


def versions() -> dict[str, str]:
    """The installed version of every client package."""
    out: dict[str, str] = {}
    for venv, specs in ((VENV, PYTHON_CLIENTS), (AIDER, AIDER_CLIENTS)):
        py = subprocess.run([str(venv / "bin" / "python"), "-c",
                             "import importlib.metadata as m, json, sys; print(json.dumps({n: m.version(n) for n in sys.argv[1:]}))",
                             *[package(p) for p in specs]], capture_output=True, text=True)
        if py.returncode == 0:
            out.update(json.loads(py.stdout))
    for p in JS_CLIENTS:
        meta = NODE / "node_modules" / package(p) / "package.json"
        if meta.exists():
            out[f"npm:{package(p)}"] = json.loads(meta.read_text())["version"]
    return out


if __name__ == "__main__":
    ensure()
    print(json.dumps(versions(), indent=2))
