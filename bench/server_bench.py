"""Server benchmarks: requests/s and p50/p99 latency of `colibri serve` against a bare Falcon
app under the same gunicorn settings (the ceiling), and streamed tokens/s through HTTP
against the raw engine on the same requests — on the embedded model and on a ~86M random model
of the engine benchmark's shape. Prints Markdown tables.

Usage: PYTHONPATH=. python bench/server_bench.py [--requests 400] [--clients 4] [--rounds 20] [--json F]
"""
from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

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


def streams(port: int, prompts: list[str], max_tokens: int, rounds: int) -> dict[str, float]:
    """`rounds` times: one chat stream per prompt, all at once. Best round's tokens/s (the first
    rounds pay for warm-up), and requests/s and latency over every round."""
    best, lat, n_req, wall_all = 0.0, [], 0, 0.0
    for _ in range(rounds):
        t = time.perf_counter()
        with ThreadPoolExecutor(len(prompts)) as pool:
            parts = list(pool.map(lambda p: load(port, "/v1/chat/completions", {
                "model": "colibri-tiny", "messages": [{"role": "user", "content": p}], "max_tokens": max_tokens,
                "temperature": 0, "stream": True, "stream_options": {"include_usage": True}}, 1, 1, stream=True),
                prompts))
        wall = time.perf_counter() - t
        best = max(best, sum(x["tokens"] for x in parts) / wall)
        lat += [x["p50_ms"] for x in parts]  # one request each: its latency
        n_req += len(parts)
        wall_all += wall
    lat.sort()
    return {"tok_s": best, "rps": n_req / wall_all, "p50_ms": statistics.median(lat),
            "p99_ms": lat[int(0.99 * (len(lat) - 1))]}


def raw_engine_tokens_per_s(model_dir: Path | None, prompts: list[str], max_tokens: int, rounds: int) -> float:
    """The same requests on the bare engine, as the server runs them: the glm template, every
    prompt prefilled, then batched greedy steps; a sequence leaves the batch at an end token or
    after max_tokens. Best round."""
    from colibri.chat_template import render
    from colibri.model import Model
    from colibri.spec import load_spec

    m = Model(model_dir)
    e = m.engine(n_slots=len(prompts))
    family = load_spec().families["glm"].row
    tpl = m.template(family["template"])
    end = m.eos_ids | {i for t in family.get("end_tokens", []) if (i := m.token_id(t)) is not None}
    ids = [m.encode(render(tpl, [{"role": "user", "content": p}])) for p in prompts]
    best = 0.0
    for _ in range(rounds):
        t = time.perf_counter()
        logits = {s: e.prefill(s, x, reuse=False)[1] for s, x in enumerate(ids)}
        produced = 0
        live = dict.fromkeys(logits, 0)
        while live:
            nxt = {s: int(logits[s].argmax()) for s in live}
            for s, tok in nxt.items():
                if tok in end:
                    del live[s]
                    continue
                produced += 1
                live[s] += 1
                if live[s] >= max_tokens:
                    del live[s]
            if live:
                order = list(live)
                logits = dict(zip(order, e.decode(order, [nxt[s] for s in order]), strict=True))
        best = max(best, produced / (time.perf_counter() - t))
    return best


def served_random_model() -> Path:
    """The engine benchmark's ~100M shape (d 768, 12 layers, 12/4 heads, SwiGLU 2048) with the
    embedded model's vocabulary, tokenizer and templates, so `colibri serve --model` can serve
    it: about 86M parameters of random weights. Written once under build/bench/."""
    from llama_reference import write_random_model

    from colibri.paths import EMBEDDED_MODEL

    d = ROOT / "build" / "bench" / "random-86m-served"
    if not (d / "model.safetensors").exists():
        print("writing the ~86M random model ...", file=sys.stderr)
        write_random_model(d, seed=0, dim=768, hidden=2048, layers=12, heads=12, kv_heads=4, vocab=2058, ctx=2048)
        for f in EMBEDDED_MODEL.iterdir():
            if f.name.startswith(("tokenizer", "chat_template")):
                shutil.copy(f, d / f.name)
    return d


def stream_ratio(model_dir: Path | None, prompts: list[str], rounds: int) -> dict[str, Any]:
    args = ["--kv-slots", "4", "--max-queue", "64"] + (["--model", str(model_dir)] if model_dir else [])
    with live_server(*args, ready_timeout=120) as base:
        http = streams(int(base.rsplit(":", 1)[1]), prompts, 64, rounds)
    raw = raw_engine_tokens_per_s(model_dir, prompts, 64, rounds)
    return {"http": http, "raw_tok_s": raw, "ratio": http["tok_s"] / raw}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=400)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=20, help="rounds of 4 concurrent streams (embedded model)")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    refused = {"model": "colibri-tiny", "messages": [{"role": "user", "content": "hi"}], "temperature": 5}
    one = {"model": "colibri-tiny", "prompt": "Count from 1 to", "max_tokens": 1, "temperature": 0}
    prompts = ["Count from 1 to 60.", "Count from 2 to 60.", "Count from 3 to 60.", "Count from 4 to 60."]
    port = free_port()
    bare = bare_server(port)
    try:
        wait_port(port)
        b_ref = load(port, "/v1/chat/completions", refused, a.requests, a.clients)
        b_one = load(port, "/v1/completions", one, a.requests, a.clients)
        b_stream = streams(port, prompts, 64, a.rounds)
    finally:
        os.killpg(bare.pid, signal.SIGTERM)
        bare.wait()
    with live_server("--kv-slots", "4", "--max-queue", "64") as base:
        cport = int(base.rsplit(":", 1)[1])
        c_ref = load(cport, "/v1/chat/completions", refused, a.requests, a.clients)
        c_one = load(cport, "/v1/completions", one, a.requests, a.clients)
    embedded = stream_ratio(None, prompts, a.rounds)
    big = stream_ratio(served_random_model(), prompts, 3)
    rows = [("refused by validation (temperature 5)", c_ref, b_ref), ("completions, max_tokens 1", c_one, b_one),
            ("64-token chat streams, 4 at once over 4 slots", embedded["http"], b_stream)]
    print(f"{time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores, {a.requests} requests over {a.clients} keep-alive "
          f"clients; streams: best of {a.rounds} rounds\n")
    print("| scenario | colibri req/s | p50 / p99 ms | bare Falcon req/s | p50 / p99 ms | ratio |")
    print("|---|---|---|---|---|---|")
    for name, c, b in rows:
        print(f"| {name} | {c['rps']:.0f} | {c['p50_ms']:.1f} / {c['p99_ms']:.1f} | {b['rps']:.0f} | "
              f"{b['p50_ms']:.1f} / {b['p99_ms']:.1f} | {c['rps'] / b['rps']:.2f}× |")
    print("\n| model | streamed tok/s through HTTP | raw engine tok/s, same requests | ratio |\n|---|---|---|---|")
    for name, r in (("embedded (1M)", embedded), ("random ~86M, embedded tokenizer", big)):
        print(f"| {name} | {r['http']['tok_s']:.0f} | {r['raw_tok_s']:.0f} | {r['ratio']:.2f} |")
    if a.json:
        Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        Path(a.json).write_text(json.dumps({"refused": [c_ref, b_ref], "max_tokens_1": [c_one, b_one],
                                            "streams_bare": b_stream, "embedded": embedded, "random_86m": big},
                                           indent=2))


if __name__ == "__main__":
    main()
