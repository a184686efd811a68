"""The honest held-out evaluation of issue 16: prompts from vocabularies and phrasings the
training generator (training/corpus.py) never uses, sent over HTTP to `colibri serve` exactly
as a client would (greedy, the chat completions API), 500 items per behaviour by default.

Disjointness: every word of the held-out pools is checked against every word the training
generator can emit (the word lists, tables, tool names and parameter names of corpus.py,
lexicon.py and tooldomains.py, split on non-letters and lower-cased); a pool word found there
is dropped, and the script refuses to run if a pool is left too small. The training lexicon
makes its words up and throws away any that is a pool word. Phrasings are checked too: no tool
phrasing here is written (slots blanked) in the training sources, and no repeat instruction
here is among 20,000 the training generator composes; otherwise the script refuses to run. No
pool word may be one token of the served model's tokenizer (check_tokens). The held-out
generator has its own seed (7077) and its own phrasings; the repeat texts are drawn from these
pools, digits and punctuation.

    python training/heldout.py [--n 500] [--free-tool-names] [--base-url http://127.0.0.1:8000]

Without --base-url it starts `colibri serve` (the embedded model) on a free port and stops it;
--free-tool-names starts it with that flag, to measure the model's own tool names and keys.
Prints the rates as a Markdown table; --json writes them with every miss.
"""
from __future__ import annotations

import argparse
import json
import random
import re
import sys
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "training"))

from heldout_pools import (  # noqa: E402
    POOL_CITIES,
    POOL_IDENTS,
    POOL_NAMES,
    POOL_WORDS,
    PUNCT,
    REPEAT_PHRASES,
    TOOLS,
    UNITS,
)

SEED = 7077
TRAINING_MODULES = ("corpus", "corpus_words", "corpus_recipes", "lexicon", "tooldomains")


def training_words() -> set[str]:
    """Every word the training generator can emit, lower-cased: the constants and the source text
    of every module it is built from."""
    import importlib

    text = ""
    for name in TRAINING_MODULES:
        mod = importlib.import_module(name)
        text += json.dumps([getattr(mod, n) for n in dir(mod) if n.isupper() and not n.startswith("_")
                            and isinstance(getattr(mod, n), (list, dict, tuple, str))], ensure_ascii=False, default=str)
        text += " " + Path(mod.__file__).read_text()  # phrasings and names written inline too
    return {w.lower() for w in re.findall(r"[^\W\d_]+", text)} | {w.lower() for w in re.findall(r"[\w-]+", text)}


def shape(template: str) -> str:
    """A phrasing with its slots blanked: "Convert {value} {from_unit}." -> "convert {} {}."."""
    return re.sub(r"\{\w*\}", "{}", template).strip().lower()


def check_phrasings(samples: int = 20000) -> None:
    """Refuse to run if the training generator can produce a held-out phrasing: every tool
    phrasing written in its sources is compared slot-blind, and the repeat instructions it
    composes are sampled and compared whole."""
    import importlib

    import corpus

    written = set()
    for name in TRAINING_MODULES:
        src = Path(importlib.import_module(name).__file__).read_text()
        written |= {shape(m) for m in re.findall(r'"([^"\n]*\{\w*\}[^"\n]*)"', src)}
    clash = [p for _, (_, ps) in TOOLS.items() for p in ps if shape(p) in written]
    # The generator refuses every held-out head by construction (the free-heads recipe compares
    # up to the first colon, any case, so a quoted text cannot slip one through: see
    # corpus.forbidden); samples of each recipe check that refusal from outside.
    heads = {shape(p.split("{t}")[0]) for p in REPEAT_PHRASES}
    for recipe in corpus.RECIPES:
        g = corpus.Gen(random.Random(1), recipe, str(corpus.MODEL_DIR / "tokenizer.json"))
        made = {shape(g.task_repeat()[0].split(":")[0] + ":") for _ in range(samples)}
        clash += sorted(heads & made)
    clash += [p for p in REPEAT_PHRASES if not corpus.forbidden(p.replace("{t}", "\0"))]
    # Composed tool requests (the composed recipe) are not written whole anywhere: sample them as
    # that recipe's generator draws them and refuse any that holds a held-out phrasing's words
    # as a run, whatever its case, punctuation or the words around it.
    import tooldomains

    g = corpus.Gen(random.Random(1), "composed", str(corpus.MODEL_DIR / "tokenizer.json"))
    held = {p: tooldomains.loose(p) for _, ps in TOOLS.values() for p in ps}
    domains = list(tooldomains.COMPOSED)
    for i in range(samples):
        t = tooldomains.composed(g.r, domains[i % len(domains)], g.tools.forbidden)
        clash += [f"{p} in {t}" for p, words in held.items() if tooldomains.contains(tooldomains.loose(t), words)]
    if clash:
        raise SystemExit(f"held-out phrasings the training generator also produces: {clash}")


def check_tokens(tokenizer: Path) -> None:
    """Refuse to run if a held-out pool word is one token of the model's tokenizer. BPE learns a
    whole word only from text that holds it often, and the tokenizer is fitted to a training
    corpus: such a token would say the corpus wrote the word, and a larger vocabulary makes
    that likelier."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tokenizer))
    whole = {tok.decode([i]).strip().lower() for i in tok.get_vocab().values()}
    clash = sorted(w for w in POOL_WORDS + POOL_NAMES + POOL_CITIES + POOL_IDENTS if w.lower() in whole)
    if clash:
        raise SystemExit(f"held-out words that are single tokens of {tokenizer}: {clash}")


def disjoint(pool: list[str], seen: set[str], least: int, whole: bool = False) -> list[str]:
    """The pool's entries none of whose words (or, for identifiers, not the whole) the training
    generator emits."""
    kept = [w for w in pool if (w.lower() not in seen if whole
                                else not any(part.lower() in seen for part in re.findall(r"[^\W\d_]+", w)))]
    if len(kept) < least:
        raise SystemExit(f"held-out pool too small after removing training words: {kept}")
    return kept


class HeldOut:
    def __init__(self, seed: int = SEED):
        seen = training_words()
        self.r = random.Random(seed)
        self.words = disjoint(POOL_WORDS, seen, 40)
        self.names = disjoint(POOL_NAMES, seen, 10)
        self.cities = disjoint(POOL_CITIES, seen, 10)
        self.idents = disjoint(POOL_IDENTS, seen, 6, whole=True)
        self.dropped = sorted(set(POOL_WORDS + POOL_NAMES + POOL_CITIES + POOL_IDENTS)
                              - set(self.words + self.names + self.cities + self.idents))

    def text(self, lo: int, hi: int) -> str:
        """A text of lo..hi characters: words, names, numbers, identifiers, punctuation, mixed case."""
        want = self.r.randint(lo, hi)
        parts: list[str] = []
        while len(" ".join(parts)) < want:
            kind = self.r.random()
            w = (self.r.choice(self.words) if kind < 0.5 else self.r.choice(self.names) if kind < 0.62
                 else str(self.r.randint(0, 99999)) if kind < 0.75 else self.r.choice(self.idents) if kind < 0.87
                 else self.r.choice(self.words).upper())
            if self.r.random() < 0.2:
                w += self.r.choice(PUNCT)
            parts.append(w)
        t = " ".join(parts)
        while len(t) > want and " " in t:
            t = t.rsplit(" ", 1)[0]
        return t[:hi]

    def repeat(self) -> dict[str, Any]:
        t = self.text(1, 60) if self.r.random() < 0.75 else self.text(61, 80)
        phrase = self.r.choice(REPEAT_PHRASES)
        return {"kind": "repeat", "prompt": phrase.format(t=t), "want": t, "phrasing": phrase}

    def tool(self) -> dict[str, Any]:
        name = self.r.choice(list(TOOLS))
        props, phrasings = TOOLS[name]
        u = self.r.choice(UNITS)
        values = {"value": str(self.r.randint(2, 500)), "from_unit": u[0], "to_unit": u[1],
                  "restaurant": self.r.choice(self.words).capitalize(), "people": str(self.r.randint(2, 12)),
                  "place": self.r.choice(self.cities), "recipient": self.r.choice(self.names),
                  "body": " ".join(self.r.sample(self.words, 3)), "artist": self.r.choice(self.names)}
        args = {k: values[k] for k in props}
        others = self.r.sample([n for n in TOOLS if n != name], self.r.randint(0, 2))
        offered = [name] + others
        self.r.shuffle(offered)
        tools = [{"type": "function", "function": {"name": n, "parameters": {
            "type": "object", "properties": {k: {"type": t} for k, t in TOOLS[n][0].items()},
            "required": list(TOOLS[n][0])}}} for n in offered]
        phrase = self.r.choice(phrasings)
        return {"kind": "tool", "prompt": phrase.format(**args), "tools": tools, "name": name, "args": args,
                "phrasing": phrase}


def ask(client: Any, model: str, item: dict[str, Any], thinking: bool) -> dict[str, Any]:
    body: dict[str, Any] = {"model": model, "temperature": 0, "max_tokens": 200,
                            "messages": [{"role": "user", "content": item["prompt"]}],
                            "enable_thinking": thinking}
    if "tools" in item:
        body["tools"] = item["tools"]
    r = client.post("/v1/chat/completions", json=body)
    r.raise_for_status()
    return r.json()["choices"][0]  # type: ignore[no-any-return]


def same_value(got: Any, want: str) -> bool:
    return str(got).strip() == want or (isinstance(got, (int, float)) and str(got) == want)


def miss_kind(item: dict[str, Any], calls: list[dict[str, Any]]) -> str:
    """What a tool item's answer was, the first that applies: "no call", "tool not offered",
    "wrong offered tool", "arguments not JSON", "other keys", "value of K" (the first wrong
    one) or "exact"."""
    if not calls:
        return "no call"
    fn = calls[0]["function"]
    if fn["name"] not in {t["function"]["name"] for t in item["tools"]}:
        return "tool not offered"
    if fn["name"] != item["name"]:
        return "wrong offered tool"
    try:
        got = json.loads(fn["arguments"])
    except (ValueError, TypeError):
        return "arguments not JSON"
    if not isinstance(got, dict) or set(got) != set(item["args"]):
        return "other keys"
    wrong = [k for k, v in item["args"].items() if not same_value(got[k], v)]
    return f"value of {wrong[0]}" if wrong else "exact"


def rates(counts: dict[str, list[int]]) -> dict[str, dict[str, Any]]:
    return {k: {"ok": a, "of": b, "rate": round(a / b, 4)} for k, (a, b) in counts.items()}


def evaluate(base: str, n: int) -> dict[str, Any]:
    import httpx

    check_phrasings()
    gen = HeldOut()
    client = httpx.Client(base_url=base, timeout=120)
    model = client.get("/v1/models").json()["data"][0]["id"]
    counts: dict[str, list[int]] = {}
    misses: dict[str, list[Any]] = {}
    # Per phrasing, so a miss rate can be told apart into "instruction not understood" (one
    # phrasing fails wholesale) and "copying fails" (every phrasing fails a little).
    by_phrasing: dict[str, list[int]] = {}
    why: Counter[str] = Counter()  # tool items by outcome: what a tool-argument miss was

    def tally(item: dict[str, Any], ok: bool) -> None:
        c = by_phrasing.setdefault(item["phrasing"], [0, 0])
        c[0] += ok
        c[1] += 1

    def count(key: str, ok: bool, miss: Any) -> None:
        c = counts.setdefault(key, [0, 0])
        c[0] += ok
        c[1] += 1
        if not ok and len(misses.setdefault(key, [])) < 20:
            misses[key].append(miss)

    for i in range(n):
        item = gen.repeat()
        thinking = i % 2 == 1  # half with thinking on: the reasoning block must close
        c = ask(client, model, item, thinking)
        content, reasoning = c["message"].get("content") or "", c["message"].get("reasoning_content")
        band = "repeat ≤60" if len(item["want"]) <= 60 else "repeat 61-80"
        count(band, content == item["want"], [item["prompt"], content])
        tally(item, content == item["want"])
        count("turn ended", c["finish_reason"] != "length", item["prompt"])
        if thinking:
            count("reasoning closed (thinking on)", c["finish_reason"] != "length" and reasoning is not None, item["prompt"])
        else:
            count("no reasoning in content (thinking off)", "<think>" not in content and "</think>" not in content,
                  [item["prompt"], content])
    for _ in range(n):
        item = gen.tool()
        c = ask(client, model, item, False)
        calls = c["message"].get("tool_calls") or []
        offered = {t["function"]["name"] for t in item["tools"]}
        good = len(calls) >= 1 and all(k["function"]["name"] in offered for k in calls)
        count("tool call well-formed, to an offered tool", good, [item["prompt"], c["message"]])
        kind = miss_kind(item, calls)
        why[kind] += 1
        args_ok = good and kind == "exact"
        count("tool arguments equal the prompt's spans", args_ok, [item["prompt"], item["args"], calls[:1]])
        tally(item, args_ok)
        count("turn ended", c["finish_reason"] != "length", item["prompt"])
    return {"seed": SEED, "n": n, "dropped_from_pools": gen.dropped,
            "rates": rates(counts), "by_phrasing": rates(by_phrasing),
            "tool_outcomes": dict(why.most_common()),
            "misses": misses}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=500, help="items per behaviour (repeat; tool calls)")
    ap.add_argument("--base-url", help="a running colibri serve (default: start one with the embedded model)")
    ap.add_argument("--model", help="serve this model directory instead of the embedded model (no --base-url)")
    ap.add_argument("--family", help="serve with this family (default: glm, the embedded model's, with --model)")
    ap.add_argument("--free-tool-names", action="store_true",
                    help="serve with --free-tool-names: the model alone writes each tool name and key (by default "
                         "the server holds them to the offered tools, rule tools.decode.offered-names)")
    ap.add_argument("--json", type=Path, help="write the rates, the rates per phrasing (repeat: exact; tools: "
                    "arguments exact), the tool items by outcome and up to 20 misses per behaviour here")
    args = ap.parse_args()
    if args.base_url and args.free_tool_names:
        ap.error("--free-tool-names starts the server with that flag: give it without --base-url")
    if args.base_url:  # (a server given by URL does not say which tokenizer it runs: no token check)
        doc = evaluate(args.base_url.rstrip("/").removesuffix("/v1"), args.n)
    else:
        from live_server import live_server

        from colibri.paths import EMBEDDED_FAMILY, EMBEDDED_MODEL, EMBEDDED_MODEL_ID

        tokenizer = Path(args.model or EMBEDDED_MODEL) / "tokenizer.json"
        if tokenizer.exists():
            check_tokens(tokenizer)
        else:  # a GGUF file carries its vocabulary inside
            print(f"no {tokenizer}: the pool words are not checked against the model's tokens", file=sys.stderr)

        # The server runs from a temporary directory (live_server), so a relative path is resolved here.
        extra = (["--model", str(Path(args.model).resolve()), "--model-id", EMBEDDED_MODEL_ID] if args.model else []) + (
            ["--family", args.family or EMBEDDED_FAMILY] if args.model or args.family else []) + (
            ["--free-tool-names"] if args.free_tool_names else [])
        with live_server(*extra) as base:
            doc = evaluate(base, args.n)
    print("| behaviour | rate | count |\n|---|---|---|")
    for k, v in doc["rates"].items():
        print(f"| {k} | {100 * v['rate']:.1f}% | {v['ok']}/{v['of']} |")
    print("\ntool items by outcome: " + ", ".join(f"{k} {v}" for k, v in doc["tool_outcomes"].items()))
    if args.json:
        args.json.write_text(json.dumps(doc, indent=1, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
