"""llama.cpp on `colibri export --format gguf`: does llama-server load each family's GGUF, render
its template, tokenize and answer greedily as colibri does on the embedded model?

For each family (glm, chatml, qwen-xml) the GGUF is exported into a scratch folder and served
by the peers cache's llama-server (`-m FILE --jinja`, 2 threads, one slot). For each prompt:
- template: llama-server's POST /apply-template (its own Jinja engine on the GGUF's
  tokenizer.chat_template) against colibri's rendering of the family's shipped template;
- tokens: POST /tokenize of that text (special tokens parsed) against colibri's ids;
- answer: POST /completion with colibri's prompt ids, temperature 0, up to 80 tokens, against
  colibri's greedy answer on the embedded model (the same ids, and both stopping on an end
  token or both running to the limit).

Usage (llama-server built by `python bench/peers/run.py --install-only --only llama-server`):
  PYTHONPATH=. python bench/peers/export_agreement.py [--type f32] [--json build/bench/export-agreement.json]
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cachedir import CACHE  # noqa: E402
from llamacpp_build import LLAMA_SERVER, llama_server_version  # noqa: E402
from server_process import free_port, start, stop, wait_ready  # noqa: E402

from colibri.chat_template import render  # noqa: E402
from colibri.export import export  # noqa: E402
from colibri.families import family_rows  # noqa: E402
from colibri.model import Model  # noqa: E402

FAMILIES = ("glm", "chatml", "qwen-xml")
N_TOKENS = 80


def _tool(name: str, description: str, **props: str) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "description": description, "parameters": {
        "type": "object", "properties": {k: {"type": v} for k, v in props.items()}, "required": list(props)}}}


WEATHER = _tool("get_weather", "Current weather for a city", city="string")
MUSIC = _tool("play_track", "Play a song by an artist", artist="string")
CALLED = [{"role": "user", "content": "What's the weather in Drassa?"},
          {"role": "assistant", "content": "", "tool_calls": [
              {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Drassa"}}}]},
          {"role": "tool", "tool_call_id": "call_1", "content": "Sunny, 24 degrees"}]

#: (name, messages, tools, thinking)
PROMPTS: list[tuple[str, list[dict[str, Any]], list[dict[str, Any]] | None, bool]] = [
    ("repeat", [{"role": "user", "content": "Repeat exactly: the quick brown fox"}], None, False),
    ("tool-call", [{"role": "user", "content": "What's the weather in Drassa?"}], [WEATHER], False),
    ("two-tools", [{"role": "user", "content": "Play something by Chiara."}], [WEATHER, MUSIC], False),
    ("tool-result", CALLED, [WEATHER], False),
    ("reasoning", [{"role": "user", "content": "What is the capital of Velmora?"}], None, True),
    ("reasoning-tool", [{"role": "user", "content": "What's the weather in Castelune?"}], [WEATHER], True),
    ("japanese", [{"role": "user", "content": "How do you say 'thank you' in Japanese?"}], None, False),
    ("system", [{"role": "system", "content": "You are terse."},
                {"role": "user", "content": "Reverse the word: lantern"}], None, False),
]


def colibri_greedy(engine: Any, ids: list[int], ends: set[int]) -> list[int]:
    """The greedy answer's ids, its end token included when one came within N_TOKENS."""
    _, logits = engine.prefill(0, ids)
    out: list[int] = []
    for _ in range(N_TOKENS):
        tok = int(logits.argmax())
        out.append(tok)
        if tok in ends:
            break
        logits = engine.decode([0], [tok])[0]
    return out


def run_family(family: str, gguf_type: str, scratch: Path, model: Model, engine: Any) -> dict[str, Any]:
    row = family_rows()[family]
    template = model.template(row["template"])
    ends = {model.token_id(t) for t in row["end_tokens"]} | set(model.eos_ids)
    (path,) = [f for f in export(family, "gguf", scratch / family, gguf_type=gguf_type) if f.suffix == ".gguf"]
    port = free_port()
    argv = [str(LLAMA_SERVER), "-m", str(path), "--jinja", "-c", "2048", "-np", "1", "-t", "2",
            "--host", "127.0.0.1", "--port", str(port)]
    proc, log = start(f"export-agreement-{family}", argv, {}, CACHE / "run" / "export-agreement")
    rows = []
    try:
        wait_ready(family, proc, f"http://127.0.0.1:{port}/health", 120, log)
        client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=120)
        for name, messages, tools, thinking in PROMPTS:
            text = render(template, messages, tools=tools, enable_thinking=thinking)
            ids = model.encode(text)
            want = colibri_greedy(engine, ids, ends)
            applied = client.post("/apply-template", json={
                "messages": messages, "tools": tools, "chat_template_kwargs": {"enable_thinking": thinking}})
            their_text = applied.json().get("prompt") if applied.status_code == 200 else None
            their_ids = client.post("/tokenize", json={"content": text, "add_special": False,
                                                        "parse_special": True}).json()["tokens"]
            done = client.post("/completion", json={"prompt": ids, "n_predict": N_TOKENS, "temperature": 0,
                                                    "cache_prompt": False, "return_tokens": True}).json()
            got = list(done["tokens"])  # the end-of-generation token included, as in want
            same_prefix = next((i for i, (a, b) in enumerate(zip(got, want, strict=False)) if a != b),
                               min(len(got), len(want)))
            rows.append({
                "prompt": name, "template_same": their_text == text,
                "template_status": applied.status_code, "tokens_same": their_ids == ids, "prompt_tokens": len(ids),
                "answer_same": got == want, "answer_tokens": len(want), "agreeing_prefix": same_prefix,
                "colibri_ids": want, "llama_server_ids": got, "stop_type": done.get("stop_type"),
                "colibri": b"".join(model.token_bytes[t] for t in want).decode(errors="replace"),
                "llama_server": done.get("content")})
        # the same tool prompt through llama-server's own template and tool-call parser
        chat = client.post("/v1/chat/completions", json={
            "messages": PROMPTS[1][1], "tools": PROMPTS[1][2], "temperature": 0, "max_tokens": N_TOKENS}).json()
        message = (chat.get("choices") or [{}])[0].get("message", {})
    finally:
        stop(proc)
    return {"family": family, "gguf": path.name, "prompts": rows,
            "chat_tool_call": {"tool_calls": message.get("tool_calls"), "content": message.get("content")}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--type", default="f32", choices=["f32", "f16", "q8_0"])
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args()
    if not LLAMA_SERVER.exists():
        print(f"no llama-server at {LLAMA_SERVER}: python bench/peers/run.py --install-only --only llama-server")
        return 2
    model = Model()
    engine = model.engine(n_slots=1, n_threads=2)
    results = []
    with tempfile.TemporaryDirectory() as scratch:
        for family in FAMILIES:
            results.append(run_family(family, args.type, Path(scratch), model, engine))
    print(f"llama-server {llama_server_version()}, GGUF {args.type}, {len(PROMPTS)} prompts per family, "
          f"{N_TOKENS} tokens at most, temperature 0")
    print("| family | prompt | template same | tokens same | answer same | answer tokens | stop |")
    print("|---|---|---|---|---|---|---|")
    for res in results:
        for r in res["prompts"]:
            print(f"| {res['family']} | {r['prompt']} | {r['template_same']} | {r['tokens_same']} | "
                  f"{r['answer_same']} | {r['answer_tokens']} (agree {r['agreeing_prefix']}) | {r['stop_type']} |")
    for res in results:
        rows = res["prompts"]
        print(f"{res['family']}: answers {sum(r['answer_same'] for r in rows)}/{len(rows)}, templates "
              f"{sum(r['template_same'] for r in rows)}/{len(rows)}, tokens {sum(r['tokens_same'] for r in rows)}/"
              f"{len(rows)}; llama-server's /v1/chat/completions answer to tool-call: "
              f"{json.dumps(res['chat_tool_call'], ensure_ascii=False)}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"type": args.type, "llama_server": llama_server_version(),
                                         "results": results}, indent=2, ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
