"""Soak: many concurrent clients against a small `colibri serve`, mixing valid work with the
hostile requests of conformance/hostile.py, streams cut mid-way and clients that trickle.

Usage: PYTHONPATH=. python bench/soak.py [--clients 64] [--seconds 300] [--slots 4]
                                          [--step-delay 0.01] [--json build/bench/soak.json]
                                          [--attacks all|name,...]

`--attacks` mixes in bench/attack.py's scenarios, one after another for an equal share of
the run, from another address (127.0.0.2) while the clients above go on.

The embedded model decodes tens of thousands of tokens a second, so four slots would never
fill; `--step-delay` (the server's --debug-step-delay) paces every engine step to about a
real small model's speed on this machine, so that requests queue, time out and get 429s.

Every request ends in exactly one class: answered (any complete HTTP answer; its status is
counted), cancelled by its client (a stream the client cut on purpose), or lost (anything
else: a reset, a timeout, a stream that stopped without its end marker). Pass conditions:
lost = 0, 5xx = 0, every answer the expected one for its kind, the scheduler's
`admitted = completed + failed + cancelled` once idle, and a flat RSS. Loopback only.
"""
from __future__ import annotations

import argparse
import json
import platform
import random
import socket
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from attack import SCENARIOS, Attack  # noqa: E402
from colibri_process import Server  # noqa: E402

from conformance.hostile import HOSTILE, MODEL, verdict  # noqa: E402

BUSY = {429}  # a valid request may be refused for capacity (queue_full), never otherwise
PROMPTS = ["Tell me about foxes.", "What is the capital of France?", "Write a haiku about rain.",
           "List three colours.", "Say hello.", "Explain what a cache is."]


class Tally:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.sent = 0
        self.answered: Counter[int] = Counter()
        self.cancelled = 0
        self.lost: list[str] = []
        self.wrong: list[str] = []
        self.kinds: Counter[str] = Counter()
        self.latency: list[float] = []  # valid requests answered 200, seconds
        self.capacity_refusals: Counter[str] = Counter()  # hostile requests refused before validation

    def add(self, kind: str, outcome: str, status: int | None = None, problem: str | None = None,
            latency: float | None = None) -> None:
        with self.lock:
            self.sent += 1
            self.kinds[kind] += 1
            if outcome == "answered":
                assert status is not None
                self.answered[status] += 1
            elif outcome == "cancelled":
                self.cancelled += 1
            else:
                self.lost.append(f"{kind}: {problem}")
            if problem and outcome == "answered":
                self.wrong.append(f"{kind}: {problem}")
            if latency is not None:
                self.latency.append(latency)


def _valid_body(rng: random.Random, stream: bool) -> tuple[str, dict]:
    kind = rng.choice(["chat", "chat", "messages", "completions"])
    n = rng.randint(4, 24)
    if kind == "chat":
        return "/v1/chat/completions", {"model": MODEL, "messages": [{"role": "user", "content": rng.choice(PROMPTS)}],
                                        "max_tokens": n, "stream": stream, "temperature": rng.choice([0, 0.8])}
    if kind == "messages":
        return "/v1/messages", {"model": MODEL, "max_tokens": n, "stream": stream,
                                "messages": [{"role": "user", "content": rng.choice(PROMPTS)}]}
    return "/v1/completions", {"model": MODEL, "prompt": rng.choice(PROMPTS), "max_tokens": n, "stream": stream}


def _ended(path: str, lines: list[str]) -> bool:
    if path == "/v1/messages":
        return any(line.startswith("event: message_stop") for line in lines)
    return "data: [DONE]" in lines


def valid(client: httpx.Client, rng: random.Random, tally: Tally, stream: bool) -> int:
    path, body = _valid_body(rng, stream)
    kind = f"valid {'stream' if stream else 'unary'}"
    start = time.monotonic()
    try:
        if not stream:
            r = client.post(path, json=body)
            ok = r.status_code == 200 or r.status_code in BUSY
            tally.add(kind, "answered", r.status_code, None if ok else f"{r.status_code} {r.text[:200]}",
                      time.monotonic() - start if r.status_code == 200 else None)
            return r.status_code
        with client.stream("POST", path, json=body) as r:
            if r.status_code != 200:
                r.read()
                ok = r.status_code in BUSY
                tally.add(kind, "answered", r.status_code, None if ok else f"{r.status_code} {r.text[:200]}")
                return r.status_code
            lines = list(r.iter_lines())
        if _ended(path, lines):
            tally.add(kind, "answered", 200, None, time.monotonic() - start)
        else:
            tally.add(kind, "lost", problem=f"stream without its end marker: {lines[-3:]}")
        return 200
    except httpx.HTTPError as e:
        tally.add(kind, "lost", problem=f"{type(e).__name__}: {e}")
        return 0


def hostile(client: httpx.Client, rng: random.Random, tally: Tally) -> int:
    name, method, path, body, headers, expect = rng.choice(HOSTILE)
    try:
        r = client.request(method, path, content=body, headers=headers)
    except httpx.HTTPError as e:
        tally.add("hostile", "lost", problem=f"{name}: {type(e).__name__}: {e}")
        return 0
    problem = verdict(r.status_code, r.content, expect)
    if problem and r.status_code in BUSY and expect[0] == 200:
        problem = None  # a valid-but-odd request refused for capacity, like any valid one
    elif problem and r.status_code in BUSY and _code(r) == "at capacity":
        # Every thread busy: the event loop refuses before anything is validated (rule
        # ops.admission.bounded). A retry gets the request's own answer.
        problem = None
        with tally.lock:
            tally.capacity_refusals["hostile"] += 1
    tally.add("hostile", "answered", r.status_code, f"{name}: {problem}" if problem else None)
    return r.status_code


def _code(r: httpx.Response) -> str:
    """'at capacity' for the event loop's refusal (queue_full or its Anthropic twin)."""
    try:
        err = r.json()["error"]
    except (ValueError, KeyError, TypeError):
        return ""
    return "at capacity" if "at capacity" in err.get("message", "") else str(err.get("code", err.get("type")))


def cut_stream(base: str, rng: random.Random, tally: Tally) -> int:
    body = {"model": MODEL, "messages": [{"role": "user", "content": rng.choice(PROMPTS)}], "max_tokens": 200,
            "stream": True, "temperature": 0.8}
    try:
        with httpx.Client(base_url=base, timeout=60) as c, c.stream("POST", "/v1/chat/completions", json=body) as r:
            if r.status_code != 200:
                r.read()
                tally.add("cut stream", "answered", r.status_code,
                          None if r.status_code in BUSY else f"{r.status_code} {r.text[:200]}")
                return r.status_code
            for i, _ in enumerate(r.iter_lines()):
                if i >= rng.randint(2, 8):
                    break
        tally.add("cut stream", "cancelled")
        return 200
    except httpx.HTTPError as e:
        tally.add("cut stream", "lost", problem=f"{type(e).__name__}: {e}")
        return 0


def trickle(port: int, tally: Tally, deadline: float) -> int:
    """Headers a few bytes at a time, then silence: the server must answer 408 at its deadline."""
    head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nContent-Length: 100\r\n\r\n{\"model\""
    started = time.monotonic()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=deadline + 30) as s:
            for i in range(0, len(head), 4):
                s.sendall(head[i:i + 4])
                time.sleep(0.05)
            reply = s.recv(65536)
        status = int(reply.split()[1]) if reply.startswith(b"HTTP/1.1 ") else None
        if status is None:
            tally.add("trickle", "lost", problem=f"no HTTP answer: {reply[:80]!r}")
            return 0
        problem = None if status in (408, 429) else f"{status}: {reply[:200]!r}"
        tally.add("trickle", "answered", status, problem)
        return status
    except OSError as e:
        # How long the client took matters: a client starved of CPU (attack threads share this
        # process) may still be sending when its read deadline passes and the 408 closes it.
        tally.add("trickle", "lost", problem=f"{type(e).__name__}: {e} after {time.monotonic() - started:.1f} s")
        return 0


def client_loop(i: int, server: Server, stop_at: float, tally: Tally, read_deadline: float) -> None:
    rng = random.Random(i)
    with httpx.Client(base_url=server.base, timeout=120) as client:
        while time.monotonic() < stop_at:
            roll = rng.random()
            if roll < 0.30:
                status = valid(client, rng, tally, stream=False)
            elif roll < 0.55:
                status = valid(client, rng, tally, stream=True)
            elif roll < 0.83:
                status = hostile(client, rng, tally)
            elif roll < 0.93:
                status = cut_stream(server.base, rng, tally)
            elif roll < 0.96:
                status = trickle(server.port, tally, read_deadline)
            else:
                try:
                    r = client.get(rng.choice(["/health", "/metrics", "/v1/models"]))
                    tally.add("get", "answered", r.status_code, None if r.status_code in (200, 429) else r.text[:200])
                    status = r.status_code
                except httpx.HTTPError as e:
                    tally.add("get", "lost", problem=f"{type(e).__name__}: {e}")
                    status = 0
            time.sleep(rng.uniform(0.5, 1.0) if status in BUSY else rng.uniform(0, 0.2))


def _counters(base: str) -> dict[str, float]:
    text = httpx.get(base + "/metrics", timeout=10).text
    out = {}
    for line in text.splitlines():
        if line.startswith("colibri_scheduler_") and not line.startswith("#") and "_bucket" not in line:
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def attack_rotation(port: int, names: list[str], seconds: float, done: list[dict]) -> None:
    """Run each named attack scenario for an equal share of `seconds`, one after another."""
    share = seconds / len(names)
    for name in names:
        stop = threading.Event()
        attack = Attack(port, stop)
        threads = SCENARIOS[name](attack)
        for t in threads:
            t.start()
        stop.wait(share)
        stop.set()
        attack.close_all()
        for t in threads:
            t.join(timeout=5)
        done.append({"scenario": name, "seconds": round(share), "attack_connections": attack.sent})


def _quantile(xs: list[float], q: float) -> float:
    return statistics.quantiles(xs, n=100)[int(q * 100) - 1] if len(xs) >= 2 else (xs[0] if xs else 0.0)


def _arguments() -> tuple[argparse.Namespace, list[str]]:
    """The command line, and the attack scenarios it names."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=300)
    ap.add_argument("--slots", type=int, default=4)
    ap.add_argument("--read-deadline", type=float, default=5.0)
    ap.add_argument("--step-delay", type=float, default=0.01, help="seconds per engine step (pacing)")
    ap.add_argument("--json", type=Path, default=Path("build/bench/soak.json"))
    ap.add_argument("--attacks", default="", help="bench/attack.py scenarios to mix in: all, or names")
    args = ap.parse_args()
    attacks = list(SCENARIOS) if args.attacks == "all" else [n for n in args.attacks.split(",") if n]
    if any(n not in SCENARIOS for n in attacks):
        ap.error(f"--attacks: known scenarios are {', '.join(SCENARIOS)}")
    return args, attacks


def main() -> int:
    args, attacks = _arguments()
    attacked: list[dict] = []

    work = Path(tempfile.mkdtemp(prefix="colibri-soak-"))
    # All clients share 127.0.0.1, so the per-address cap is raised above their number.
    server = Server(["--kv-slots", str(args.slots), "--read-deadline", str(args.read_deadline),
                     "--max-client-connections", str(4 * args.clients), "--kv-dir", str(work / "kv"),
                     "--debug-step-delay", str(args.step_delay)],
                    work / "server.log")
    tally = Tally()
    try:
        server.wait_ready()
        rss_start = rss_warm = server.rss_mib()
        start = time.monotonic()
        stop_at = start + args.seconds
        threads = [threading.Thread(target=client_loop, args=(i, server, stop_at, tally, args.read_deadline),
                                    daemon=True) for i in range(args.clients)]
        if attacks:
            threads.append(threading.Thread(target=attack_rotation, daemon=True,
                                            args=(server.port, attacks, args.seconds, attacked)))
        for t in threads:
            t.start()
        rss_samples = [(0.0, rss_start)]
        while any(t.is_alive() for t in threads):
            time.sleep(10)
            rss_samples.append((round(time.monotonic() - start), server.rss_mib()))
            if rss_samples[-1][0] <= 35:
                rss_warm = rss_samples[-1][1]  # after the first half-minute: caches and pools filled
            print(f"[{time.monotonic() - start:5.0f} s] sent {tally.sent}, answered {sum(tally.answered.values())}, "
                  f"cancelled {tally.cancelled}, lost {len(tally.lost)}, wrong {len(tally.wrong)}, "
                  f"RSS {rss_samples[-1][1]:.0f} MiB", flush=True)
        elapsed = time.monotonic() - start
        # Idle: every admitted request has ended; the scheduler's books must balance.
        for _ in range(100):
            h = httpx.get(server.base + "/health", timeout=10).json()["scheduler"]
            if h["active"] == 0 and h["queued"] == 0:
                break
            time.sleep(0.1)
        c = _counters(server.base)
        rss_end = server.rss_mib()
    finally:
        server.stop()
    admitted = c.get("colibri_scheduler_admitted_total", 0)
    settled = sum(c.get(f"colibri_scheduler_{k}_total", 0) for k in ("completed", "failed", "cancelled"))
    five = sum(n for s, n in tally.answered.items() if s >= 500)
    lat = sorted(tally.latency)
    result = {
        "date": time.strftime("%Y-%m-%d"), "machine": f"{platform.machine()}, {platform.processor() or 'cpu'}, "
        f"{__import__('os').cpu_count()} cores, Python {platform.python_version()}",
        "command": " ".join(["python", "bench/soak.py", *sys.argv[1:]]),
        "clients": args.clients, "seconds": round(elapsed), "slots": args.slots, "step_delay_s": args.step_delay,
        "sent": tally.sent, "answered": dict(sorted(tally.answered.items())), "cancelled_by_client": tally.cancelled,
        "lost": len(tally.lost), "lost_examples": tally.lost[:10], "wrong": len(tally.wrong),
        "wrong_examples": tally.wrong[:10], "5xx": five, "kinds": dict(tally.kinds),
        "hostile_refused_at_capacity": tally.capacity_refusals["hostile"],
        "metrics": {"admitted": admitted, "completed": c.get("colibri_scheduler_completed_total", 0),
                    "failed": c.get("colibri_scheduler_failed_total", 0),
                    "cancelled": c.get("colibri_scheduler_cancelled_total", 0),
                    "rejected": c.get("colibri_scheduler_rejected_total", 0), "identity_holds": admitted == settled},
        "rss_mib": {"start": round(rss_start, 1), "after_30s": round(rss_warm, 1), "end": round(rss_end, 1),
                    "max": round(max(r for _, r in rss_samples + [(0, rss_end)]), 1)},
        "attacks": attacked,
        "latency_valid_200_s": {"n": len(lat), "p50": round(_quantile(lat, 0.5), 3),
                                "p99": round(_quantile(lat, 0.99), 3)},
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))
    ok = not tally.lost and not tally.wrong and five == 0 and admitted == settled
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
