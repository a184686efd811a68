"""Measure the embedded model's behaviours on a held-out prompt set (its own seed, generated
apart from the training corpus), greedy, on the C engine.

Usage: python training/evaluate.py [--model colibri/models/tiny] [--json build/eval.json]
Prints the table that goes into colibri/models/tiny/README.md.
"""
from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "training"))

from corpus import FAMILIES, MODEL_DIR, ROWS, Gen  # noqa: E402

from colibri.chat_template import render  # noqa: E402
from colibri.model import Model  # noqa: E402
from colibri.tool_parsers import parse, validate_call  # noqa: E402

END_TOKENS = {fid: tuple(row["end_tokens"]) for fid, row in ROWS.items()}
FORMATS = {fid: row["tool_format"] for fid, row in ROWS.items()}
HELD_OUT_SEED = 424242


def generate(model: Model, engine, template: str, family: str, messages, *, tools=None, tool_choice=None,
             thinking=False, max_tokens=200) -> tuple[str, bool]:
    prompt = render(template, messages, tools=tools, tool_choice=tool_choice, enable_thinking=thinking)
    ends = {model.token_id(t) for t in END_TOKENS[family]}
    _, logits = engine.prefill(0, model.encode(prompt))
    out: list[int] = []
    ended = False
    for _ in range(max_tokens):
        tok = int(logits.argmax())
        if tok in ends:
            ended = True
            break
        out.append(tok)
        logits = engine.decode([0], [tok])[0]
    return b"".join(model.token_bytes[t] for t in out).decode("utf-8", "replace"), ended


def split_reasoning(text: str, thinking: bool) -> tuple[str | None, str]:
    if not thinking:
        return None, text
    r, sep, rest = text.partition("\n</think>\n\n")
    return (r, rest) if sep else (None, text)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=str(MODEL_DIR))
    ap.add_argument("--json", default=None)
    ap.add_argument("--n", type=int, default=200, help="prompts per behaviour")
    ap.add_argument("--recipe", default="composed-colons",
                    help="the corpus recipe to draw prompts from (corpus.py --recipe; default: the shipped model's)")
    a = ap.parse_args()
    model = Model(a.model)
    engine = model.engine(n_slots=1)
    templates = {f: model.template(FAMILIES[f]["template"]) for f in FAMILIES}
    rng = random.Random(HELD_OUT_SEED)
    g = Gen(rng, a.recipe, str(Path(a.model) / "tokenizer.json"))  # (a vocab-texts recipe draws the model's tokens)
    stats: dict[str, list[int]] = {k: [0, 0] for k in (
        "repeat_exact", "tool_well_formed", "tool_exact", "reasoning_closed", "reasoning_spurious", "ended")}
    failures: dict[str, list[str]] = {k: [] for k in stats}
    t0 = time.time()

    def count(key: str, ok: bool, note: str) -> None:
        stats[key][0] += int(ok)
        stats[key][1] += 1
        if not ok and len(failures[key]) < 8:
            failures[key].append(note)

    for i in range(a.n):
        fam = ("glm", "chatml")[i % 2]
        # repeat exactly: the generator's own texts and instructions, texts up to 60 characters
        q, _, text = g.task_repeat()
        while len(text) > 60:
            q, _, text = g.task_repeat()
        out, ended = generate(model, engine, templates[fam], fam, [{"role": "user", "content": q}])
        count("repeat_exact", out == text, f"{fam}: {text!r} -> {out!r}")
        count("ended", ended, f"{fam} repeat: {out[:60]!r}")
        # tool calls, where the request calls for one
        conv = g.tool_conversation()
        while "calls" not in conv:
            conv = g.tool_conversation()
        out, ended = generate(model, engine, templates[fam], fam, conv["messages"], tools=conv["tools"],
                              tool_choice=conv.get("tool_choice"))
        parsed = parse(FORMATS[fam], out, conv["tools"])
        problems = parsed.problems + [p for c in parsed.calls for p in validate_call(c, conv["tools"])]
        good = bool(parsed.calls) and not problems and not parsed.content
        count("tool_well_formed", good, f"{fam}: {out[:120]!r} {problems}")
        want = [{"name": c["function"]["name"], "arguments": c["function"]["arguments"]} for c in conv["calls"]]
        count("tool_exact", parsed.calls == want, f"{fam}: want {want} got {parsed.calls}")
        count("ended", ended, f"{fam} tool: {out[:60]!r}")
        # reasoning on: the block is closed and an answer follows; off: no block is opened
        q, _, _ = g.task_plain()
        out, ended = generate(model, engine, templates[fam], fam, [{"role": "user", "content": q}], thinking=True)
        r, answer = split_reasoning(out, True)
        count("reasoning_closed", r is not None and bool(answer.strip()), f"{fam}: {out[:120]!r}")
        count("ended", ended, f"{fam} reasoning: {out[:60]!r}")
        out, ended = generate(model, engine, templates[fam], fam, [{"role": "user", "content": q}], thinking=False)
        count("reasoning_spurious", "<think>" not in out and "</think>" not in out, f"{fam}: {out[:120]!r}")
        count("ended", ended, f"{fam} plain: {out[:60]!r}")

    rows = {k: {"ok": v[0], "n": v[1], "rate": v[0] / v[1]} for k, v in stats.items()}
    print(f"held-out seed {HELD_OUT_SEED}, {a.n} prompts per behaviour, greedy, {time.time() - t0:.0f}s\n")
    print("| behaviour | rate | count |\n|---|---|---|")
    labels = {"repeat_exact": "repeat exactly (texts up to 60 characters)", "tool_well_formed": "well-formed tool call when one is called for",
              "tool_exact": "tool call with exactly the expected name and arguments", "reasoning_closed": "reasoning block closed, answer follows (thinking on)",
              "reasoning_spurious": "no reasoning block opened (thinking off)", "ended": "turn ended by its end token within 200 tokens"}
    for k, v in rows.items():
        print(f"| {labels[k]} | {100 * v['rate']:.1f}% | {v['ok']}/{v['n']} |")
    for k, notes in failures.items():
        if notes:
            print(f"\n{k} failures (first {len(notes)}):")
            for n in notes:
                print("  ", n)
    if a.json:
        Path(a.json).write_text(json.dumps({"seed": HELD_OUT_SEED, "rows": rows, "failures": failures}, indent=2,
                                           ensure_ascii=False))


if __name__ == "__main__":
    main()
