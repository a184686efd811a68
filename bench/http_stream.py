"""Streamed decode through HTTP: `colibri serve` beside llama.cpp's `llama-server` on the same
SmolLM2 Q4_1 GGUF (issue 52, point 4).

    PYTHONPATH=. python bench/http_stream.py [--rounds 3] [--max-tokens 128] [--streams 1,4] [--threads 2]

Both servers stay up for the whole run, each with the same engine threads (`--engine-threads T`,
`llama-server -t T -tb T`) and 4 slots (`--kv-slots 4`, `-np 4`, continuous batching). Each round,
for each concurrency N, N streamed `/v1/completions` requests start together on one server, then on
the other (the order flips every round, so a slow spell of the shared machine hits both), with
`temperature: 0`, a fixed `max_tokens` and `stream_options.include_usage`.

Equal lengths without `ignore_eos` (colibri has no such field, and no logit_bias): every prompt is
a count that greedy decoding continues past `max_tokens` ("Counting from 204: 204, 205, ... 215,"),
and every stream is checked to end with `finish_reason: "length"` and `usage.completion_tokens ==
max_tokens`; a stream that ends early fails the run rather than scoring a shorter answer. Each
request starts with its own number (round, stream), so no request reuses another's cached prompt.

Per stream: TTFT (request sent to the first chunk with text) and decode tok/s ((tokens - 1) over
first to last text chunk; colibri may put several tokens in one chunk, so the count is the usage's,
not the chunks'); per round, the aggregate (all streams' tokens over the wall time from the first
request sent to the last stream's end, TTFT included). Each figure is the best over the rounds (TTFT
the lowest). `uptime` is recorded with every round; results go to bench/results/http-stream-tT.json.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench" / "peers"))
sys.path.insert(0, str(ROOT / "bench"))
from colibri_process import Server  # noqa: E402
from llamacpp_build import LLAMA_SERVER, ensure_llama_server  # noqa: E402
from server_process import free_port, start, stop, wait_ready  # noqa: E402
from smollm2 import ensure_gguf  # noqa: E402


def prompt(key: int, stream: int) -> str:
    """A count the model keeps counting, from a number no other request of the run starts from (key:
    one per round and concurrency), so that neither server finds the prompt in its cache; three digits
    everywhere, so every prompt has the same token count."""
    n = 100 + 29 * (key * 4 + stream)
    return f"Counting from {n}: " + ", ".join(str(n + i) for i in range(12)) + ","


def one_stream(base: str, model: str, text: str, max_tokens: int, go: threading.Barrier, out: dict) -> None:
    body = {"model": model, "prompt": text, "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}
    first = last = None
    usage, finish = None, None
    with httpx.Client(timeout=300) as client:
        go.wait()
        sent = time.perf_counter()
        with client.stream("POST", base + "/v1/completions", json=body) as r:
            r.raise_for_status()
            for line in r.iter_lines():
                if not line.startswith("data: {"):
                    continue
                chunk = json.loads(line[6:])
                for choice in chunk.get("choices") or []:
                    if choice.get("text"):
                        last = time.perf_counter()
                        first = first or last
                    finish = choice.get("finish_reason") or finish
                usage = chunk.get("usage") or usage
    end = time.perf_counter()
    out.update(sent=sent, first=first, last=last, end=end, usage=usage, finish=finish)


def round_of(base: str, model: str, n: int, rnd: int, max_tokens: int) -> dict:
    go = threading.Barrier(n)
    outs: list[dict] = [{} for _ in range(n)]
    threads = [threading.Thread(target=one_stream, args=(base, model, prompt(rnd, i), max_tokens, go, outs[i]))
               for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for o in outs:
        got = (o.get("usage") or {}).get("completion_tokens")
        if o.get("finish") != "length" or got != max_tokens:
            raise RuntimeError(f"{base}: a stream ended with {o.get('finish')!r} after {got} tokens, not "
                               f"'length' after {max_tokens}: the lengths would differ")
    wall = max(o["end"] for o in outs) - min(o["sent"] for o in outs)
    return {"ttft": [o["first"] - o["sent"] for o in outs],
            "per_stream": [(max_tokens - 1) / (o["last"] - o["first"]) for o in outs],
            "aggregate": n * max_tokens / wall,
            "prompt_tokens": [o["usage"]["prompt_tokens"] for o in outs]}


def warm(base: str, model: str) -> None:
    httpx.post(base + "/v1/completions", json={"model": model, "prompt": "1. a\n2.", "max_tokens": 4,
                                               "temperature": 0}, timeout=300).raise_for_status()


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def start_servers(gguf: Path, threads: int, slots: int, ctx: int) -> dict:
    col = Server(["--model", str(gguf), "--model-id", "smollm2", "--kv-slots", str(slots), "--engine-threads", str(threads),
                  "--ctx", str(ctx)], ROOT / "build" / "bench" / "http_stream-colibri.log")
    port = free_port()
    # -c is shared by the slots in this llama.cpp (each gets ctx), so it is slots x ctx here.
    llama, log = start("http_stream-llama-server",
                       [str(LLAMA_SERVER), "-m", str(gguf), "--alias", "smollm2", "-c", str(ctx * slots),
                        "-np", str(slots), "-t", str(threads), "-tb", str(threads), "--host", "127.0.0.1",
                        "--port", str(port)], {}, ROOT / "build" / "bench")
    try:
        col.wait_ready(300)
        wait_ready("llama-server", llama, f"http://127.0.0.1:{port}/health", 300, log)
    except BaseException:  # neither server outlives a start that failed
        col.stop()
        stop(llama)
        raise
    return {"colibri": (col.base, col), "llama-server": (f"http://127.0.0.1:{port}", llama)}


def summarize(rounds: list[dict]) -> dict:
    return {"per_stream_best": max(min(r["per_stream"]) for r in rounds),
            "per_stream_mean_best": max(sum(r["per_stream"]) / len(r["per_stream"]) for r in rounds),
            "aggregate_best": max(r["aggregate"] for r in rounds),
            "ttft_best": min(max(r["ttft"]) for r in rounds),
            "prompt_tokens": rounds[0]["prompt_tokens"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds (best is kept; default 3)")
    ap.add_argument("--max-tokens", type=int, default=128, help="tokens every stream generates (default 128)")
    ap.add_argument("--streams", default="1,4", help="concurrent streams, comma-separated (default 1,4)")
    ap.add_argument("--threads", type=int, default=2, help="engine threads of both servers (default 2)")
    ap.add_argument("--json", type=Path, default=None, help="default bench/results/http-stream-tTHREADS.json")
    args = ap.parse_args()
    conc = [int(n) for n in args.streams.split(",")]
    args.json = args.json or ROOT / "bench" / "results" / f"http-stream-t{args.threads}.json"
    if 100 + 29 * (args.rounds * len(conc) * 4) + 12 > 999:
        ap.error("too many rounds for distinct three-digit prompts")
    ensure_llama_server()
    gguf = ensure_gguf()
    servers = start_servers(gguf, args.threads, max(4, *conc), 1024)
    raw: dict = {who: {str(n): [] for n in conc} for who in servers}
    loads = []
    try:
        for base, _ in servers.values():
            warm(base, "smollm2")
        for rnd in range(args.rounds):
            loads.append(uptime())
            order = list(servers) if rnd % 2 == 0 else list(reversed(servers))
            for n in conc:
                for who in order:
                    got = round_of(servers[who][0], "smollm2", n, rnd * len(conc) + conc.index(n), args.max_tokens)
                    raw[who][str(n)].append(got)
                    print(f"[round {rnd + 1}] {who}, {n} streams: per stream "
                          + ", ".join(f"{v:.1f}" for v in got["per_stream"])
                          + f" tok/s, aggregate {got['aggregate']:.1f} tok/s, TTFT "
                          + ", ".join(f"{v * 1000:.0f}" for v in got["ttft"]) + " ms", file=sys.stderr, flush=True)
        loads.append(uptime())
    finally:
        servers["colibri"][1].stop()
        stop(servers["llama-server"][1])
    best = {who: {n: summarize(rs) for n, rs in per.items()} for who, per in raw.items()}
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "load": loads,
                                     "max_tokens": args.max_tokens, "threads": args.threads, "best": best,
                                     "rounds": raw}, indent=1) + "\n")
    print(f"load averages per round: {loads}\n")
    print("| streams | metric | colibri | llama-server | ratio |\n|---|---|---|---|---|")
    for n in map(str, conc):
        c, ll = best["colibri"][n], best["llama-server"][n]
        for key, label, hi in (("per_stream_best", "decode tok/s, slowest stream", True),
                               ("per_stream_mean_best", "decode tok/s, mean stream", True),
                               ("aggregate_best", "aggregate tok/s (with TTFT)", True),
                               ("ttft_best", "TTFT ms, slowest stream", False)):
            scale = 1000 if not hi else 1
            ratio = c[key] / ll[key] if hi else ll[key] / c[key]
            print(f"| {n} | {label} | {c[key] * scale:.1f} | {ll[key] * scale:.1f} | {ratio:.2f}× |")
    print("\nprompt tokens per stream: " + "; ".join(f"{w} {best[w][str(conc[-1])]['prompt_tokens']}" for w in servers))


if __name__ == "__main__":
    main()
