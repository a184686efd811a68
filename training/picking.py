"""Does the model pick the offered tool by its name? A probe of the one step every tool call
starts with, apart from phrasing and copying.

Each request is a phrasing the training corpus itself uses (tooldomains.DOMAINS), so the
request is one the model knows; two tools are offered, named "{verb}_{keyword}" after the
request's domain and another domain, both with the parameter names the corpus gives them. The
model has to find the tool whose keyword fits and write that tool's name, whose first token
is its verb, a word that in the corpus says nothing about the domain. Two cases, each tool
first in half of the requests:

- different verbs ("check_weather" beside "play_music"): picking needs the verb read back
  from the tool whose keyword fits;
- the same verb ("get_weather" beside "get_music"): the verb is given, only the keyword
  decides. If this case is far better, the model writes its verb from a guess and copies the
  rest.

    python training/picking.py [--model DIR] [--per-verb 8]

Prints the rates (overall, and per verb of the right tool) as Markdown, greedy, over HTTP
through `colibri serve` (glm family) as training/heldout.py does.
"""
from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "training"))

import tooldomains  # noqa: E402

#: plain values per role kind: the probe is about the name, not about copying odd values
VALUES = {"place": "Bergen", "name": "Maria", "words": "see you soon", "word": "kitchen", "date": "Friday",
          "email": "ana@example.com", "language": "French", "unit": "km", "currency": "EUR", "number": 12,
          "count": 3}


def tool(verb: str, domain: int) -> tuple[dict[str, Any], str]:
    keywords, roles, _ = tooldomains.DOMAINS[domain]
    name = f"{verb}_{keywords[0]}"
    params = {synonyms[0]: role for role, synonyms in roles.items()}
    return tooldomains.schema_tool(name, params, None), name


def requests(per_verb: int, seed: int = 5) -> list[dict[str, Any]]:
    """For each corpus verb, `per_verb` requests of each case (different verbs, same verb)."""
    r = random.Random(seed)
    items = []
    for verb in tooldomains.VERBS:
        for case in ("different verbs", "same verb"):
            for i in range(per_verb):
                d, od = r.sample(range(len(tooldomains.DOMAINS)), 2)
                other_verb = verb if case == "same verb" else r.choice([v for v in tooldomains.VERBS if v != verb])
                (right, name), (wrong, _) = tool(verb, d), tool(other_verb, od)
                roles = tooldomains.DOMAINS[d][1]
                template = r.choice(tooldomains.DOMAINS[d][2])
                prompt = template.format(**{role: VALUES[tooldomains.ROLES[role][1]] for role in roles})
                items.append({"verb": verb, "case": case, "prompt": prompt, "name": name,
                              "tools": [right, wrong] if i % 2 == 0 else [wrong, right]})
    return items


def probe(base: str, per_verb: int) -> dict[str, Any]:
    import httpx

    client = httpx.Client(base_url=base, timeout=120)
    model = client.get("/v1/models").json()["data"][0]["id"]
    hits: dict[tuple[str, str], list[int]] = {}
    for item in requests(per_verb):
        body = {"model": model, "temperature": 0, "max_tokens": 40, "enable_thinking": False,
                "messages": [{"role": "user", "content": item["prompt"]}], "tools": item["tools"]}
        resp = client.post("/v1/chat/completions", json=body)
        resp.raise_for_status()
        msg = resp.json()["choices"][0]["message"]
        calls = msg.get("tool_calls") or []
        h = hits.setdefault((item["case"], item["verb"]), [0, 0])
        h[0] += bool(calls) and calls[0]["function"]["name"] == item["name"]
        h[1] += 1
    return {"per_verb": per_verb, "hits": {f"{c}/{v}": h for (c, v), h in hits.items()}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", help="serve this model directory (default: the embedded model)")
    ap.add_argument("--per-verb", type=int, default=8, help="requests per verb and case")
    args = ap.parse_args()
    from live_server import live_server

    from colibri.paths import EMBEDDED_FAMILY, EMBEDDED_MODEL_ID

    extra = ["--model", str(Path(args.model).resolve()), "--model-id", EMBEDDED_MODEL_ID, "--family", EMBEDDED_FAMILY] \
        if args.model else []
    with live_server(*extra) as base:
        doc = probe(base, args.per_verb)
    print("| case | picked | per verb of the right tool (lowest, highest) |\n|---|---|---|")
    for case in ("different verbs", "same verb"):
        rows = {k.split("/")[1]: h for k, h in doc["hits"].items() if k.startswith(case + "/")}
        ok, n = sum(h[0] for h in rows.values()), sum(h[1] for h in rows.values())
        lo = min(rows, key=lambda v: rows[v][0])
        hi = max(rows, key=lambda v: rows[v][0])
        print(f"| {case} | {100 * ok / n:.1f}% ({ok}/{n}) | {lo} {rows[lo][0]}/{rows[lo][1]}, "
              f"{hi} {rows[hi][0]}/{rows[hi][1]} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
