"""Install real third-party LLM servers, start each on 127.0.0.1, and run colibri-conform against it.

Usage:
    python bench/peers/run.py [--only NAME ...] [--install-only] [--out DIR] [--list] [-- CONFORM ARGS]
    python bench/peers/run.py --only NAME --serve      # start one server and keep it up until Ctrl-C

Everything installed goes to ~/.cache/colibri-peers (or $COLI_PEERS_CACHE): hours the first time
(two llama.cpp compiles, a 3.5 GB vLLM), seconds afterwards. Per peer, OUT gets NAME.json,
NAME.xml, NAME.md, NAME-html/ from colibri-conform and NAME.meta.json from this script.

Exit codes: 0 every selected peer was installed, started, and colibri-conform ran on it (its own
verdict is in NAME.json and exit_code of NAME.meta.json); 1 a peer failed to install or start, or
colibri-conform could not run (its exit 2 or 3); 2 usage error; 130 interrupted.
"""
from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from cachedir import CACHE, LOGS, say
from catalog import PEERS, TINY_PEERS, Peer, working_dir
from server_process import free_port, start, stop, wait_ready
from tiny import chat_format

ROOT = Path(__file__).resolve().parents[2]
EXIT_OK, EXIT_PEER_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


def conform_command() -> list[str]:
    """colibri-conform from the harness's own environment, so it is the checkout's suite under test."""
    if importlib.util.find_spec("conformance") is not None:
        return [sys.executable, "-m", "conformance.cli"]
    return [str(Path(sys.executable).with_name("colibri-conform"))]


ALL = PEERS | TINY_PEERS


def ensure_installed(peer: Peer) -> None:
    if peer.upstream:
        ensure_installed(ALL[peer.upstream])
    if not peer.installed():
        peer.install()


def serving(peer: Peer, upstream: str = "") -> tuple[subprocess.Popen, str, float]:
    """Start PEER on a free port and wait until it answers; return the process, base URL and startup time.
    UPSTREAM: the base URL of the server PEER fronts (a proxy's upstream), when it has one."""
    port = free_port()
    argv = peer.argv(port, upstream=upstream) if peer.upstream else peer.argv(port)
    say(f"{peer.name}: starting on port {port}: {' '.join(argv)}")
    proc, log = start(peer.name, argv, peer.env, working_dir(peer))
    base = f"http://127.0.0.1:{port}"
    try:
        startup = wait_ready(peer.name, proc, base + peer.ready_path, peer.ready_timeout, log)
    except BaseException:
        stop(proc)
        raise
    say(f"{peer.name}: answering after {startup:.1f} s (log: {log})")
    return proc, base, startup


def conform(peer: Peer, out: Path, extra: list[str]) -> dict:
    """Install, start, run colibri-conform, always stop; write NAME.meta.json and return its content."""
    ensure_installed(peer)
    version = peer.version()
    upstream = None
    if peer.upstream:  # a proxy: its upstream engine comes up first and goes down last
        upstream = serving(ALL[peer.upstream])
    try:
        return _conform_served(peer, version, out, extra, upstream[1] if upstream else "")
    finally:
        if upstream:
            stop(upstream[0])
            say(f"{peer.upstream}: stopped")


def _conform_served(peer: Peer, version: str, out: Path, extra: list[str], upstream: str) -> dict:
    proc, base, startup = serving(peer, upstream)
    try:
        cmd = [*conform_command(), "--base-url", base + "/v1", "--model", peer.model,
               "--json", str(out / f"{peer.name}.json"), "--junit", str(out / f"{peer.name}.xml"),
               "--markdown", str(out / f"{peer.name}.md"), "--html", str(out / f"{peer.name}-html"),
               *peer.conform_args, *extra]
        started = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
        say(f"{peer.name} {version}: {' '.join(cmd)}")
        t0 = time.monotonic()
        code = subprocess.call(cmd, stdin=subprocess.DEVNULL)
        wall = time.monotonic() - t0
        # what a llama.cpp engine chose for the template, read while it still runs (a proxy: its upstream's)
        detected = chat_format(upstream or base) if peer.family else None
        meta = {"name": peer.name, "version": version, "model": peer.model, "started": started,
                "wall_seconds": round(wall, 2), "exit_code": code, "command": cmd,
                "startup_seconds": round(startup, 2),
                "client_settings_request": client_settings_request(out / f"{peer.name}.json", base, peer.model)}
        if peer.family:  # the embedded model on this engine: which parsers read its calls and reasoning
            meta |= {"family": peer.family, "parsers": peer.parsers, "argv": peer_argv_of(peer),
                     **({"upstream": peer.upstream} if peer.upstream else {})}
            if detected:
                meta["chat_format"] = detected
        (out / f"{peer.name}.meta.json").write_text(json.dumps(meta, indent=2) + "\n")
        say(f"{peer.name}: colibri-conform exited {code} after {wall:.1f} s")
        return meta
    finally:
        stop(proc)
        say(f"{peer.name}: stopped")


def peer_argv_of(peer: Peer) -> str:
    """The server's command line as the log recorded it (its first line), with the cache path shortened."""
    try:
        first = (LOGS / f"{peer.name}.log").read_text(errors="replace").splitlines()[0]
    except (OSError, IndexError):
        return ""
    return first.removeprefix("$ ").replace(str(CACHE), "~/.cache/colibri-peers")


def client_settings_request(report: Path, base: str, model: str) -> dict:
    """Send the chat request a client configured by the report's client settings would send;
    the settings are right only if it succeeds."""
    import httpx

    from conformance.report import request_from_settings

    try:
        body = request_from_settings(json.loads(report.read_text())["compat"], model)
        r = httpx.post(base + "/v1/chat/completions", json=body, timeout=300)
        result = {"request": body, "status": r.status_code, "body_start": r.text[:200]}
    except (OSError, ValueError, KeyError, httpx.HTTPError) as e:
        result = {"status": 0, "error": f"{type(e).__name__}: {e}"}
    say(f"client settings request: {result.get('status')}")
    return result


def serve_forever(peer: Peer) -> None:
    """Keep one server up for hand testing (curl) until Ctrl-C."""
    ensure_installed(peer)
    upstream = serving(ALL[peer.upstream]) if peer.upstream else None
    proc, base, _ = serving(peer, upstream[1] if upstream else "")
    try:
        print(f"{peer.name} {peer.version()} at {base}/v1, model {peer.model!r}; Ctrl-C stops it", flush=True)
        proc.wait()
        say(f"{peer.name}: exited by itself with {proc.returncode}")
    finally:
        stop(proc)
        say(f"{peer.name}: stopped")
        if upstream:
            stop(upstream[0])


def list_peers() -> None:
    print(f"cache: {CACHE}")
    print(f"{'peer':28} {'installed':10} {'version':38} model")
    for peer in ALL.values():
        installed = peer.installed()
        version = peer.version() if installed else "-"
        print(f"{peer.name:28} {'yes' if installed else 'no':10} {version:38} {peer.model}")


def summary(metas: list[dict], failed: list[str]) -> None:
    for m in metas:
        say(f"  {m['name']:18} {m['version']:38} up in {m['startup_seconds']:6.1f} s, "
            f"conform exit {m['exit_code']} in {m['wall_seconds']:7.1f} s")
    for name in failed:
        say(f"  {name:18} FAILED (see above)")


def parse(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    ours, extra = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    p = argparse.ArgumentParser(prog="bench/peers/run.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--only", nargs="+", action="extend", metavar="NAME", choices=list(ALL),
                   help=f"peers to run (default: {', '.join(PEERS)}; the embedded model's rows only by name: "
                        f"{', '.join(TINY_PEERS)})")
    p.add_argument("--install-only", action="store_true", help="install what is missing, start nothing")
    p.add_argument("--out", type=Path, default=ROOT / "reports" / "peers", help="report folder (default: %(default)s)")
    p.add_argument("--list", action="store_true", help="list the peers, whether installed, their versions")
    p.add_argument("--serve", action="store_true", help="start the one --only peer and keep it up until Ctrl-C")
    p.add_argument("--compat", type=Path, metavar="DIR",
                   help="afterwards, regenerate the published matrix in DIR (docs/compat) from OUT")
    p.add_argument("--check", type=Path, metavar="DIR",
                   help="afterwards, fail unless every run's verdicts equal DIR/verdicts/ (docs/compat) and its "
                        "client-settings request succeeded (what CI runs on the light peers)")
    args = p.parse_args(ours)
    if args.serve and len(args.only or []) != 1:
        p.error("--serve needs exactly one --only NAME")
    return args, extra


def main(argv: list[str]) -> int:
    args, extra = parse(argv)
    # A SIGTERM (tox, CI) must unwind like Ctrl-C so that every `finally: stop(...)` runs.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(EXIT_INTERRUPTED))
    if args.list:
        list_peers()
        return EXIT_OK
    selected = [ALL[name] for name in (args.only or PEERS)]
    failed: list[str] = []
    metas: list[dict] = []
    for peer in selected:
        try:
            if args.serve:
                serve_forever(peer)
            elif args.install_only:
                ensure_installed(peer)
                say(f"{peer.name}: installed, version {peer.version()}")
            else:
                args.out.mkdir(parents=True, exist_ok=True)
                metas.append(conform(peer, args.out, extra))
                if metas[-1]["exit_code"] >= 2:  # 2 usage, 3 unreachable: no verdict at all
                    failed.append(peer.name)
        except (RuntimeError, OSError, subprocess.SubprocessError) as e:
            say(f"{peer.name}: FAILED: {e}")
            failed.append(peer.name)
    summary(metas, [n for n in failed if n not in {m["name"] for m in metas}])
    if failed:
        return EXIT_PEER_FAILED
    if args.compat:
        from conformance.compat import main as compat

        if compat([str(args.out), "--out", str(args.compat), "--readme", str(ROOT / "README.md")]) != 0:
            return EXIT_PEER_FAILED
    if args.check:
        from conformance.compat import main as compat

        bad = [m["name"] for m in metas if m["client_settings_request"].get("status") != 200]
        for name in bad:
            say(f"{name}: the request built from its client settings did not succeed")
        if compat([str(args.out), "--check", str(args.check)]) != 0 or bad:
            return EXIT_PEER_FAILED
    return EXIT_OK


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except KeyboardInterrupt:
        say("interrupted")
        sys.exit(EXIT_INTERRUPTED)
