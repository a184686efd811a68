"""colibri-conform differential: the same prompts, greedy, on servers that load the same model,
each compared with a reference (rules diff.greedy.exact, diff.greedy.rounded and
diff.logprobs.close, spec/95-differential.yaml).

    colibri-conform differential --reference URL|inprocess:MODEL --base-url URL [--base-url URL ...]
        [--model ID] [--tolerance exact|rounded] [--json OUT] [--markdown OUT]

Wire rules cannot see a server that is perfectly shaped and numerically wrong; this can. Every
prompt of conformance/differential_prompts.yaml goes to each target greedily. The reference
answers the same prompt through an endpoint that returns log probabilities with the top 20
alternatives (its chat endpoint, also for /v1/messages prompts: the same rendering), so where a
target's text parts from the reference's, the reference says how close its own choice was at
that token: the margin, in nats, between its token and the one the target wrote. A divergence
at a near-tie is what rounding does; a divergence the reference was sure about is not. Along
the tokens both share, a target that serves log probabilities must give the reference's numbers
within the tolerance's bound. Tool prompts (run where the model's template renders tools) are
compared by their calls: the tool's name and its decoded arguments.
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from colibri.exit_codes import EXIT_FAIL, EXIT_OK, EXIT_USAGE
from colibri.spec.tables import table

from .exchange import BodyNotJson, TransportError
from .targets import remote_target

PROMPTS_FILE = Path(__file__).with_name("differential_prompts.yaml")
TOP = 20  # alternatives the reference reports per token (OpenAI's top_logprobs maximum)
#: Largest reference margin (nats) at which a divergence passes, per tolerance; the rule bodies
#: in spec/95-differential.yaml give the measurements behind each.
BOUNDS = {"exact": 0.01, "rounded": 0.5}
#: Largest mean |reference - target| log probability (nats) along the tokens both answers share,
#: per tolerance (rule diff.logprobs.close, whose body gives the measurements), and the fewest
#: shared tokens such a mean is judged on (fewer leave it to one or two tokens).
LOGPROB_BOUNDS = {"exact": 0.001, "rounded": 0.2}
MIN_SHARED = 8
LOGPROB_RULE = "diff.logprobs.close"
#: The endpoints a differential prompt may name, and their paths (from spec/endpoints.yaml).
PATHS = {row["name"]: row["path"] for row in table("endpoints.yaml")["endpoints"]
         if row["name"] in ("chat", "completions", "messages")}
RULES = {"exact": "diff.greedy.exact", "rounded": "diff.greedy.rounded"}


@dataclass
class Reference:
    text: str
    tokens: list[str] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    top: list[list[tuple[str, float]]] = field(default_factory=list)
    calls: list[dict[str, Any]] = field(default_factory=list)  # tool calls: name and decoded arguments
    reasoning: str = ""  # the reasoning field's text (reasoning prompts compare the split)


def load_prompts(path: Path = PROMPTS_FILE) -> dict[str, Any]:
    return yaml.safe_load(path.read_text())  # type: ignore[no-any-return]


def _body(prompt: dict[str, Any], model: str, max_tokens: int, endpoint: str, logprobs: bool) -> dict[str, Any]:
    body: dict[str, Any] = {"model": model, "max_tokens": max_tokens, "temperature": 0}
    if endpoint == "completions":
        body["prompt"] = prompt["prompt"]
        if logprobs:
            body["logprobs"] = 5  # the legacy API's maximum
    else:
        body["messages"] = prompt["messages"]
        if prompt.get("tools"):
            body["tools"] = prompt["tools"]
        if prompt.get("tool_choice"):
            body["tool_choice"] = prompt["tool_choice"]
        if prompt.get("reasoning"):
            # the official control; vLLM maps it to the template's enable_thinking, colibri too
            body["reasoning_effort"] = "high"
        if logprobs:
            body |= {"logprobs": True, "top_logprobs": TOP}
    return body


#: What _send raises for an answer that is not one: a status other than 200, a transfer that
#: broke off, a body that is not JSON.
UNANSWERED = (RuntimeError, TransportError, BodyNotJson)


def _send(target: Any, endpoint: str, body: dict[str, Any]) -> Any:
    ex = target.send("POST", PATHS[endpoint], json.dumps(body).encode(), {"Content-Type": "application/json"})
    if ex.status != 200:
        raise RuntimeError(f"{PATHS[endpoint]} answered {ex.status}: {ex.text(200)}")
    return ex.json()


def answer_text(endpoint: str, doc: dict[str, Any]) -> str:
    if endpoint == "messages":
        return "".join(b.get("text", "") for b in doc.get("content") or [] if b.get("type") == "text")
    choice = (doc.get("choices") or [{}])[0]
    return str(choice.get("text") if endpoint == "completions" else (choice.get("message") or {}).get("content") or "")


def reasoning_of(doc: dict[str, Any]) -> str:
    """A chat answer's reasoning, under either field name servers use."""
    msg = ((doc.get("choices") or [{}])[0].get("message") or {})
    return str(msg.get("reasoning_content") or msg.get("reasoning") or "")


def calls_of(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """A chat answer's tool calls as (name, arguments decoded from their JSON text): two servers
    that agree on a call may still space its JSON differently."""
    msg = ((doc.get("choices") or [{}])[0].get("message") or {})
    out = []
    for c in msg.get("tool_calls") or []:
        fn = c.get("function") or {}
        try:
            args = json.loads(fn.get("arguments") or "")
        except (TypeError, ValueError):
            args = fn.get("arguments")
        out.append({"name": fn.get("name"), "arguments": args})
    return out


def reference_answer(target: Any, prompt: dict[str, Any], model: str, max_tokens: int) -> Reference:
    """The reference's greedy answer with per-token log probabilities and alternatives."""
    endpoint = "completions" if prompt["endpoint"] == "completions" else "chat"
    doc = _send(target, endpoint, _body(prompt, model, max_tokens, endpoint, logprobs=True))
    ref = Reference(answer_text(endpoint, doc), calls=calls_of(doc) if endpoint == "chat" else [],
                    reasoning=reasoning_of(doc) if endpoint == "chat" else "")
    lp = (doc.get("choices") or [{}])[0].get("logprobs") or {}
    if endpoint == "chat":
        for entry in lp.get("content") or []:
            ref.tokens.append(entry["token"])
            ref.logprobs.append(entry["logprob"])
            ref.top.append([(t["token"], t["logprob"]) for t in entry.get("top_logprobs") or []])
    else:
        ref.tokens, ref.logprobs = list(lp.get("tokens") or []), list(lp.get("token_logprobs") or [])
        ref.top = [sorted(d.items(), key=lambda kv: -kv[1]) for d in lp.get("top_logprobs") or []]
    return ref


def _target_answer(target: Any, prompt: dict[str, Any], model: str, n: int) -> dict[str, Any]:
    """The target's greedy answer, with log probabilities where it serves them (asked once;
    a refusal of the logprobs field falls back to the plain request)."""
    endpoint = prompt["endpoint"]
    if endpoint != "messages":
        try:
            return _send(target, endpoint, _body(prompt, model, n, endpoint, logprobs=True))  # type: ignore[no-any-return]
        except RuntimeError:
            pass
    return _send(target, endpoint, _body(prompt, model, n, endpoint, logprobs=False))  # type: ignore[no-any-return]


def logprob_differences(ref: Reference, endpoint: str, doc: dict[str, Any]) -> dict[str, Any]:
    """Along the tokens both answers share from the start, |reference - target| log probability
    of each token: reported, not judged (the verdict is the divergence's margin)."""
    lp = ((doc.get("choices") or [{}])[0].get("logprobs") or {}) if endpoint != "messages" else {}
    if endpoint == "chat":
        pairs = [(e.get("token"), e.get("logprob")) for e in lp.get("content") or []]
    else:
        pairs = list(zip(lp.get("tokens") or [], lp.get("token_logprobs") or [], strict=False))
    diffs = []
    for (tok, got), want_tok, want in zip(pairs, ref.tokens, ref.logprobs, strict=False):
        if tok != want_tok or not isinstance(got, (int, float)) or not isinstance(want, (int, float)):
            break
        diffs.append(abs(float(got) - float(want)))
    if not diffs:
        return {}
    return {"logprob_diff": {"tokens": len(diffs), "mean_abs": sum(diffs) / len(diffs), "max_abs": max(diffs)}}


def judge_logprobs(row: dict[str, Any], tolerance: str) -> dict[str, Any]:
    """Rule diff.logprobs.close on one prompt: the mean |difference| along the shared tokens
    against the tolerance's bound ({} when the target served no log probabilities)."""
    d = row.get("logprob_diff")
    if not d:
        return {}
    bound = LOGPROB_BOUNDS[tolerance]
    if d["tokens"] < MIN_SHARED:
        return {"logprobs": {"outcome": "INCONCLUSIVE", "why": f"only {d['tokens']} shared tokens (a mean is judged "
                             f"on {MIN_SHARED} or more)"}}
    ok = d["mean_abs"] <= bound
    return {"logprobs": {"outcome": "PASS" if ok else "FAIL",
                         "why": f"mean |diff| {d['mean_abs']:.4f} nats over {d['tokens']} shared tokens "
                                f"{'<=' if ok else '>'} {bound}"}}


def _fmt_calls(calls: list[dict[str, Any]]) -> str:
    return "; ".join(f"{c['name']}({json.dumps(c['arguments'], ensure_ascii=False)})" for c in calls) or "no call"


def compare_calls(ref: Reference, text: str, calls: list[dict[str, Any]], tolerance: str) -> dict[str, Any]:
    """The verdict on a tool prompt's answer: the calls (name and decoded arguments) must be the
    reference's. The reference serves no log probabilities over a call, so a difference has no
    margin to weigh it: it fails where the weights and format are the same (exact) and is
    inconclusive where rounding may have flipped a near-tie (rounded)."""
    if calls == ref.calls:
        if not calls:  # both answered in words: the text comparison applies
            return compare(ref, text, BOUNDS[tolerance])
        return {"outcome": "PASS", "why": f"the same call: {_fmt_calls(calls)}"}
    evidence = {"reference_calls": ref.calls, "target_calls": calls, "target_continues": text[:120]}
    if ref.calls and not calls and any(c["name"] and c["name"] in text for c in ref.calls):
        return {"outcome": "INCONCLUSIVE", **evidence,
                "why": f"the target wrote the call as text, not as a parsed call (no tool-call parser for this "
                       f"model's format?); the reference called {_fmt_calls(ref.calls)}"}
    why = f"the reference called {_fmt_calls(ref.calls)}, the target {_fmt_calls(calls)}"
    if tolerance == "exact":
        return {"outcome": "FAIL", **evidence, "why": why}
    return {"outcome": "INCONCLUSIVE", **evidence, "why": why + " (no log probabilities over a call to weigh a "
            "rounded divergence by)"}


def compare_reasoning(ref: Reference, text: str, reasoning: str, tolerance: str) -> dict[str, Any]:
    """The verdict on a reasoning prompt: the same split of the reply into reasoning and answer
    (each compared without the blank lines around it: a server may keep the newlines that
    follow `</think>`). Where the split differs, both splits are the evidence."""
    want, got = (ref.reasoning.strip(), ref.text.strip()), (reasoning.strip(), text.strip())
    if want == got:
        return {"outcome": "PASS", "why": "the same reasoning and the same answer"}
    evidence = {"reference_split": {"reasoning": ref.reasoning, "content": ref.text},
                "target_split": {"reasoning": reasoning, "content": text}}
    if "".join(want) == "".join(got) or (want[0] + want[1]).replace(" ", "") == (got[0] + got[1]).replace(" ", ""):
        return {"outcome": "FAIL", **evidence,
                "why": f"the same text, split otherwise: the reference reasons {_short(ref.reasoning)} and answers "
                       f"{_short(ref.text)}, the target reasons {_short(reasoning)} and answers {_short(text)}"}
    why = (f"the reference reasons {_short(ref.reasoning)} and answers {_short(ref.text)}, the target reasons "
           f"{_short(reasoning)} and answers {_short(text)}")
    if tolerance == "exact":
        return {"outcome": "FAIL", **evidence, "why": why}
    return {"outcome": "INCONCLUSIVE", **evidence, "why": why + " (rounded arithmetic may write other text)"}


def _short(text: str, n: int = 60) -> str:
    return json.dumps(text if len(text) <= n else text[:n] + "…", ensure_ascii=False) if text else "nothing"


def raw_text(target: Any, model: str, prompt: dict[str, Any], n: int) -> str | None:
    """What the model itself wrote for a chat prompt, before any parser: the engine's own
    rendering of the prompt (/v1/render, /apply-template or /tokenize) sent back to its
    /v1/completions, greedy, with the same token budget. None where the engine shows no
    rendering or refuses such a completion."""
    if prompt["endpoint"] != "chat":
        return None
    extra = {k: v for k, v in (("tool_choice", prompt.get("tool_choice")),
                               ("reasoning_effort", "high" if prompt.get("reasoning") else None)) if v}
    path, text, ids = rendered(target, model, prompt["messages"], prompt.get("tools"), extra)
    if not path:
        return None
    body = {"model": model, "max_tokens": n, "temperature": 0, "prompt": text if text is not None else ids}
    try:
        doc = _send(target, "completions", body)
    except UNANSWERED:  # an engine without completions on its own prompt: no raw text
        return None
    return answer_text("completions", doc)


def compare(ref: Reference, text: str, bound: float) -> dict[str, Any]:
    """The verdict on one target answer against the reference's."""
    if text == ref.text:
        return {"outcome": "PASS", "why": "identical text"}
    pos = 0
    for k, tok in enumerate(ref.tokens):
        if text.startswith(tok, pos):
            pos += len(tok)
            continue
        found = {"token_index": k, "char_index": pos, "reference_continues": ref.text[pos:pos + 60],
                 "target_continues": text[pos:pos + 60], "reference_token": tok}
        rest = text[pos:]
        alts = [(t, lp) for t, lp in (ref.top[k] if k < len(ref.top) else []) if t and rest.startswith(t) and t != tok]
        if not alts:
            if not rest:
                return {"outcome": "INCONCLUSIVE", **found,
                        "why": "the target stopped where the reference went on (a stop decision, no token to weigh)"}
            return {"outcome": "FAIL", **found, "why": f"the target's continuation is none of the reference's top "
                    f"{len(ref.top[k]) if k < len(ref.top) else 0} tokens at token {k}"}
        alt, alt_lp = max(alts, key=lambda a: len(a[0]))
        margin = ref.logprobs[k] - alt_lp
        found |= {"target_token": alt, "margin": margin}
        if margin <= bound:
            return {"outcome": "PASS", **found, "why": f"parts at token {k}, where the reference itself nearly tied "
                    f"({tok!r} over {alt!r} by {margin:.3f} nats <= {bound})"}
        return {"outcome": "FAIL", **found, "why": f"parts at token {k}: the reference chose {tok!r} over the target's "
                f"{alt!r} by {margin:.3f} nats > {bound}"}
    if not ref.tokens:
        return {"outcome": "INCONCLUSIVE", "why": "the reference returned no log probabilities"}
    return {"outcome": "INCONCLUSIVE", "char_index": pos, "reference_continues": "", "target_continues": text[pos:pos + 60],
            "why": "the target went on where the reference stopped (a stop decision, no token to weigh)"}


# ---- template agreement (rule diff.template.agrees) -------------------------------------------

#: How a server shows the prompt it would build for chat messages: path, body, and where the
#: answer puts the text or the token ids. Tried in order; the first that answers 200 counts.
RENDER_ENDPOINTS = [
    ("/v1/render", lambda model, msgs: {"model": model, "messages": msgs}, "prompt", "tokens"),  # colibri
    ("/apply-template", lambda model, msgs: {"messages": msgs}, "prompt", None),  # llama.cpp's llama-server
    ("/tokenize", lambda model, msgs: {"model": model, "messages": msgs, "add_generation_prompt": True},
     None, "tokens"),  # vLLM
]


def rendered(target: Any, model: str, messages: list[dict[str, Any]],
             tools: list[dict[str, Any]] | None = None,
             extra: dict[str, Any] | None = None) -> tuple[str, str | None, list[int] | None]:
    """(endpoint, prompt text, token ids) the target shows for these messages (and tools, which
    each of the three endpoints takes as the chat request does; EXTRA: more request fields);
    ("", None, None) when it shows neither."""
    for path, make, text_key, tokens_key in RENDER_ENDPOINTS:
        body = make(model, messages) | ({"tools": tools} if tools else {}) | (extra or {})
        try:
            ex = target.send("POST", path, json.dumps(body).encode(), {"Content-Type": "application/json"})
            doc = ex.json() if ex.status == 200 else None
        except (TransportError, BodyNotJson):  # an endpoint the target lacks
            doc = None
        if isinstance(doc, dict) and ((text_key and isinstance(doc.get(text_key), str))
                                      or (tokens_key and isinstance(doc.get(tokens_key), list))):
            return path, doc.get(text_key) if text_key else None, doc.get(tokens_key) if tokens_key else None
    return "", None, None


def tools_skipped(reference: Any, model: str, prompts: dict[str, Any]) -> str | None:
    """Why the tool prompts are skipped, or None to run them: the model's own template has no
    place for tools when the reference renders the first tool prompt the same with and without
    them, or refuses them while it renders the bare messages (a reference that shows no
    rendering cannot tell: they run)."""
    p = next((p for p in prompts["prompts"] if p.get("tools")), None)
    if p is None:
        return None
    offered, bare = rendered(reference, model, p["messages"], p["tools"]), rendered(reference, model, p["messages"])
    if not bare[0]:
        return None
    if not offered[0]:
        return "the reference refuses tools for this model (its template has no place for them)"
    if offered[1:] == bare[1:]:
        return "the model's template does not render tools (the reference's prompt is the same with and without them)"
    return None


def _verdict(outcomes: list[str]) -> str:
    return "FAIL" if "FAIL" in outcomes else "PASS" if "PASS" in outcomes else \
        "INCONCLUSIVE" if "INCONCLUSIVE" in outcomes else outcomes[0] if outcomes else "UNSUPPORTED"


def _first_difference(a: Any, b: Any) -> int:
    n = min(len(a), len(b))
    return next((i for i in range(n) if a[i] != b[i]), n)


def templates(reference: Any, ref_model: str, targets: list[tuple[str, Any, str]],
              prompts: dict[str, Any] | None = None) -> dict[str, Any]:
    """Per target and chat prompt: the target's rendered prompt (text or token ids) against the
    reference's, with the first difference and both renderings around it."""
    prompts = prompts or load_prompts()
    skip_tools = tools_skipped(reference, ref_model, prompts)
    chats = [p for p in prompts["prompts"] if p["endpoint"] != "completions"]
    refs = {p["id"]: rendered(reference, ref_model, p["messages"], p.get("tools")) for p in chats}
    out: dict[str, Any] = {"prompt_set_version": prompts["version"], "rule": "diff.template.agrees", "targets": {}}
    for name, target, model in targets:
        rows = []
        for p in chats:
            if skip_tools and p.get("tools"):
                rows.append({"prompt": p["id"], "outcome": "SKIPPED", "why": skip_tools})
                continue
            _, ref_text, ref_ids = refs[p["id"]]
            path, text, ids = rendered(target, model, p["messages"], p.get("tools"))
            row: dict[str, Any] = {"prompt": p["id"], "endpoint": path}
            if not path:
                row |= {"outcome": "UNSUPPORTED", "why": "the target shows no rendered prompt "
                        f"({', '.join(e[0] for e in RENDER_ENDPOINTS)} all refused)"}
            elif text is not None and ref_text is not None:
                i = _first_difference(ref_text, text)
                same = text == ref_text
                row |= {"outcome": "PASS" if same else "FAIL", "compared": "text",
                        "why": "identical prompt text" if same else f"the prompt text differs at character {i}",
                        **({} if same else {"char_index": i, "reference_around": ref_text[max(0, i - 40):i + 60],
                                            "target_around": text[max(0, i - 40):i + 60]})}
            elif ids is not None and ref_ids is not None:
                i = _first_difference(ref_ids, ids)
                same = list(ids) == list(ref_ids)
                row |= {"outcome": "PASS" if same else "FAIL", "compared": "token ids",
                        "why": "identical prompt token ids" if same else f"the prompt token ids differ at token {i}",
                        **({} if same else {"token_index": i, "reference_around": ref_ids[max(0, i - 8):i + 12],
                                            "target_around": list(ids)[max(0, i - 8):i + 12]})}
            else:
                row |= {"outcome": "INCONCLUSIVE", "why": "the reference and the target show different things "
                        "(text against token ids) and the reference lacks the other"}
            rows.append(row)
        outcomes = [r["outcome"] for r in rows]
        out["targets"][name] = {"model": model, "verdict": _verdict(outcomes),
                                "counts": {o: outcomes.count(o) for o in sorted(set(outcomes))}, "prompts": rows}
    return out


def run(reference: Any, ref_model: str, targets: list[tuple[str, Any, str]], tolerance: str,
        prompts: dict[str, Any] | None = None) -> dict[str, Any]:
    """Compare each (name, target, model) with the reference over the prompt set."""
    prompts = prompts or load_prompts()
    n, bound = prompts["max_tokens"], BOUNDS[tolerance]
    skip_tools = tools_skipped(reference, ref_model, prompts)
    refs: dict[str, Reference] = {}
    skipped: dict[str, str] = {}
    for p in prompts["prompts"]:
        if skip_tools and p.get("tools"):
            skipped[p["id"]] = skip_tools
            continue
        try:
            refs[p["id"]] = reference_answer(reference, p, ref_model, n)
        except RuntimeError as e:
            if not p.get("reasoning"):
                raise
            # a family without reasoning (SmolLM2's) refuses the control: nothing to compare
            skipped[p["id"]] = f"the reference refuses reasoning for this model: {str(e)[:160]}"
    out: dict[str, Any] = {"prompt_set_version": prompts["version"], "max_tokens": n, "tolerance": tolerance,
                           "bound_nats": bound, "rule": RULES[tolerance], "logprob_rule": LOGPROB_RULE,
                           "logprob_bound_nats": LOGPROB_BOUNDS[tolerance], "targets": {}}
    for name, target, model in targets:
        rows = []
        for p in prompts["prompts"]:
            if p["id"] not in refs:
                rows.append({"prompt": p["id"], "outcome": "SKIPPED", "why": skipped[p["id"]]})
                continue
            ref = refs[p["id"]]
            try:
                doc = _target_answer(target, p, model, n)
            except UNANSWERED as e:  # an endpoint the target lacks is a finding, not a crash
                rows.append({"prompt": p["id"], "outcome": "UNSUPPORTED", "why": str(e)[:300]})
                continue
            text = answer_text(p["endpoint"], doc)
            reasoning = reasoning_of(doc) if p["endpoint"] == "chat" else ""
            if p.get("reasoning") or p.get("reasoning_split") or (
                    p["endpoint"] == "chat" and (reasoning or ref.reasoning) and not (ref.calls or calls_of(doc))):
                # a reasoning prompt (thinking on, or off and judged by where the answer went), or
                # an answer one side filed (partly) under reasoning
                verdict = compare_reasoning(ref, text, reasoning, tolerance)
            elif p.get("tools"):
                verdict = compare_calls(ref, text, calls_of(doc), tolerance)
            else:
                verdict = compare(ref, text, bound)
            row = {"prompt": p["id"], "endpoint": p["endpoint"], "reference": ref.text, "target": text, **verdict,
                   **logprob_differences(ref, p["endpoint"], doc)}
            if verdict["outcome"] != "PASS" and (p.get("tools") or p.get("reasoning") or p.get("reasoning_split")
                                                 or reasoning or ref.reasoning):
                row |= parses_and_raw(reference, ref_model, target, model, p, n, ref, doc)
                if row.get("same_raw_text") and verdict["outcome"] == "INCONCLUSIVE":
                    row |= {"outcome": "FAIL", "why": "the model wrote the same text on both engines and their parsers "
                            "read it differently: " + verdict["why"]}
            rows.append(row | judge_logprobs(row, tolerance))
        outcomes = [r["outcome"] for r in rows]
        judged = [r["logprobs"]["outcome"] for r in rows if "logprobs" in r]
        out["targets"][name] = {"model": model, "verdict": _verdict(outcomes),
                                "counts": {o: outcomes.count(o) for o in sorted(set(outcomes))},
                                "logprobs": _verdict(judged),
                                "logprob_counts": {o: judged.count(o) for o in sorted(set(judged))}, "prompts": rows}
    return out


def parses_and_raw(reference: Any, ref_model: str, target: Any, model: str, prompt: dict[str, Any], n: int,
                   ref: Reference, doc: dict[str, Any]) -> dict[str, Any]:
    """Where a tool or reasoning prompt's parses differ: each side's parse (content, reasoning,
    calls) and the raw text each model wrote (where the engine shows it), and whether that text
    is the same on both sides: then the difference is the parsers', not the numbers'."""
    out: dict[str, Any] = {
        "reference_parse": {"content": ref.text, "reasoning": ref.reasoning, "calls": ref.calls},
        "target_parse": {"content": answer_text("chat", doc), "reasoning": reasoning_of(doc), "calls": calls_of(doc)}}
    raw_ref, raw_target = raw_text(reference, ref_model, prompt, n), raw_text(target, model, prompt, n)
    if raw_ref is not None:
        out["reference_raw"] = raw_ref
    if raw_target is not None:
        out["target_raw"] = raw_target
    if raw_ref is not None and raw_target is not None:
        out["same_raw_text"] = raw_ref.strip() == raw_target.strip()
    return out


def markdown(report: dict[str, Any]) -> str:
    if "tolerance" in report:
        title = (f"# Differential run ({report['rule']}, tolerance {report['tolerance']}: margin <= "
                 f"{report['bound_nats']} nats; prompt set v{report['prompt_set_version']}, "
                 f"{report['max_tokens']} greedy tokens)")
    else:
        title = f"# Template agreement ({report['rule']}; prompt set v{report['prompt_set_version']})"
    lines = [title, ""]
    for name, t in report["targets"].items():
        lines += [f"## {name}: {t['verdict']} {t['counts']}", ""]
        if "logprobs" in t:
            lines += [f"Log probabilities ({report['logprob_rule']}, mean |diff| <= {report['logprob_bound_nats']} "
                      f"nats over {MIN_SHARED}+ shared tokens): {t['logprobs']} {t['logprob_counts']}", ""]
        lines += ["| prompt | outcome | why |", "|---|---|---|"]
        for r in t["prompts"]:
            why = r["why"].replace("|", "\\|").replace("\n", " ")
            if "logprob_diff" in r:
                d = r["logprob_diff"]
                why += (f" (log probabilities along the {d['tokens']} shared tokens: mean |diff| "
                        f"{d['mean_abs']:.4f}, max {d['max_abs']:.4f}: {r['logprobs']['outcome']})")
            for side in ("reference", "target"):
                if f"{side}_parse" in r:
                    why += f"<br>{side} parse: {_cell(json.dumps(r[side + '_parse'], ensure_ascii=False))}"
                if f"{side}_raw" in r:
                    why += f"<br>{side} raw text: {_cell(json.dumps(r[side + '_raw'], ensure_ascii=False))}"
            lines.append(f"| {r['prompt']} | {r['outcome']} | {why} |")
        lines.append("")
    return "\n".join(lines)


def _cell(text: str) -> str:
    return "`" + text.replace("|", "\\|").replace("`", "'") + "`"


def _reference_target(spec: str, headers: dict[str, str]) -> tuple[Any, str]:
    """The reference as a target; SystemExit(EXIT_USAGE) after one line when an in-process model cannot
    be found or loaded (the names `colibri serve --model` takes are taken here too)."""
    if spec.startswith("inprocess:"):
        from colibri.engine_errors import EngineError
        from colibri.paths import ModelNotFound, resolve_model

        from .inprocess import model_target

        name = spec.removeprefix("inprocess:")
        try:
            target, svc = model_target(resolve_model(name), dequantize=True)
        except (ModelNotFound, EngineError, OSError, ValueError) as e:
            print(f"colibri-conform differential: --reference {spec}: {e}", file=sys.stderr)
            raise SystemExit(EXIT_USAGE) from None
        return target, svc.settings.model_id
    target = remote_target(spec, headers, None)
    return target, target.model


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="colibri-conform differential", description=__doc__.split("\n\n")[0],
                                 epilog="Exit 0 when every target passes; 1 when one fails; 2 on a usage error (a reference model that "
                                        "cannot be found or loaded, say); 3 when a target is unreachable or no LLM API.")
    ap.add_argument("--reference", required=True,
                    help="the reference: a URL, or inprocess:MODEL (colibri on that model, weights expanded to F32; "
                         "MODEL is what `colibri serve --model` takes: a model directory, a GGUF file, or smollm2)")
    ap.add_argument("--base-url", action="append", required=True, help="a target server (repeatable)")
    ap.add_argument("--model", help="model id on the targets (default: the first each lists)")
    ap.add_argument("--tolerance", choices=sorted(BOUNDS), default="exact",
                    help="exact: the same weights in the same format (rule diff.greedy.exact; log probabilities within "
                         f"{LOGPROB_BOUNDS['exact']} nats); rounded: quantized or lower-precision weights or arithmetic "
                         f"(diff.greedy.rounded; within {LOGPROB_BOUNDS['rounded']}). Default exact")
    ap.add_argument("--templates", action="store_true",
                    help="compare the rendered prompts instead (rule diff.template.agrees): /v1/render, "
                         "/apply-template or /tokenize on each target against the reference's /v1/render")
    ap.add_argument("--json", type=Path, help="write the report as JSON here")
    ap.add_argument("--markdown", type=Path, help="write the report as Markdown here")
    a = ap.parse_args(argv)
    reference, ref_model = _reference_target(a.reference, {})
    targets = []
    for url in a.base_url:
        t = remote_target(url, {}, a.model)
        targets.append((url, t, t.model))
    report = templates(reference, ref_model, targets) if a.templates else run(reference, ref_model, targets,
                                                                                a.tolerance)
    report["reference"] = a.reference
    if a.json:
        a.json.write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n")
    if a.markdown:
        a.markdown.write_text(markdown(report))
    for name, t in report["targets"].items():
        logprobs = f"; log probabilities {t['logprobs']} {t['logprob_counts']}" if "logprobs" in t else ""
        print(f"{name}: {t['verdict']} {t['counts']}{logprobs}", file=sys.stderr)
        for r in t["prompts"]:
            if r["outcome"] != "PASS":
                print(f"  {r['outcome']} {r['prompt']}: {r['why']}", file=sys.stderr)
            if r.get("logprobs", {}).get("outcome") == "FAIL":
                print(f"  log probabilities FAIL {r['prompt']}: {r['logprobs']['why']}", file=sys.stderr)
    failed = any("FAIL" in (t["verdict"], t.get("logprobs")) for t in report["targets"].values())
    return EXIT_FAIL if failed else EXIT_OK
