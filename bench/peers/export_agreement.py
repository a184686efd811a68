"""`colibri export` on the other engines: does each load the family's export, render its template,
tokenize and answer greedily as colibri does on the embedded model? (issue 48: "the exports load
and answer the same greedy text on colibri, transformers, vLLM and llama-server")

For each family (glm, chatml, qwen-xml) the export is written into a scratch folder (GGUF for
llama-server, the transformers folder for vLLM and transformers) and each engine is asked, per
prompt, for:
- template: the engine's own rendering of the messages and tools with the export's template
  (llama-server POST /apply-template, vLLM POST /tokenize with `messages`, transformers
  `apply_chat_template`) against colibri's rendering of the family's shipped template (vLLM and
  transformers give token ids, compared with colibri's ids);
- tokens: the engine's tokenization of colibri's prompt text against colibri's ids;
- answer: a greedy completion of colibri's prompt ids (temperature 0, up to 80 tokens) against
  colibri's greedy answer on the embedded model: the same ids, and both stopping on an end token
  or both running to the limit. Where they differ, the first differing step and colibri's margin
  there (top-1 minus top-2 log probability, in nats) say whether it was a near tie.
llama-server runs `-m FILE --jinja` (2 threads, one slot); vLLM `vllm serve DIR --dtype float32`
(the peers harness's environment); transformers in this process (`generate`, do_sample false).

Usage (engines installed by `python bench/peers/run.py --install-only --only llama-server vllm`):
  PYTHONPATH=. python bench/peers/export_agreement.py [--engines llama-server vllm transformers]
      [--type f32] [--json build/bench/export-agreement.json]
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cachedir import CACHE, venv_dir  # noqa: E402
from catalog import VLLM  # noqa: E402
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


@dataclasses.dataclass
class Case:
    """One prompt, as colibri renders and answers it on the embedded model: the reference."""
    name: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    thinking: bool
    text: str
    ids: list[int]
    want: list[int]  # the greedy answer, its end token included when one came within N_TOKENS
    margins: list[float]  # per answer step: top-1 minus top-2 log probability (nats)


def colibri_greedy(engine: Any, ids: list[int], ends: set[int]) -> tuple[list[int], list[float]]:
    """The greedy answer's ids (the end token included when one came within N_TOKENS) and the
    margin of each choice: a near tie is where another engine's rounding may choose otherwise."""
    _, logits = engine.prefill(0, ids)
    out: list[int] = []
    margins: list[float] = []
    for _ in range(N_TOKENS):
        row = np.asarray(logits, dtype=np.float64)
        top2 = np.partition(row, -2)[-2:]
        margins.append(float(top2[1] - top2[0]))
        tok = int(row.argmax())
        out.append(tok)
        if tok in ends:
            break
        logits = engine.decode([0], [tok])[0]
    return out, margins


def reference(model: Model, engine: Any, family: str) -> tuple[list[Case], set[int]]:
    row = family_rows()[family]
    template = model.template(row["template"])
    ends = {model.token_id(t) for t in row["end_tokens"]} | set(model.eos_ids)
    cases = []
    for name, messages, tools, thinking in PROMPTS:
        text = render(template, messages, tools=tools, enable_thinking=thinking)
        ids = model.encode(text)
        cases.append(Case(name, messages, tools, thinking, text, ids, *colibri_greedy(engine, ids, ends)))
    return cases, ends


def compare(case: Case, got: list[int], ends: set[int], model: Model) -> dict[str, Any]:
    """The engine's greedy ids against colibri's: the same tokens and the same way of stopping (an
    engine may leave the end token out of what it returns, so it is compared as 'ended')."""
    def core(ids: list[int]) -> list[int]:
        return ids[:-1] if ids and ids[-1] in ends else ids

    def ended(ids: list[int]) -> bool:
        return bool(ids) and (ids[-1] in ends or len(ids) < N_TOKENS)

    a, b = core(got), core(case.want)
    prefix = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
    same = a == b and ended(got) == ended(case.want)
    prefix = len(case.want) if same else prefix
    out: dict[str, Any] = {"prompt": case.name, "answer_same": same, "answer_tokens": len(case.want),
                           "agreeing_prefix": prefix, "colibri_ids": case.want, "engine_ids": got,
                           "colibri": b"".join(model.token_bytes[t] for t in case.want).decode(errors="replace")}
    if not same and prefix < len(case.margins):
        out["colibri_margin_at_divergence"] = round(case.margins[prefix], 4)
    return out


def llama_server_rows(family: str, cases: list[Case], ends: set[int], model: Model, scratch: Path,
                      gguf_type: str) -> dict[str, Any]:
    (path,) = [f for f in export(family, "gguf", scratch / f"gguf-{family}", gguf_type=gguf_type) if f.suffix == ".gguf"]
    port = free_port()
    argv = [str(LLAMA_SERVER), "-m", str(path), "--jinja", "-c", "2048", "-np", "1", "-t", "2",
            "--host", "127.0.0.1", "--port", str(port)]
    proc, log = start(f"export-agreement-{family}", argv, {}, CACHE / "run" / "export-agreement")
    rows = []
    try:
        wait_ready(family, proc, f"http://127.0.0.1:{port}/health", 120, log)
        client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=120)
        for c in cases:
            applied = client.post("/apply-template", json={
                "messages": c.messages, "tools": c.tools, "chat_template_kwargs": {"enable_thinking": c.thinking}})
            their_text = applied.json().get("prompt") if applied.status_code == 200 else None
            their_ids = client.post("/tokenize", json={"content": c.text, "add_special": False,
                                                        "parse_special": True}).json()["tokens"]
            done = client.post("/completion", json={"prompt": c.ids, "n_predict": N_TOKENS, "temperature": 0,
                                                    "cache_prompt": False, "return_tokens": True}).json()
            rows.append({**compare(c, list(done["tokens"]), ends, model), "template_same": their_text == c.text,
                         "template_status": applied.status_code, "tokens_same": their_ids == c.ids,
                         "stop": done.get("stop_type"), "engine_text": done.get("content")})
        # the same tool prompt through llama-server's own template and tool-call parser
        chat = client.post("/v1/chat/completions", json={
            "messages": PROMPTS[1][1], "tools": PROMPTS[1][2], "temperature": 0, "max_tokens": N_TOKENS}).json()
        message = (chat.get("choices") or [{}])[0].get("message", {})
    finally:
        stop(proc)
    return {"engine": "llama-server", "version": llama_server_version(), "file": f"{path.name} ({gguf_type})",
            "prompts": rows, "chat_tool_call": {"tool_calls": message.get("tool_calls"), "content": message.get("content")}}


def _hf_export(family: str, scratch: Path) -> Path:
    folder = scratch / f"hf-{family}"
    if not folder.exists():
        export(family, "hf", folder)
    return folder


def _openai_wire(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages as the OpenAI API types them: a call's arguments a JSON string (vLLM refuses
    the object form with 400; its template sees them decoded again, as colibri's does)."""
    def call(c: dict[str, Any]) -> dict[str, Any]:
        fn = c["function"]
        args = fn["arguments"] if isinstance(fn["arguments"], str) else json.dumps(fn["arguments"])
        return {**c, "function": {**fn, "arguments": args}}
    return [{**m, "tool_calls": [call(c) for c in m["tool_calls"]]} if m.get("tool_calls") else m for m in messages]


def vllm_rows(family: str, cases: list[Case], ends: set[int], model: Model, scratch: Path,
              gguf_type: str) -> dict[str, Any]:
    """vLLM on the transformers folder, float32 (as the peers harness serves it, no parser flags:
    /v1/completions on token ids does not reach them)."""
    folder, name, port = _hf_export(family, scratch), f"colibri-tiny-{family}", free_port()
    argv = [str(venv_dir("vllm") / "bin" / "vllm"), "serve", str(folder), "--served-model-name", name,
            "--host", "127.0.0.1", "--port", str(port), "--max-model-len", "2048", "--dtype", "float32"]
    proc, log = start(f"export-agreement-vllm-{family}", argv, VLLM.env, CACHE / "run" / "export-agreement")
    rows = []
    try:
        wait_ready(f"vllm {family}", proc, f"http://127.0.0.1:{port}/health", VLLM.ready_timeout, log)
        client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=300)
        for c in cases:
            applied = client.post("/tokenize", json={
                "model": name, "messages": _openai_wire(c.messages), "tools": c.tools, "add_generation_prompt": True,
                "chat_template_kwargs": {"enable_thinking": c.thinking}})
            their_prompt = applied.json().get("tokens") if applied.status_code == 200 else None
            their_ids = client.post("/tokenize", json={"model": name, "prompt": c.text,
                                                        "add_special_tokens": False}).json()["tokens"]
            done = client.post("/v1/completions", json={
                "model": name, "prompt": c.ids, "max_tokens": N_TOKENS, "temperature": 0,
                "return_token_ids": True, "skip_special_tokens": False}).json()
            choice = done["choices"][0]
            rows.append({**compare(c, list(choice.get("token_ids") or []), ends, model),
                         "template_same": their_prompt == c.ids, "template_status": applied.status_code,
                         "template_detail": None if applied.status_code == 200 else applied.text[:300],
                         "tokens_same": their_ids == c.ids, "stop": choice.get("finish_reason"),
                         "engine_text": choice.get("text")})
    finally:
        stop(proc)
    return {"engine": "vllm", "version": VLLM.version(), "file": f"{folder.name} (float32)", "prompts": rows}


def transformers_rows(family: str, cases: list[Case], ends: set[int], model: Model, scratch: Path,
                      gguf_type: str) -> dict[str, Any]:
    """transformers in this process on the transformers folder, float32, one thread."""
    import torch
    import transformers

    folder = _hf_export(family, scratch)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a 2M-parameter model: a second thread only waits on the first
    tok = transformers.AutoTokenizer.from_pretrained(folder)
    lm = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    rows = []
    try:
        for c in cases:
            try:
                their_prompt = list(tok.apply_chat_template(
                    c.messages, tools=c.tools, enable_thinking=c.thinking, add_generation_prompt=True,
                    tokenize=True, return_dict=True)["input_ids"])
                status = 200
            except Exception as e:  # noqa: BLE001 - reported as the row's template outcome
                their_prompt, status = None, repr(e)[:200]
            their_ids = tok(c.text, add_special_tokens=False)["input_ids"]
            ids = torch.tensor([c.ids])
            with torch.no_grad():
                out = lm.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=N_TOKENS, do_sample=False)
            got = out[0, ids.shape[1]:].tolist()
            rows.append({**compare(c, got, ends, model), "template_same": their_prompt == c.ids,
                         "template_status": status, "tokens_same": list(their_ids) == c.ids,
                         "stop": "eos" if got and got[-1] in ends else "limit",
                         "engine_text": tok.decode(got, skip_special_tokens=False)})
    finally:
        torch.set_num_threads(threads)
    return {"engine": "transformers", "version": transformers.__version__, "file": f"{folder.name} (float32)",
            "prompts": rows}


ENGINES = {"llama-server": llama_server_rows, "vllm": vllm_rows, "transformers": transformers_rows}


def _installed(name: str) -> str | None:
    """Why the engine cannot run here, or None."""
    if name == "llama-server" and not LLAMA_SERVER.exists():
        return f"no llama-server at {LLAMA_SERVER}: python bench/peers/run.py --install-only --only llama-server"
    if name == "vllm" and not (venv_dir("vllm") / "bin" / "vllm").exists():
        return "no vLLM in the peers cache: python bench/peers/run.py --install-only --only vllm"
    return None


def print_results(results: list[dict[str, Any]], gguf_type: str) -> None:
    print(f"{len(PROMPTS)} prompts per family, {N_TOKENS} tokens at most, temperature 0; llama-server on the "
          f"{gguf_type} GGUF, vLLM and transformers on the float32 transformers folder")
    print("| engine | family | prompt | template same | tokens same | answer same | answer tokens | stop |")
    print("|---|---|---|---|---|---|---|---|")
    for res in results:
        for r in res["prompts"]:
            margin = (f", colibri margin {r['colibri_margin_at_divergence']} nats there"
                      if "colibri_margin_at_divergence" in r else "")
            print(f"| {res['engine']} | {res['family']} | {r['prompt']} | {r['template_same']} | {r['tokens_same']} | "
                  f"{r['answer_same']} | {r['answer_tokens']} (agree {r['agreeing_prefix']}{margin}) | {r['stop']} |")
    print("\n| engine | version | family | answers same | templates same | tokens same |")
    print("|---|---|---|---|---|---|")
    for res in results:
        rows = res["prompts"]
        print(f"| {res['engine']} | {res['version']} | {res['family']} | {sum(r['answer_same'] for r in rows)}/"
              f"{len(rows)} | {sum(r['template_same'] for r in rows)}/{len(rows)} | "
              f"{sum(r['tokens_same'] for r in rows)}/{len(rows)} |")
    for res in results:
        if "chat_tool_call" in res:
            print(f"{res['engine']} {res['family']}: /v1/chat/completions answer to tool-call: "
                  f"{json.dumps(res['chat_tool_call'], ensure_ascii=False)}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--engines", nargs="+", choices=list(ENGINES), default=list(ENGINES))
    ap.add_argument("--families", nargs="+", choices=list(FAMILIES), default=list(FAMILIES))
    ap.add_argument("--type", default="f32", choices=["f32", "f16", "q8_0"], help="llama-server's GGUF type")
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args()
    for name in args.engines:
        if why := _installed(name):
            print(why)
            return 2
    model = Model()
    engine = model.engine(n_slots=1, n_threads=2)
    results = []
    with tempfile.TemporaryDirectory() as scratch:
        for family in args.families:
            cases, ends = reference(model, engine, family)
            for name in args.engines:
                results.append({"family": family, **ENGINES[name](family, cases, ends, model, Path(scratch), args.type)})
    print_results(results, args.type)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"type": args.type, "results": results}, indent=2, ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
