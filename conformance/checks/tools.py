"""Checks of what a server made of the model's tool calls: the fragments of a streamed call,
arguments as a JSON string, calls to declared tools only, a tool choice obeyed; and the
preconditions that the model called (or tried to call) a tool."""
from __future__ import annotations

import json
import re
from typing import Any

from colibri.tool_parsers import declared as tool_names

from .answers import (
    CALL_MARKUP,
    CUT_OFF,
    TOOL_CALL_MARKUP,
    answer,
    cut_off,
    no_call,
    parsed_arguments,
    readable_answer,
    vanished,
)
from .core import CheckContext, CheckFailure, NotApplicable, Unsupported, stream_data


def tool_call_made(ctx: CheckContext) -> None:
    """Precondition of the tool-call rules: the model called a tool (else INCONCLUSIVE)."""
    a = readable_answer(ctx)
    if not a.tool_calls:
        lost = vanished(ctx, a)
        if lost:
            raise CheckFailure("tool_call_made", "the model's output back as a call or as text", lost)
        raise no_call(a.content)
    if a.finish in CUT_OFF:
        raise cut_off()


def tool_call_attempted(ctx: CheckContext) -> None:
    """Precondition of a rule about where call markup goes: a call was parsed, or its markup
    reached content (the leak such a rule fails; it is no reason to call the run vacuous)."""
    a = readable_answer(ctx)
    if not a.tool_calls and not any(m in a.content for m in TOOL_CALL_MARKUP):
        raise NotApplicable("the model made no tool call and wrote no call markup")


def tool_call_delta_index(ctx: CheckContext) -> None:
    seen: set[int] = set()
    for d in stream_data(ctx, "tool_call_delta_index"):
        for ch in d.get("choices") or []:
            for tc in (ch.get("delta") or {}).get("tool_calls") or []:
                idx = tc.get("index")
                if not isinstance(idx, int):
                    raise CheckFailure("tool_call_delta_index", "an integer index", tc)
                if idx not in seen:
                    seen.add(idx)
                    if not (tc.get("id") and tc.get("type") == "function" and (tc.get("function") or {}).get("name")):
                        raise CheckFailure("tool_call_delta_index", "id, type and name in the first fragment", tc)
    if not seen:
        raise no_call(answer(ctx.exchange, ctx.endpoint).content)


def arguments_json_string(ctx: CheckContext) -> None:
    a = answer(ctx.exchange, ctx.endpoint)
    if not a.tool_calls:
        raise no_call(a.content)
    if a.finish in CUT_OFF:
        raise cut_off()
    for raw in a.raw_arguments:
        if not isinstance(raw, str) or not isinstance(parsed_arguments(raw), dict):
            raise CheckFailure("arguments_json_string", "a JSON object encoded as a string", raw)


def tool_calls_offered(ctx: CheckContext) -> None:
    a = answer(ctx.exchange, ctx.endpoint)
    offered = set(tool_names((ctx.body or {}).get("tools")))
    stray = [name for name, _ in a.tool_calls if name not in offered]
    if stray:
        raise CheckFailure("tool_calls_offered", f"calls to {sorted(offered)} only", stray)
    if not a.tool_calls and "<tool_call>" not in a.content:
        raise NotApplicable("the model made no tool call")


# a call's name as each native syntax writes it after its opening marker: json-tags
# `"name": "N"`, qwen-xml `<function=N>`, glm-xml the name itself
_MARKUP_NAME = re.compile(r'<tool_call>\s*(?:\{\s*"name"\s*:\s*"([^"]*)"|<function=([^>\s]*)>|([^\s<{]+))')


def tool_markup_offered(ctx: CheckContext) -> None:
    a = answer(ctx.exchange, ctx.endpoint)
    offered = set(tool_names((ctx.body or {}).get("tools")))
    written = [n for m in _MARKUP_NAME.finditer(a.content) for n in m.groups() if n]
    stray = [name for name, _ in a.tool_calls if name not in offered] + [n for n in written if n not in offered]
    if stray:
        raise CheckFailure("tool_markup_offered", f"every call, returned or left as text, naming one of {sorted(offered)}",
                           stray)
    if not a.tool_calls and not written:
        raise NotApplicable("the model made no tool call")


def tool_names_declared(ctx: CheckContext) -> None:
    a = answer(ctx.exchange, ctx.endpoint)
    if not a.tool_calls:
        raise no_call(a.content)
    declared = set(tool_names((ctx.body or {}).get("tools")))

    def norm(n: str) -> str:
        return n.replace("-", "_").replace("__", "_").lower()

    for name, _ in a.tool_calls:
        if name in declared:
            continue
        if any(norm(name) == norm(d) for d in declared):  # the server rewrote a declared name
            raise CheckFailure("tool_names_declared", sorted(declared), name)
        raise NotApplicable(f"the model called {name!r}, which is no declared tool")


def _declared(body: dict[str, Any]) -> list[str]:
    out = []
    for t in body.get("tools") or []:
        fn = t.get("function", t) if isinstance(t, dict) else {}
        if isinstance(fn, dict) and isinstance(fn.get("name"), str):
            out.append(fn["name"])
    return out


def _unparsed(content: str) -> None:
    """A call the model wrote and the server left in content: the server parses no calls of this
    model (UNSUPPORTED, one cause for every tool rule), not a choice it ignored."""
    why = no_call(content)
    if isinstance(why, Unsupported):
        raise why


def tool_call_required(ctx: CheckContext) -> None:
    """`tool_choice: "required"`: the turn calls one or more of the declared tools."""
    a = answer(ctx.exchange, ctx.endpoint)
    declared = _declared(ctx.body or {})
    if not a.tool_calls:
        _unparsed(a.content)
        raise CheckFailure("tool_call_required", f"a call to one of {declared} (tool_choice required)",
                           f"no call; content {a.content[:120]!r}")
    stray = [n for n, _ in a.tool_calls if n not in declared]
    if stray:
        raise CheckFailure("tool_call_required", f"calls to {declared} only", stray)


def tool_call_named(ctx: CheckContext) -> None:
    """`tool_choice: {"type": "function", "function": {"name": N}}`: the turn calls N, and only N."""
    a = answer(ctx.exchange, ctx.endpoint)
    name = ((ctx.body or {}).get("tool_choice") or {}).get("function", {}).get("name")
    if not a.tool_calls:
        _unparsed(a.content)
        raise CheckFailure("tool_call_named", f"a call to {name!r} (tool_choice names it)",
                           f"no call; content {a.content[:120]!r}")
    other = [n for n, _ in a.tool_calls if n != name]
    if other:
        raise CheckFailure("tool_call_named", f"calls to {name!r} only", other)


def tool_call_delta_pieces(ctx: CheckContext) -> None:
    """Streamed calls: per index, one id (a later fragment may repeat it, never change it), one
    name, and argument pieces whose concatenation is a JSON object, the same object the unary
    answer to the same request carries."""
    calls: dict[int, dict[str, Any]] = {}
    for d in stream_data(ctx, "tool_call_delta_pieces"):
        for ch in d.get("choices") or []:
            for tc in (ch.get("delta") or {}).get("tool_calls") or []:
                c = calls.setdefault(tc.get("index", -1), {"ids": [], "names": [], "args": ""})
                if tc.get("id"):
                    c["ids"].append(tc["id"])
                fn = tc.get("function") or {}
                if fn.get("name"):
                    c["names"].append(fn["name"])
                c["args"] += fn.get("arguments") or ""
    streamed_answer = answer(ctx.exchange, ctx.endpoint)
    if not calls:
        raise no_call(streamed_answer.content)
    if streamed_answer.finish in CUT_OFF:
        raise cut_off()
    for idx, c in sorted(calls.items()):
        if len(set(c["ids"])) != 1:
            raise CheckFailure("tool_call_delta_pieces", f"one id for the call at index {idx}", c["ids"])
        if len(c["names"]) != 1:
            raise CheckFailure("tool_call_delta_pieces", f"the name once, in the first fragment of index {idx}",
                               c["names"])
        try:
            joined = json.loads(c["args"])
        except ValueError:
            joined = None
        if not isinstance(joined, dict):
            raise CheckFailure("tool_call_delta_pieces", "argument pieces that concatenate to a JSON object",
                               c["args"][:200])
    unary_ex = ctx.resend(dict(ctx.body or {}, stream=False))
    if unary_ex.status != 200:
        raise CheckFailure("tool_call_delta_pieces", "200 for the same request unary", unary_ex.status)
    unary = answer(unary_ex, ctx.endpoint).tool_calls
    streamed = [(c["names"][0], json.loads(c["args"])) for _, c in sorted(calls.items())]
    if not unary:
        raise NotApplicable("the unary answer to the same request made no call (sampling differs)")
    if streamed != unary:
        raise CheckFailure("tool_call_delta_pieces", f"the unary answer's calls {unary}", streamed)


def _calls_with_ids(ctx: CheckContext) -> list[tuple[list[str], str, str]]:
    """(ids, name, arguments text) per returned call: the unary message's entries, or per stream
    index the ids its fragments carried, its name and its joined argument pieces."""
    if not ctx.exchange.is_sse:
        msg = ctx.exchange.json()["choices"][0]["message"]
        return [([c.get("id") or ""], (c.get("function") or {}).get("name") or "",
                 (c.get("function") or {}).get("arguments") or "") for c in msg.get("tool_calls") or []]
    calls: dict[Any, tuple[list[str], list[str], list[str]]] = {}
    for d in stream_data(ctx, "tool_calls_parallel"):
        for ch in d.get("choices") or []:
            for tc in (ch.get("delta") or {}).get("tool_calls") or []:
                ids, names, args = calls.setdefault(tc.get("index"), ([], [], []))
                fn = tc.get("function") or {}
                ids.extend([tc["id"]] if tc.get("id") else [])
                names.extend([fn["name"]] if fn.get("name") else [])
                args.append(fn.get("arguments") or "")
    return [(sorted(set(ids)) or [""], "".join(names), "".join(args)) for ids, names, args in calls.values()]


def tool_calls_parallel(ctx: CheckContext) -> None:
    """Two or more calls in a turn: each its own entry (stream: its own index) with its own id,
    a declared name and a JSON-object arguments string, and no call markup left in content."""
    a = answer(ctx.exchange, ctx.endpoint)
    calls = _calls_with_ids(ctx)
    if not calls:
        raise no_call(a.content)
    if a.finish in CUT_OFF:
        raise cut_off()
    left = [m for m in CALL_MARKUP if m in a.content]
    if left:
        raise CheckFailure("tool_calls_parallel", f"every call the model wrote returned as a call ({len(calls)} "
                           "returned)", f"call markup {left} left in content: {a.content[:160]!r}")
    merged = [ids for ids, _, _ in calls if len(ids) > 1]
    if merged:  # a stream that sent two calls' fragments under one index
        raise CheckFailure("tool_calls_parallel", "one non-empty id per call (per stream index)", merged)
    if len(calls) == 1:
        raise NotApplicable("the model made one call (it was not trained for parallel calls): nothing to split")
    declared = _declared(ctx.body or {})
    for ids, name, args in calls:
        if not ids[0]:
            raise CheckFailure("tool_calls_parallel", "one non-empty id per call (per stream index)", ids)
        if name not in declared:
            raise CheckFailure("tool_calls_parallel", f"a declared name ({declared}) per call", name)
        try:
            parsed = json.loads(args)
        except ValueError:
            parsed = None
        if not isinstance(parsed, dict):
            raise CheckFailure("tool_calls_parallel", "each call's arguments one JSON object", args[:200])
    all_ids = [c[0][0] for c in calls]
    if len(set(all_ids)) != len(all_ids):
        raise CheckFailure("tool_calls_parallel", "a distinct id per call (a tool message answers one id)", all_ids)


def tools_reach_prompt(ctx: CheckContext) -> None:
    """Tools offered without a tool_choice (auto by default) are rendered into the prompt: the
    answer's prompt_tokens exceed those of the same request without tools. Needs no call."""
    def prompt_tokens(ex: Any) -> int:
        n = ((ex.json() if ex.status == 200 else {}).get("usage") or {}).get("prompt_tokens")
        if not isinstance(n, int):
            raise NotApplicable(f"no usage.prompt_tokens to compare ({ex.status}: {ex.text(120)})")
        return n

    with_tools = prompt_tokens(ctx.exchange)
    without = prompt_tokens(ctx.resend({k: v for k, v in (ctx.body or {}).items() if k != "tools"}))
    if with_tools <= without:
        raise CheckFailure("tools_reach_prompt", "more prompt tokens with the tools than without (no tool_choice: "
                           "auto, the tools offered to the model)",
                           f"{with_tools} prompt tokens with the tools, {without} without them")


#: The checks of this module, registered by name in conformance/checks/__init__.py.
CHECKS = (tool_call_made, tool_call_attempted, tool_call_delta_index, arguments_json_string, tool_calls_offered,
          tool_markup_offered, tool_names_declared, tool_call_required, tool_call_named, tool_call_delta_pieces,
          tool_calls_parallel, tools_reach_prompt)
