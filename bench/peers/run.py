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

from cachedir import CACHE, say
from catalog import PEERS, Peer, working_dir
from server_process import free_port, start, stop, wait_ready

ROOT = Path(__file__).resolve().parents[2]
EXIT_OK, EXIT_PEER_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


def conform_command() -> list[str]:
    """colibri-conform from the harness's own environment, so it is the checkout's suite under test."""
    if importlib.util.find_spec("conformance") is not None:
        return [sys.executable, "-m", "conformance.cli"]
    return [str(Path(sys.executable).with_name("colibri-conform"))]


def ensure_installed(peer: Peer) -> None:
    if not peer.installed():
        peer.install()


def serving(peer: Peer) -> tuple[subprocess.Popen, str, float]:
    """Start PEER on a free port and wait until it answers; return the process, base URL and startup time."""
    port = free_port()
    argv = peer.argv(port)
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


def conform(peer: Peer, out: Path, extra: list[str]) -> int:
    """Install, start, run colibri-conform, always stop; write NAME.meta.json. Return conform's exit code."""
    ensure_installed(peer)
    version = peer.version()
    proc, base, startup = serving(peer)
    try:
        cmd = [*conform_command(), "--base-url", base + "/v1", "--model", peer.model,
               "--json", str(out / f"{peer.name}.json"), "--junit", str(out / f"{peer.name}.xml"),
               "--markdown", str(out / f"{peer.name}.md"), "--html", str(out / f"{peer.name}-html"), *extra]
        started = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
        say(f"{peer.name} {version}: {' '.join(cmd)}")
        t0 = time.monotonic()
        code = subprocess.call(cmd, stdin=subprocess.DEVNULL)
        wall = time.monotonic() - t0
        meta = {"name": peer.name, "version": version, "model": peer.model, "started": started,
                "wall_seconds": round(wall, 2), "exit_code": code, "command": cmd,
                "startup_seconds": round(startup, 2)}
        (out / f"{peer.name}.meta.json").write_text(json.dumps(meta, indent=2) + "\n")
        say(f"{peer.name}: colibri-conform exited {code} after {wall:.1f} s")
        return code
    finally:
        stop(proc)
        say(f"{peer.name}: stopped")


def serve_forever(peer: Peer) -> None:
    """Keep one server up for hand testing (curl) until Ctrl-C."""
    ensure_installed(peer)
    proc, base, _ = serving(peer)
    try:
        print(f"{peer.name} {peer.version()} at {base}/v1, model {peer.model!r}; Ctrl-C stops it", flush=True)
        proc.wait()
        say(f"{peer.name}: exited by itself with {proc.returncode}")
    finally:
        stop(proc)
        say(f"{peer.name}: stopped")


def list_peers() -> None:
    print(f"cache: {CACHE}")
    for peer in PEERS.values():
        installed = peer.installed()
        version = peer.version() if installed else "-"
        print(f"{peer.name:18} installed={'yes' if installed else 'no ':3}  version={version:14} model={peer.model}")


def parse(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    ours, extra = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    p = argparse.ArgumentParser(prog="bench/peers/run.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--only", nargs="+", action="extend", metavar="NAME", choices=list(PEERS),
                   help=f"peers to run (default: all): {', '.join(PEERS)}")
    p.add_argument("--install-only", action="store_true", help="install what is missing, start nothing")
    p.add_argument("--out", type=Path, default=ROOT / "reports" / "peers", help="report folder (default: %(default)s)")
    p.add_argument("--list", action="store_true", help="list the peers, whether installed, their versions")
    p.add_argument("--serve", action="store_true", help="start the one --only peer and keep it up until Ctrl-C")
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
    selected = [PEERS[name] for name in (args.only or PEERS)]
    args.out.mkdir(parents=True, exist_ok=True)
    failed: list[str] = []
    for peer in selected:
        try:
            if args.serve:
                serve_forever(peer)
            elif args.install_only:
                ensure_installed(peer)
                say(f"{peer.name}: installed, version {peer.version()}")
            elif conform(peer, args.out, extra) >= 2:  # 2 usage, 3 unreachable: no verdict at all
                failed.append(peer.name)
        except (RuntimeError, OSError, subprocess.SubprocessError) as e:
            say(f"{peer.name}: FAILED: {e}")
            failed.append(peer.name)
    if failed:
        say(f"failed: {', '.join(failed)}")
        return EXIT_PEER_FAILED
    return EXIT_OK


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except KeyboardInterrupt:
        say("interrupted")
        sys.exit(EXIT_INTERRUPTED)
