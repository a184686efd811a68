"""Real client libraries against real servers: each client, configured with the settings
colibri-conform derives for the server, runs the scripted scenarios (scenarios.json) through a
recording proxy; the results become the client x server matrix in docs/clients/.

Usage:
    python bench/clients/run.py --server colibri [--server llama-server-tiny-chatml ...]
    python bench/clients/run.py --base-url http://127.0.0.1:8000 [--model M] --name my-server
    python bench/clients/run.py --matrix docs/clients          # rewrite the pages from the results
    options: --only CLIENT ... (substring match), --out DIR (default ~/.cache/colibri-clients/results)

Servers named with --server are the peers harness's (bench/peers/catalog.py): started on a free
port, stopped afterwards. Clients install into ~/.cache/colibri-clients (install.py). Exit 0 when
every run completed (FAILs are results, not errors), 1 when a server or a driver could not run.
Beside each NAME.json in --out, NAME.exchanges.jsonl holds every request the clients made.
"""
from __future__ import annotations

import argparse
import json
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench" / "peers")]

import install  # noqa: E402
from recorder import recording  # noqa: E402
from settings import changed, derive  # noqa: E402

PY_CLIENTS = ["openai (Python)", "openai Responses (Python)", "anthropic (Python)", "langchain-openai", "pydantic-ai",
              "llm (CLI)", "aider (CLI)"]
JS_CLIENTS = ["pi-ai completions", "pi-ai responses", "openai (JS)", "anthropic (JS)", "ai + openai-compatible",
              "ai + anthropic"]
DRIVER_TIMEOUT = 900.0
#: The committed matrix's results: the settings each server's column was proven with.
COMMITTED = ROOT / "docs" / "clients" / "results"


def driver_argv(client: str, url: str, model: str, settings: Path) -> tuple[list[str], Path]:
    scenarios = str(HERE / "scenarios.json")
    if client in PY_CLIENTS:
        return [str(install.VENV / "bin" / "python"), str(HERE / "py" / "scenarios.py"), client, url, model,
                str(settings), scenarios], HERE / "py"
    for f in (HERE / "js").glob("*.mjs"):  # beside node_modules, where node resolves the packages
        shutil.copy(f, install.NODE / f.name)
    return ["node", str(install.NODE / "driver.mjs"), client, url, model, str(settings), scenarios], install.NODE


def run_client(client: str, url: str, model: str, settings: Path, rec: Any) -> dict[str, Any]:
    argv, cwd = driver_argv(client, url, model, settings)
    t0 = time.monotonic()
    try:
        p = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=DRIVER_TIMEOUT)
        out, err = p.stdout, p.stderr
    except subprocess.TimeoutExpired as e:
        out, err = (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or ""), "timeout"
    rows: dict[str, Any] = {}
    for line in out.splitlines():
        if line.startswith("{"):
            r = json.loads(line)
            cell = {"outcome": r["outcome"], "detail": r["detail"]}
            # A FAIL keeps its evidence, and so does an UNSUPPORTED that made requests first (a
            # client's declared limit met on the wire, e.g. a turn cut by the cap it cannot read).
            if r["outcome"] == "FAIL" or (r["outcome"] == "UNSUPPORTED" and rec.of(client, r["scenario"])):
                cell["exchanges"] = rec.of(client, r["scenario"])[-3:]
            rows[r["scenario"]] = cell
    if not rows:
        rows["driver"] = {"outcome": "FAIL", "detail": f"the driver printed no result: {err[-800:]}"}
    print(f"[clients] {client}: " + " ".join(f"{k}={v['outcome']}" for k, v in rows.items())
          + f" ({time.monotonic() - t0:.1f} s)", file=sys.stderr, flush=True)
    return {"seconds": round(time.monotonic() - t0, 1), "scenarios": rows}


def run_server(name: str, base: str, model: str | None, clients: list[str], out: Path,
               partial: bool = False) -> dict[str, Any]:
    t0 = time.monotonic()
    model, settings = derive(base, model)
    doc: dict[str, Any] = {"server": name, "model": model, "settings": settings, "clients": {},
                           "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "versions": install.versions()}
    proven = COMMITTED / f"{name}.json"
    if proven.exists():  # a changed emission: the committed column was proven with other settings
        doc["settings_changed"] = changed(json.loads(proven.read_text())["settings"], settings)
        for line in doc["settings_changed"]:
            print(f"[clients] {name}: the derived settings changed since the committed matrix: {line}",
                  file=sys.stderr, flush=True)
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(settings, f)
    with recording(base) as (url, rec):
        for client in clients:
            doc["clients"][client] = run_client(client, url, model, Path(f.name), rec)
    Path(f.name).unlink()
    doc["wall_seconds"] = round(time.monotonic() - t0, 1)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.json"
    if partial and path.exists():  # a re-run of some clients keeps the others' results
        old = json.loads(path.read_text())
        doc["clients"] = {**old["clients"], **doc["clients"]}
        doc["wall_seconds"] = old["wall_seconds"]
    path.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")
    # Every exchange of this run, PASS or not (a FAIL keeps its last three in the result): what a
    # client actually sent with the derived settings, one JSON object a line.
    (out / f"{name}.exchanges.jsonl").write_text("".join(json.dumps(e, ensure_ascii=False) + "\n" for e in rec.exchanges))
    return doc


def with_peer(name: str, clients: list[str], out: Path, partial: bool = False) -> dict[str, Any]:
    from run import ALL, ensure_installed, serving  # bench/peers/run.py
    from server_process import stop

    peer = ALL[name]
    ensure_installed(peer)
    upstream = serving(ALL[peer.upstream]) if peer.upstream else None
    proc, base, _ = serving(peer, upstream[1] if upstream else "")
    try:
        return run_server(name, base, peer.model, clients, out, partial)
    finally:
        stop(proc)
        if upstream:
            stop(upstream[0])


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--server", action="append", default=[], help="a peer of bench/peers/catalog.py")
    p.add_argument("--base-url"), p.add_argument("--model"), p.add_argument("--name", default="server")
    p.add_argument("--only", nargs="*", default=[], help="clients whose name contains one of these")
    p.add_argument("--out", type=Path, default=install.CACHE / "results")
    p.add_argument("--matrix", type=Path, help="write the docs pages from every result in --out")
    a = p.parse_args(argv)
    # A SIGTERM (tox, CI, a user's kill) must unwind like Ctrl-C so that with_peer stops its servers.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(130))
    clients = [c for c in PY_CLIENTS + JS_CLIENTS if not a.only or any(o.lower() in c.lower() for o in a.only)]
    failed = 0
    if a.server or a.base_url:
        install.ensure()
    for name in a.server:
        try:
            with_peer(name, clients, a.out, bool(a.only))
        except (RuntimeError, OSError, SystemExit) as e:
            print(f"[clients] {name}: could not run: {e}", file=sys.stderr)
            failed += 1
    if a.base_url:
        run_server(a.name, a.base_url.rstrip("/").removesuffix("/v1"), a.model, clients, a.out, bool(a.only))
    if a.matrix:
        from matrix import write
        write(a.out, a.matrix)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
