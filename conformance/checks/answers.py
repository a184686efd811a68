"""The answer a response carries (text, reasoning, tool calls, finish reason), read the same
way from a unary body or a stream on every generating endpoint, and the reasons a rule about
the model's output has nothing to judge."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from ..exchange import Exchange
from .core import CheckContext, CheckFailure, NotApplicable, Unsupported

#: Openings of a tool call in the native syntaxes (json-tags and glm-xml, qwen-xml): text that
#: holds one was a call the model wrote.
CALL_MARKUP = ("<tool_call>", "<function=")


#: finish reasons (OpenAI, Anthropic; Responses' incomplete reads as length) of a turn the token
#: limit cut: a call in it may be unfinished, as OpenAI's own are, so its shape is no evidence
CUT_OFF = ("length", "max_tokens")


def cut_off() -> NotApplicable:
    return NotApplicable("the token limit cut the turn (finish length): the call may be unfinished, as the "
                         "official APIs return it too")


def no_call(content: str) -> NotApplicable:
    """Why a tool-call rule has no call to judge: the model wrote none (INCONCLUSIVE), or it wrote
    one that the server handed back as text because no tool-call parser read it (UNSUPPORTED:
    the server does not parse this model's calls, e.g. transformers serve without a
    response_template for the model's type)."""
    if any(m in content for m in CALL_MARKUP):
        return Unsupported(f"the model wrote a tool call and the server returned it as text, unparsed: "
                           f"{content[:100]!r}")
    return NotApplicable("the model made no tool call")


REASONING_MARKUP = ("<think>", "</think>")


TOOL_CALL_MARKUP = ("<tool_call>", "</tool_call>")


@dataclass
class Answer:
    content: str = ""
    reasoning: str = ""
    tool_calls: list[tuple[str, Any]] = field(default_factory=list)
    finish: str | None = None
    raw_arguments: list[Any] = field(default_factory=list)


def parsed_arguments(raw: Any) -> Any:
    try:
        return json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:
        return raw


def answer(ex: Exchange, endpoint: str) -> Answer:
    """The answer an exchange carries, unary or reassembled from a stream; a CheckFailure when
    the response is not shaped like an answer of that endpoint at all."""
    try:
        return _answer(ex, endpoint)
    except (KeyError, TypeError, IndexError, AttributeError, ValueError) as e:
        raise CheckFailure("answer", f"a {endpoint} answer (unary JSON or its stream)",
                           f"{type(e).__name__} {e} reading {ex.text(160)}") from None


def _responses_answer(ex: Exchange) -> Answer:
    """A /v1/responses answer: from the output items, or reassembled from the stream's deltas
    (function calls from their finished items, which carry the whole arguments)."""
    a = Answer()
    if not ex.is_sse:
        doc = ex.json()
        items, status = doc["output"], doc.get("status")
        for item in items:
            if item["type"] == "message":
                a.content += "".join(p.get("text", "") for p in item.get("content") or [])
            elif item["type"] == "reasoning":
                a.reasoning += "".join(p.get("text", "") for p in (item.get("content") or item.get("summary") or []))
    else:
        items, status = [], None
        for e in ex.events():
            d = e.json()
            kind = d["type"]
            if kind == "response.output_text.delta":
                a.content += d["delta"]
            elif kind in ("response.reasoning_text.delta", "response.reasoning_summary_text.delta"):
                a.reasoning += d["delta"]
            elif kind == "response.output_item.done":
                items.append(d["item"])
            elif kind in ("response.completed", "response.incomplete", "response.failed"):
                status = kind.rsplit(".", 1)[1]
    for item in items:
        if item["type"] == "function_call":
            a.raw_arguments.append(item["arguments"])
            a.tool_calls.append((item["name"], parsed_arguments(item["arguments"])))
    a.finish = "length" if status == "incomplete" else "tool_calls" if a.tool_calls else "stop"
    return a


def _answer(ex: Exchange, endpoint: str) -> Answer:
    if endpoint == "responses":
        return _responses_answer(ex)
    a = Answer()
    if not ex.is_sse:
        doc = ex.json()
        if endpoint == "messages":
            for b in doc.get("content", []):
                if b["type"] == "text":
                    a.content += b["text"]
                elif b["type"] == "thinking":
                    a.reasoning += b.get("thinking", "")
                elif b["type"] == "tool_use":
                    a.tool_calls.append((b["name"], b["input"]))
            a.finish = doc.get("stop_reason")
        else:
            ch = doc["choices"][0]
            if endpoint == "completions":
                a.content = ch["text"]
            else:
                msg = ch["message"]
                a.content = msg.get("content") or ""
                a.reasoning = msg.get("reasoning_content") or msg.get("reasoning") or ""
                for c in msg.get("tool_calls") or []:
                    a.raw_arguments.append(c["function"]["arguments"])
                    a.tool_calls.append((c["function"]["name"], parsed_arguments(c["function"]["arguments"])))
            a.finish = ch["finish_reason"]
        return a
    events = ex.events()
    if endpoint == "messages":
        blocks: dict[int, dict[str, Any]] = {}
        for e in events:
            d = e.json()
            if d["type"] == "content_block_start":
                blocks[d["index"]] = dict(d["content_block"], _json="")
            elif d["type"] == "content_block_delta":
                b, delta = blocks[d["index"]], d["delta"]
                if delta["type"] == "text_delta":
                    b["text"] = b.get("text", "") + delta["text"]
                elif delta["type"] == "thinking_delta":
                    b["thinking"] = b.get("thinking", "") + delta["thinking"]
                elif delta["type"] == "input_json_delta":
                    b["_json"] += delta["partial_json"]
            elif d["type"] == "message_delta":
                a.finish = d["delta"].get("stop_reason")
        for _, b in sorted(blocks.items()):
            if b["type"] == "text":
                a.content += b.get("text", "")
            elif b["type"] == "thinking":
                a.reasoning += b.get("thinking", "")
            elif b["type"] == "tool_use":
                a.tool_calls.append((b["name"], parsed_arguments(b["_json"] or "{}")))
        return a
    calls: dict[int, dict[str, Any]] = {}
    for e in events:
        if e.data == "[DONE]":
            continue
        d = e.json()
        for ch in d.get("choices") or []:
            if endpoint == "completions":
                a.content += ch.get("text") or ""
            else:
                delta = ch.get("delta") or {}
                a.content += delta.get("content") or ""
                a.reasoning += delta.get("reasoning_content") or delta.get("reasoning") or ""
                for tc in delta.get("tool_calls") or []:
                    c = calls.setdefault(tc.get("index", -1), {"name": "", "arguments": ""})
                    fn = tc.get("function") or {}
                    c["name"] += fn.get("name") or ""
                    c["arguments"] += fn.get("arguments") or ""
            if ch.get("finish_reason"):
                a.finish = ch["finish_reason"]
    for _, c in sorted(calls.items()):
        a.raw_arguments.append(c["arguments"])
        a.tool_calls.append((c["name"], parsed_arguments(c["arguments"])))
    return a


def vanished(ctx: CheckContext, a: Answer) -> str | None:
    """Why the turn lost the model's output, when it did: usage counts generated tokens, but the
    answer has no text, no reasoning and no call (vLLM's qwen3_xml tool parser does that to a call
    written in another syntax: neither parsed nor handed back as text)."""
    if a.content.strip() or a.reasoning.strip() or a.tool_calls or ctx.exchange.is_sse:
        return None
    try:
        usage = ctx.exchange.json().get("usage") or {}
    except (ValueError, AttributeError):
        return None
    n = usage.get("completion_tokens", usage.get("output_tokens"))
    if isinstance(n, int) and n > 0:
        return f"{n} tokens generated ({'finish ' + str(a.finish)}), none returned: no content, no reasoning, no call"
    return None


def readable_answer(ctx: CheckContext) -> Answer:
    """The answer, for a precondition: one that cannot be read at all cannot show whether the
    model did the thing (the framing rules judge the unreadable stream)."""
    try:
        return answer(ctx.exchange, ctx.endpoint)
    except CheckFailure as f:
        raise NotApplicable(f"the answer could not be read ({f.actual})") from None
