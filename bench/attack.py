"""Attack: the hostile-connection scenarios of issue 49, each run against a fresh
`colibri serve` while a well-behaved client probes it.

Usage: PYTHONPATH=. python bench/attack.py [--seconds 60] [--only idle-flood,chunk-flood]
                                           [--json build/bench/attack.json]

Each scenario starts its own server on a free loopback port (default settings), lets it
warm up (one chat), reads the worker's resident size, then for `--seconds`:

- the attacker, from one address (127.0.0.2), runs the scenario;
- a well-behaved client, from 127.0.0.1, asks GET /health on a fresh connection every
  0.2 s (5 s timeout) and sends a short chat every 5 s (30 s timeout; a 429 retried after
  its Retry-After at most twice, as the OpenAI and Anthropic SDKs do by default).

Per scenario it prints the probe success rate and p99 latency, how many chats completed,
and the worker's idle and peak resident size (VmHWM in /proc: the peak, however brief).
Done when, for every scenario: /health >= 99 % with p99 < 1 s, every chat completes, and
the peak RSS < 2 x idle + the configured buffer bounds (16 MiB per address for unfinished
requests). Loopback only; every server is stopped by its own process group.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import platform
import socket
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from colibri_process import Server  # noqa: E402

ATTACKER = "127.0.0.2"
VICTIM = "127.0.0.1"
HOST = b"Host: 127.0.0.1\r\n"
CHAT = json.dumps({"model": "colibri-tiny", "messages": [{"role": "user", "content": "Say hello."}],
                   "max_tokens": 8}).encode()
CLIENT_BUFFER_MIB = 16  # the server's per-address bound on unfinished request bytes


def _post(path: bytes, body: bytes, extra: bytes = b"") -> bytes:
    return (b"POST " + path + b" HTTP/1.1\r\n" + HOST + b"Content-Type: application/json\r\n"
            + b"Content-Length: %d\r\n" % len(body) + extra + b"\r\n" + body)


def _connect(port: int, timeout: float = 5.0) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=timeout, source_address=(ATTACKER, 0))


def _read_status(s: socket.socket) -> int:
    """The status of the first final answer on `s` (skipping 1xx), reading its head only."""
    buf = b""
    while True:
        while b"\r\n\r\n" not in buf:
            chunk = s.recv(65536)
            if not chunk:
                raise ConnectionError("closed before an answer")
            buf += chunk
        head, buf = buf.split(b"\r\n\r\n", 1)
        status = int(head.split(b" ", 2)[1])
        if status >= 200:
            return status


class Attack:
    """A scenario: `run` loops until `stop` is set; `held` sockets are closed at the end."""

    def __init__(self, port: int, stop: threading.Event):
        self.port = port
        self.stop = stop
        self.held: list[socket.socket] = []
        self.lock = threading.Lock()
        self.sent = 0  # attacking connections or requests made

    def hold(self, s: socket.socket) -> None:
        with self.lock:
            self.held.append(s)
            self.sent += 1

    def close_all(self) -> None:
        with self.lock:
            for s in self.held:
                with contextlib.suppress(OSError):
                    s.close()
            self.held.clear()

    def threads(self, n: int, fn: Callable[[], None]) -> list[threading.Thread]:
        def loop() -> None:
            while not self.stop.is_set():
                try:
                    fn()
                except OSError:
                    time.sleep(0.05)
        return [threading.Thread(target=loop, daemon=True) for _ in range(n)]

    def recycle(self, keep: int) -> None:
        """Close the oldest held sockets beyond `keep` (the server closed most of them anyway)."""
        with self.lock:
            while len(self.held) > keep:
                with contextlib.suppress(OSError):
                    self.held.pop(0).close()


# ------------------------------------------------------------------------ the scenarios

def slow_reader(a: Attack) -> list[threading.Thread]:
    """Requests whose answers the client never reads, on connections it never closes: a chat
    with Connection: close, and many pipelined GETs of the largest dashboard file."""
    def one() -> None:
        s = _connect(a.port)
        a.hold(s)
        s.sendall(_post(b"/v1/chat/completions", CHAT, b"Connection: close\r\n"))
        s2 = _connect(a.port)
        a.hold(s2)
        s2.settimeout(5)
        with contextlib.suppress(OSError):
            for _ in range(200):
                s2.sendall(b"GET /ui/ HTTP/1.1\r\n" + HOST + b"\r\n")
        a.recycle(60)
        time.sleep(0.5)
    return a.threads(2, one)


def idle_flood(a: Attack) -> list[threading.Thread]:
    """1,000 connections that send nothing, reopened as the server closes them."""
    def one() -> None:
        s = _connect(a.port)
        a.hold(s)
        a.recycle(1000)
    return a.threads(4, one)


def chunk_flood(a: Attack) -> list[threading.Thread]:
    """Connections streaming 64 KiB chunks as fast as they can."""
    piece = b"10000\r\n" + b"x" * 65536 + b"\r\n"

    def one() -> None:
        s = _connect(a.port)
        a.hold(s)
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\n" + HOST + b"Transfer-Encoding: chunked\r\n\r\n")
        with contextlib.suppress(OSError):
            while not a.stop.is_set():
                s.sendall(piece)
        a.recycle(8)
    return a.threads(4, one)


def partial_bodies(a: Attack) -> list[threading.Thread]:
    """Connections announcing a 4,000,000-byte body and sending all but its last byte."""
    body = b" " * 3_999_999

    def one() -> None:
        s = _connect(a.port, timeout=10)
        a.hold(s)
        with contextlib.suppress(OSError):
            s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\n" + HOST + b"Content-Length: 4000000\r\n\r\n" + body)
        a.recycle(64)
        time.sleep(0.05)
    return a.threads(4, one)


def refused_bodies(a: Attack) -> list[threading.Thread]:
    """Requests refused before their body (a 100 MB Content-Length; Expect: 100-continue with
    no body; a cross-site Origin) whose bodies never come."""
    heads = [b"POST /v1/chat/completions HTTP/1.1\r\n" + HOST + b"Content-Length: 100000000\r\n\r\n",
             b"POST /v1/chat/completions HTTP/1.1\r\n" + HOST + b"Content-Length: 1000\r\nExpect: 100-continue\r\n\r\n",
             b"POST /v1/chat/completions HTTP/1.1\r\n" + HOST + b"Origin: https://evil.example\r\n"
             b"Content-Length: 100000000\r\n\r\n"]

    def one() -> None:
        for head in heads:
            s = _connect(a.port)
            a.hold(s)
            s.sendall(head)
        a.recycle(60)
        time.sleep(0.02)
    return a.threads(2, one)


def half_close(a: Attack) -> list[threading.Thread]:
    """Clients that shut their sending side after a chat (nc -N) and read the answer."""
    def one() -> None:
        with _connect(a.port, timeout=30) as s:
            s.sendall(_post(b"/v1/chat/completions", CHAT))
            s.shutdown(socket.SHUT_WR)
            status = _read_status(s)
            with a.lock:
                a.sent += 1
                if status != 200:
                    a.failures = getattr(a, "failures", 0) + 1
    return a.threads(4, one)


def malformed(a: Attack) -> list[threading.Thread]:
    """A malformed request line and an HTTP/1.0 request, answers never read, sockets kept."""
    def one() -> None:
        for raw in (b"GARBAGE\r\n\r\n", b"GET /health HTTP/1.0\r\n\r\n", b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\n\r\n"):
            s = _connect(a.port)
            a.hold(s)
            s.sendall(raw)
        a.recycle(60)
        time.sleep(0.02)
    return a.threads(2, one)


def costly_scoring(a: Attack) -> list[threading.Thread]:
    """/v1/systemone with 64 questions of 26 long options each, back to back, some abandoned."""
    criteria = {f"option {i}": "a long description of what this option means " * 4 for i in range(26)}
    body = json.dumps({"model": "colibri-tiny", "state": "A ticket about a printer that will not print. " * 20,
                       "questions": {f"q{i}": {"type": "choice", "criteria": criteria} for i in range(64)}}).encode()

    def one() -> None:
        s = _connect(a.port, timeout=60)
        a.hold(s)
        s.sendall(_post(b"/v1/systemone", body))
        if a.sent % 2:
            time.sleep(1)  # hang up mid-scoring: the work must stop with it
        else:
            with contextlib.suppress(OSError):
                _read_status(s)
        a.recycle(0)
    return a.threads(2, one)


SCENARIOS: dict[str, Callable[[Attack], list[threading.Thread]]] = {
    "slow-reader": slow_reader, "idle-flood": idle_flood, "chunk-flood": chunk_flood,
    "partial-bodies": partial_bodies, "refused-bodies": refused_bodies, "half-close": half_close,
    "malformed-http10": malformed, "costly-scoring": costly_scoring,
}


# ------------------------------------------------------------------------ the well-behaved client

def _probe_health(port: int) -> tuple[float | None, str]:
    """(seconds, "200") for a good answer; (None, what went wrong) otherwise."""
    start = time.monotonic()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5, source_address=(VICTIM, 0)) as s:
            s.settimeout(5)
            s.sendall(b"GET /health HTTP/1.1\r\n" + HOST + b"Connection: close\r\n\r\n")
            status = _read_status(s)
    except OSError as e:
        return None, type(e).__name__
    return (time.monotonic() - start, "200") if status == 200 else (None, str(status))


def _chat_once(port: int) -> str:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=30, source_address=(VICTIM, 0)) as s:
            s.settimeout(30)
            s.sendall(_post(b"/v1/chat/completions", CHAT, b"Connection: close\r\n"))
            return str(_read_status(s))
    except OSError as e:
        return type(e).__name__


def _chat(port: int) -> tuple[str, str]:
    """(first try, final outcome) of a short chat: "200", another status, or the exception.
    Like the OpenAI and Anthropic SDKs (max_retries=2), a 429 is retried after its
    Retry-After (1 s), at most twice."""
    first = outcome = _chat_once(port)
    for _ in range(2):
        if outcome != "429":
            break
        time.sleep(1.0)
        outcome = _chat_once(port)
    return first, outcome


def _status_kib(pid: int | None, field: str) -> int:
    if pid is None:
        return 0
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def run_scenario(name: str, seconds: float, logdir: Path) -> dict:
    server = Server([], logdir / f"attack-{name}.log")
    try:
        server.wait_ready()
        _chat(server.port)  # warm: caches and pools filled by one ordinary request
        time.sleep(0.5)
        worker = server.worker_pid()
        idle_kib = _status_kib(worker, "VmRSS")
        stop = threading.Event()
        attack = Attack(server.port, stop)
        attackers = SCENARIOS[name](attack)
        for t in attackers:
            t.start()
        latencies: list[float | None] = []
        failures: Counter[str] = Counter()
        chats: list[tuple[str, str]] = []

        def chatter() -> None:
            while not stop.is_set():
                chats.append(_chat(server.port))
                stop.wait(5)

        chat_thread = threading.Thread(target=chatter, daemon=True)
        time.sleep(1.0)  # let the attack build up before measuring
        chat_thread.start()
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            t0 = time.monotonic()
            took, outcome = _probe_health(server.port)
            latencies.append(took)
            if took is None:
                failures[outcome] += 1
            time.sleep(max(0.0, 0.2 - (time.monotonic() - t0)))
        stop.set()
        chat_thread.join(timeout=35)
        peak_kib = _status_kib(worker, "VmHWM")
        attack.close_all()
        for t in attackers:
            t.join(timeout=5)
        ok = sorted(x for x in latencies if x is not None)
        p99 = ok[min(len(ok) - 1, int(0.99 * len(ok)))] if ok else float("inf")
        idle, peak = idle_kib / 1024, peak_kib / 1024
        row = {"scenario": name, "probes": len(latencies), "probe_ok_pct": round(100 * len(ok) / max(1, len(latencies)), 2),
               "probe_p99_s": round(p99, 3), "probe_failures": dict(failures),
               "chats_ok": sum(final == "200" for _, final in chats), "chats": len(chats),
               "chats_ok_first_try": sum(first == "200" for first, _ in chats),
               "chat_outcomes": dict(Counter(final for _, final in chats)),
               "idle_rss_mib": round(idle, 1), "peak_rss_mib": round(peak, 1), "attack_connections": attack.sent,
               "half_close_failures": getattr(attack, "failures", 0)}
        row["pass"] = (row["probe_ok_pct"] >= 99 and p99 < 1.0 and len(chats) > 0 and row["chats_ok"] == len(chats)
                       and peak < 2 * idle + CLIENT_BUFFER_MIB and row["half_close_failures"] == 0)
        return row
    finally:
        server.stop()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--only", default="", help="comma-separated scenario names (default: all)")
    ap.add_argument("--json", default="build/bench/attack.json")
    args = ap.parse_args()
    names = [n for n in args.only.split(",") if n] or list(SCENARIOS)
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        ap.error(f"unknown scenario(s) {unknown}; known: {', '.join(SCENARIOS)}")
    out = Path(args.json)
    rows = []
    print(f"{'scenario':18} {'health ok':>9} {'p99 s':>6} {'chats':>6} {'1st try':>7} {'idle MiB':>8} {'peak MiB':>8} "
          f"{'attack':>7}  pass")
    for name in names:
        row = run_scenario(name, args.seconds, out.parent)
        rows.append(row)
        print(f"{name:18} {row['probe_ok_pct']:>8}% {row['probe_p99_s']:>6} {row['chats_ok']:>3}/{row['chats']:<2} "
              f"{row['chats_ok_first_try']:>7} "
              f"{row['idle_rss_mib']:>8} {row['peak_rss_mib']:>8} {row['attack_connections']:>7}  {row['pass']}"
              + (f"  probe failures {row['probe_failures']}" if row["probe_failures"] else "")
              + (f"  chats {row['chat_outcomes']}" if row["chats_ok"] < row["chats"] else ""),
              flush=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"seconds": args.seconds, "machine": platform.platform(), "python": platform.python_version(),
                               "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "rows": rows}, indent=2))
    return 0 if all(r["pass"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
