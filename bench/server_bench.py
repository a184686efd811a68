"""Server benchmarks: requests/s and p50/p99 latency of `colibri serve` against a bare Falcon
app under the same gunicorn settings (the ceiling), and streamed tokens/s through HTTP
against the raw engine on the same requests. Prints a Markdown table.

Usage: PYTHONPATH=. python bench/server_bench.py [--requests 400] [--clients 4]
"""
from __future__ import annotations

import argparse
import http.client
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from live_server import free_port, live_server  # noqa: E402


def bare_server(port: int) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "gunicorn", "--worker-class", "gthread", "--workers", "1",
                             "--threads", "8", "--bind", f"127.0.0.1:{port}", "--chdir", str(ROOT / "bench"),
                             "--log-level", "warning", "bare_app:app"], cwd=tempfile.gettempdir(),
                            start_new_session=True)


def load(port: int, path: str, body: dict, n: int, clients: int, stream: bool = False) -> dict[str, float]:
    payload = json.dumps(body).encode()
    per = n // clients

    def worker(_: int) -> list[tuple[float, int]]:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        out = []
        for _ in range(per):
            t = time.perf_counter()
            conn.request("POST", path, payload, {"Content-Type": "application/json", "Host": "localhost"})
            r = conn.getresponse()
            data = r.read()
            tokens = 0
            if stream:  # completion tokens from the final usage chunk
                for line in data.split(b"\n"):
                    if line.startswith(b"data: {") and b'"choices":[]' in line:
                        tokens = json.loads(line[6:])["usage"]["completion_tokens"]
            out.append((time.perf_counter() - t, tokens))
            if r.getheader("Connection", "").lower() == "close":
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        conn.close()
        return out

    t0 = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        results = [x for part in pool.map(worker, range(clients)) for x in part]
    wall = time.perf_counter() - t0
    lat = sorted(x[0] for x in results)
    return {"rps": len(results) / wall, "p50_ms": 1e3 * statistics.median(lat),
            "p99_ms": 1e3 * lat[int(0.99 * (len(lat) - 1))], "tokens": sum(x[1] for x in results), "wall": wall}


def wait_port(port: int) -> None:
    for _ in range(200):
        try:
            http.client.HTTPConnection("127.0.0.1", port, timeout=1).request("GET", "/")
            return
        except OSError:
            time.sleep(0.05)


def raw_engine_tokens_per_s(prompts: list[str], tokens: int) -> float:
    """The same 4 requests on the bare engine: prefill each, then batched greedy steps."""
    from colibri.chat_template import render
    from colibri.model import Model

    m = Model()
    e = m.engine(n_slots=4)
    tpl = m.template("chat_template.glm.jinja")
    ids = [m.encode(render(tpl, [{"role": "user", "content": p}])) for p in prompts]
    best = float("inf")
    for _ in range(3):  # the first run pays for thread start-up and first-touch page faults
        t = time.perf_counter()
        logits = [e.prefill(s, x, reuse=False)[1] for s, x in enumerate(ids)]
        for _ in range(tokens):
            nxt = [int(lg.argmax()) for lg in logits]
            logits = list(e.decode([0, 1, 2, 3], nxt))
        best = min(best, time.perf_counter() - t)
    return 4 * tokens / best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=400)
    ap.add_argument("--clients", type=int, default=4)
    a = ap.parse_args()
    refused = {"model": "colibri-tiny", "messages": [{"role": "user", "content": "hi"}], "temperature": 5}
    one = {"model": "colibri-tiny", "prompt": "Count from 1 to", "max_tokens": 1, "temperature": 0}
    rows = []
    port = free_port()
    bare = bare_server(port)
    try:
        wait_port(port)
        b_ref = load(port, "/v1/chat/completions", refused, a.requests, a.clients)
        b_one = load(port, "/v1/completions", one, a.requests, a.clients)
    finally:
        os.killpg(bare.pid, signal.SIGTERM)
        bare.wait()
    with live_server("--kv-slots", "4", "--max-queue", "64") as base:
        cport = int(base.rsplit(":", 1)[1])
        c_ref = load(cport, "/v1/chat/completions", refused, a.requests, a.clients)
        c_one = load(cport, "/v1/completions", one, a.requests, a.clients)
        prompts = ["Count from 1 to 60.", "Count from 2 to 60.", "Count from 3 to 60.", "Count from 4 to 60."]
        streams = []
        t = time.perf_counter()
        with ThreadPoolExecutor(4) as pool:
            streams = list(pool.map(lambda p: load(cport, "/v1/chat/completions", {
                "model": "colibri-tiny", "messages": [{"role": "user", "content": p}], "max_tokens": 64,
                "temperature": 0, "stream": True, "stream_options": {"include_usage": True}}, 1, 1, stream=True),
                prompts))
        http_tps = sum(s["tokens"] for s in streams) / (time.perf_counter() - t)
    raw_tps = raw_engine_tokens_per_s(prompts, 64)
    rows.append(("refused by validation (temperature 5)", c_ref, b_ref))
    rows.append(("completions, max_tokens 1", c_one, b_one))
    print(f"{time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores, {a.requests} requests over {a.clients} keep-alive clients\n")
    print("| scenario | colibri req/s | p50 / p99 ms | bare Falcon req/s | p50 / p99 ms | ratio |")
    print("|---|---|---|---|---|---|")
    for name, c, b in rows:
        print(f"| {name} | {c['rps']:.0f} | {c['p50_ms']:.1f} / {c['p99_ms']:.1f} | {b['rps']:.0f} | "
              f"{b['p50_ms']:.1f} / {b['p99_ms']:.1f} | {c['rps'] / b['rps']:.2f}× |")
    print(f"\n64-token streams over 4 slots: {http_tps:.0f} tok/s through HTTP, {raw_tps:.0f} tok/s on the raw engine "
          f"(same 4 requests, batched): ratio {http_tps / raw_tps:.2f}")


if __name__ == "__main__":
    main()
