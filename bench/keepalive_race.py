"""Keep-alive race: pooled clients that pause about as long as the server keeps an idle
connection, so some of their requests go out on a connection the server is closing
(rule ops.keepalive.idle).

Usage: PYTHONPATH=. python bench/keepalive_race.py [--idle-timeout 15] [--pause 4.97 5.03]
                                                   [--clients 30] [--seconds 60] [--load 0]

Each client is one httpx.Client with its default pool (it gives up a connection idle for
5 s, as the official OpenAI and Anthropic Python SDKs do). In a loop it sends a request,
pauses a random time in --pause, and sends the next on the same pool. A request that gets
no HTTP answer (httpx reports "server disconnected without sending a response" or a reset)
is lost; the pass condition is lost = 0. `--idle-timeout 5` reproduces the server's old
setting, where the server's and the client's limits coincide; run from a checkout from before
rule ops.keepalive.idle (PYTHONPATH=OLD), the same command measures the old server. Loopback only.

The race needs a busy server: on an idle machine the server closes an expired connection well
before the client's own limit runs out. `--load N` adds N threads that keep the server
generating (chat completions of up to 128 tokens, one after another); their answers are
counted apart and are not part of the pass condition.
"""
from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from colibri_process import Server  # noqa: E402


def client(base: str, seed: int, pause: tuple[float, float], until: float, tally: Counter[str],
           lock: threading.Lock) -> None:
    rnd = random.Random(seed)
    with httpx.Client(base_url=base, timeout=30) as c:
        while time.monotonic() < until:
            try:
                outcome = str(c.post("/v1/nonexistent", json={}).status_code)
            except httpx.HTTPError as e:
                outcome = f"lost: {type(e).__name__}: {e}"
            with lock:
                tally[outcome] += 1
            time.sleep(rnd.uniform(*pause))


def generate(base: str, until: float, tally: Counter[str], lock: threading.Lock) -> None:
    body = {"model": "colibri-tiny", "max_tokens": 128,
            "messages": [{"role": "user", "content": "Tell me about the sea and the mountains."}]}
    with httpx.Client(base_url=base, timeout=120) as c:
        while time.monotonic() < until:
            try:
                outcome = f"load {c.post('/v1/chat/completions', json=body).status_code}"
            except httpx.HTTPError as e:
                outcome = f"load failed: {type(e).__name__}: {e}"
            with lock:
                tally[outcome] += 1


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--idle-timeout", type=int, default=15, help="the server's --idle-timeout (default 15)")
    p.add_argument("--pause", type=float, nargs=2, default=[4.97, 5.03], metavar=("MIN", "MAX"),
                   help="seconds each client waits between requests, drawn uniformly (default 4.97 5.03)")
    p.add_argument("--clients", type=int, default=30)
    p.add_argument("--seconds", type=float, default=60.0)
    p.add_argument("--load", type=int, default=0, metavar="N",
                   help="threads that keep the server generating meanwhile (default 0)")
    a = p.parse_args()
    # Set through the environment, so the same command measures a build from before the flag
    # (which ignores it and keeps its 5 s) as the baseline.
    os.environ["COLI_IDLE_TIMEOUT"] = str(a.idle_timeout)
    server = Server([], Path(tempfile.mkdtemp()) / "serve.log")
    tally: Counter[str] = Counter()
    lock = threading.Lock()
    try:
        server.wait_ready()
        until = time.monotonic() + a.seconds
        threads = [threading.Thread(target=client, args=(server.base, i, tuple(a.pause), until, tally, lock))
                   for i in range(a.clients)]
        threads += [threading.Thread(target=generate, args=(server.base, until, tally, lock)) for _ in range(a.load)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        server.stop()
    lost = sum(n for k, n in tally.items() if k.startswith("lost"))
    probes = sum(n for k, n in tally.items() if not k.startswith("load"))
    print(f"--idle-timeout {a.idle_timeout}, pauses {a.pause[0]}-{a.pause[1]} s, {a.clients} clients, "
          f"{a.load} generating, {a.seconds:.0f} s: {probes} requests, {lost} lost")
    for k, n in sorted(tally.items()):
        print(f"  {n:5d}  {k}")
    return 1 if lost else 0


if __name__ == "__main__":
    sys.exit(main())
