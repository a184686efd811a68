"""The named checks of spec/checks.yaml, and the evaluation of one vector's expectations.

A check is a plain function over a `CheckContext`; it raises `CheckFailure` carrying what
was expected and what was seen. `evaluate` runs a vector's expectations (status, error
code/param/type, JSON paths, absent paths, headers) and then its named checks.
"""
from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from colibri.schemas import validator
from colibri.spec.paths import MISSING, get
from colibri.tool_parsers import declared as tool_names

from .exchange import BodyNotJson, Exchange


class CheckFailure(Exception):
    def __init__(self, check: str, expected: Any, actual: Any):
        self.check, self.expected, self.actual = check, expected, actual
        super().__init__(f"{check}: expected {expected!r}, got {actual!r}")


class NotApplicable(Exception):
    """The check needs something this target or run cannot give (a live socket, say), or the
    model did not produce what a behaviour rule needs."""


class Unsupported(NotApplicable):
    """The target does not serve what the rule is about (no /metrics, say): UNSUPPORTED."""


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


@dataclass
class Answer:
    content: str = ""
    reasoning: str = ""
    tool_calls: list[tuple[str, Any]] = field(default_factory=list)
    finish: str | None = None
    raw_arguments: list[Any] = field(default_factory=list)


@dataclass
class CheckContext:
    spec: Any
    vector: Any
    exchange: Exchange
    body: dict[str, Any] | None
    target: Any
    before: dict[str, Any] = field(default_factory=dict)
    expect: dict[str, Any] = field(default_factory=dict)  # the vector's, under the run's contract
    strict: bool = True  # judged by this project's stricter contract, not only the official one

    def __post_init__(self) -> None:
        if not self.expect:
            self.expect = self.vector.expect

    @property
    def endpoint(self) -> str:
        return str(self.vector.endpoint)

    def resend(self, body: dict[str, Any]) -> Exchange:
        ep = self.spec.endpoints[self.endpoint]
        return self.target.send("POST", ep.path, json.dumps(body).encode(), self.vector.headers)


def _args(raw: Any) -> Any:
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
            a.tool_calls.append((item["name"], _args(item["arguments"])))
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
                    a.tool_calls.append((c["function"]["name"], _args(c["function"]["arguments"])))
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
                a.tool_calls.append((b["name"], _args(b["_json"] or "{}")))
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
        a.tool_calls.append((c["name"], _args(c["arguments"])))
    return a


def _data_events(ex: Exchange) -> list[dict[str, Any]]:
    return [e.json() for e in ex.events() if e.data != "[DONE]"]


def _stream(ctx: CheckContext, check: str) -> list[dict[str, Any]]:
    """The data events of a response that must be a stream: a FAIL naming what came instead."""
    ex = ctx.exchange
    if not ex.is_sse:
        raise CheckFailure(check, "text/event-stream (the request asked for a stream)",
                           f"{ex.header('content-type')}: {ex.text(120)}")
    try:
        return _data_events(ex)
    except ValueError as e:
        raise CheckFailure(check, "every data payload JSON (or [DONE])", str(e)) from None


# ------------------------------------------------------------------ checks

def error_envelope(ctx: CheckContext) -> None:
    ex = ctx.exchange
    if ex.status < 400:
        raise CheckFailure("error_envelope", "an error status", ex.status)
    anthropic = ctx.spec.endpoints[ctx.endpoint].envelope == "anthropic" and ex.path.startswith("/v1/messages")
    schema = "error.anthropic.json" if anthropic else "error.openai.json"
    try:
        doc = ex.json()
    except ValueError:
        raise CheckFailure("error_envelope", f"a JSON body ({schema})", ex.body[:200]) from None
    errs = _schema_errors(ctx, validator(schema), doc)
    if errs:
        raise CheckFailure("error_envelope", schema, f"{errs[0].message} in {ex.text(200)}")
    code = ctx.expect.get("code")
    if code and code in ctx.spec.errors:
        want = ctx.spec.errors[code]
        got_type = doc["error"]["type"]
        exp_type = want.anthropic_type if anthropic else want.type
        if got_type != exp_type:
            raise CheckFailure("error_envelope", f"type {exp_type}", got_type)


#: A server that sheds load says so with these; they judge its capacity, not the request.
OVERLOAD_STATUSES = {503, 529}


def no_server_error(ctx: CheckContext) -> None:
    """The client built this request: whatever it holds, the answer is not the server's fault
    (an overload answer and a vector that injects a fault on purpose aside)."""
    ex = ctx.exchange
    if 500 <= ex.status < 600 and ex.status not in OVERLOAD_STATUSES and int(ctx.vector.expect["status"]) < 500:
        raise CheckFailure("no_server_error", "a status below 500 (a named 4xx for a fault in the request)",
                           f"{ex.status} {ex.body[:200]!r}")


def _schema_errors(ctx: CheckContext, v: Any, doc: Any) -> list[Any]:
    """Schema errors that count under the run's contract. Under the official ones, extra keys
    and id prefixes are no client's business, and a key left out where the schema allows null
    reads as null in every SDK (this spec's own rule: null means absent)."""
    if ctx.strict:
        return list(v.iter_errors(doc))
    errs = list(v.iter_errors(_without_nulls(doc)))

    def counts(e: Any) -> bool:
        if e.validator in ("additionalProperties", "pattern"):
            return False
        if e.validator == "required":
            name = e.message.split("'")[1] if e.message.count("'") >= 2 else None
            sub = (e.schema.get("properties") or {}).get(name)
            if sub is not None and v.evolve(schema=sub).is_valid(None):
                return False
        if e.validator in ("anyOf", "oneOf") and e.context:
            # one alternative that fails only on lenient points is as good as a match
            branches: dict[Any, list[Any]] = {}
            for sub_error in e.context:
                branches.setdefault(sub_error.relative_schema_path[0], []).append(sub_error)
            if any(not any(counts(x) for x in errs) for errs in branches.values()):
                return False
        return True

    return [e for e in errs if counts(e)]


def _without_nulls(doc: Any) -> Any:
    """The document with null-valued keys left out: under the official contracts null means
    absent (a chunk's `delta.role: null` is no role), so a null is judged as a missing key."""
    if isinstance(doc, dict):
        return {k: _without_nulls(v) for k, v in doc.items() if v is not None}
    if isinstance(doc, list):
        return [_without_nulls(v) for v in doc]
    return doc


def response_schema(ctx: CheckContext) -> None:
    ex, ep = ctx.exchange, ctx.spec.endpoints[ctx.endpoint]
    if not ex.is_sse:
        if not ep.response_schema:
            return
        errs = _schema_errors(ctx, validator(ep.response_schema), ex.json())
        if errs:
            raise CheckFailure("response_schema", ep.response_schema, f"{errs[0].message} at {list(errs[0].absolute_path)}")
        return
    if ctx.endpoint == "responses":  # the events are judged by resp.stream.*; the final object here
        schema, v = "responses.response.json", validator("responses.response.json")
        for d in _data_events(ex):
            if isinstance(d, dict) and isinstance(d.get("response"), dict):
                errs = _schema_errors(ctx, v, d["response"])
                if errs:
                    raise CheckFailure("response_schema", schema, f"{errs[0].message} in {d.get('type')}")
        return
    schema = {"chat": "chat.chunk.json", "completions": "completions.response.json", "messages": "messages.event.json"}[ctx.endpoint]
    v = validator(schema)
    for d in _data_events(ex):
        errs = _schema_errors(ctx, v, d)
        if errs:
            raise CheckFailure("response_schema", schema, f"{errs[0].message} in {d}")


def usage_arithmetic(ctx: CheckContext) -> None:
    ex = ctx.exchange
    docs = [d for d in _data_events(ex) if d.get("usage")] if ex.is_sse else [ex.json()]
    if not docs:
        raise CheckFailure("usage_arithmetic", "a usage object", None)
    u = docs[-1]["usage"]
    p, c, t = u.get("prompt_tokens"), u.get("completion_tokens"), u.get("total_tokens")
    if not all(isinstance(x, int) and x >= 0 for x in (p, c, t)) or p + c != t:
        raise CheckFailure("usage_arithmetic", "total = prompt + completion, non-negative integers", u)


def one_finish_reason(ctx: CheckContext) -> None:
    chunks = [d for d in _stream(ctx, "one_finish_reason") if d.get("choices")]
    reasons = [(i, ch["finish_reason"]) for i, d in enumerate(chunks) for ch in d["choices"] if ch.get("finish_reason")]
    if len(reasons) != 1 or reasons[0][0] != len(chunks) - 1:
        raise CheckFailure("one_finish_reason", "exactly one finish_reason, in the last choice chunk",
                           f"{len(reasons)} at chunk(s) {[i for i, _ in reasons]} of {len(chunks)}")


def role_first(ctx: CheckContext) -> None:
    chunks = _stream(ctx, "role_first")
    role = chunks[0]["choices"][0]["delta"].get("role") if chunks and chunks[0].get("choices") else None
    if role != "assistant":
        raise CheckFailure("role_first", "assistant", role)


def done_sentinel(ctx: CheckContext) -> None:
    _stream(ctx, "done_sentinel")
    events = ctx.exchange.events()
    last = events[-1].data if events else None
    if last != "[DONE]":
        raise CheckFailure("done_sentinel", "[DONE]", last)


def sse_framing(ctx: CheckContext) -> None:
    ex = ctx.exchange
    if not ex.is_sse:
        raise CheckFailure("sse_framing", "text/event-stream", ex.header("content-type"))
    if ex.body.startswith(b"\xef\xbb\xbf") or not ex.body.endswith(b"\n\n"):
        raise CheckFailure("sse_framing", "no BOM, events ended by a blank line", ex.body[-40:])
    for e in ex.events():
        if e.data == "[DONE]":
            continue
        try:
            if not isinstance(e.json(), dict):
                raise ValueError
        except ValueError:
            raise CheckFailure("sse_framing", "every data payload a JSON object", e.data[:100]) from None


def usage_chunk_last(ctx: CheckContext) -> None:
    chunks = _stream(ctx, "usage_chunk_last")
    with_usage = [i for i, d in enumerate(chunks) if d.get("usage") is not None]
    if with_usage != [len(chunks) - 1] or chunks[-1].get("choices") != []:
        raise CheckFailure("usage_chunk_last", "one final usage chunk with choices []", with_usage)
    # OpenAI sends usage: null on every other chunk; a left-out key reads the same in every
    # SDK, so only this project's contract asks for the key itself.
    if ctx.strict and any("usage" not in d for d in chunks[:-1]):
        raise CheckFailure("usage_chunk_last", "usage: null on every other chunk", "a chunk without the key")


def tool_call_delta_index(ctx: CheckContext) -> None:
    seen: set[int] = set()
    for d in _stream(ctx, "tool_call_delta_index"):
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
        if not isinstance(raw, str) or not isinstance(_args(raw), dict):
            raise CheckFailure("arguments_json_string", "a JSON object encoded as a string", raw)


def _logprobs(ctx: CheckContext, inner: str) -> tuple[dict[str, Any], Any]:
    """The first choice and its logprobs' `inner` list; a FAIL when the server left them out."""
    choices = ctx.exchange.json().get("choices") or [{}]
    lp = choices[0].get("logprobs")
    if not isinstance(lp, dict) or not isinstance(lp.get(inner), list):
        raise CheckFailure("logprobs", f"choices[0].logprobs.{inner}, a list (logprobs were requested)", lp)
    return choices[0], lp


def logprob_join(ctx: CheckContext) -> None:
    if ctx.endpoint == "completions":
        ch, lp = _logprobs(ctx, "tokens")
        joined, text = "".join(lp["tokens"]), ch.get("text")
    else:
        ch, lp = _logprobs(ctx, "content")
        joined, text = "".join(e.get("token", "") for e in lp["content"]), (ch.get("message") or {}).get("content") or ""
        b = bytes(x for e in lp["content"] for x in (e.get("bytes") or []))
        # OpenAI allows bytes: null ("no bytes representation"); only this project's contract
        # asks for them on every token.
        no_bytes = any(e.get("bytes") is None for e in lp["content"])
        if (ctx.strict or not no_bytes) and b != text.encode():
            raise CheckFailure("logprob_join", "bytes joined = UTF-8 of the content", b)
    if joined != text:
        raise CheckFailure("logprob_join", text, joined)


def text_offset_chars(ctx: CheckContext) -> None:
    """Offsets advance by each token's length in characters; from 0 under this project's
    contract (cmpl.text_offset.from-zero), from wherever the server starts under OpenAI's (its
    legacy API counts from the start of the prompt)."""
    _, lp = _logprobs(ctx, "tokens")
    offsets = lp.get("text_offset") or [0]
    pos, want = (0 if ctx.strict else offsets[0]), []
    for t in lp["tokens"]:
        want.append(pos)
        pos += len(t)
    if lp["text_offset"] != want:
        raise CheckFailure("text_offset_chars", want, lp["text_offset"])


def _stops(body: dict[str, Any] | None) -> list[str]:
    body = body or {}
    s = body.get("stop", body.get("stop_sequences"))
    return [s] if isinstance(s, str) else list(s or [])


def no_stop_text(ctx: CheckContext) -> None:
    a = answer(ctx.exchange, ctx.endpoint)
    for s in _stops(ctx.body):
        if s in a.content:
            raise CheckFailure("no_stop_text", f"no {s!r} in the text", a.content)


def stream_equals_unary(ctx: CheckContext) -> None:
    assert ctx.body is not None
    other = ctx.resend(dict(ctx.body, stream=not ctx.body.get("stream"), **(
        {} if ctx.body.get("stream") or ctx.endpoint == "messages" else {})))
    if ctx.body.get("stream"):
        stream_ex, unary_ex = ctx.exchange, other
    else:
        stream_ex, unary_ex = other, ctx.exchange
    if unary_ex.status != 200 or stream_ex.status != 200:
        raise CheckFailure("stream_equals_unary", "200 in both modes", (unary_ex.status, stream_ex.status))
    u, s = answer(unary_ex, ctx.endpoint), answer(stream_ex, ctx.endpoint)
    if (u.content, u.reasoning, u.tool_calls, u.finish) != (s.content, s.reasoning, s.tool_calls, s.finish):
        raise CheckFailure("stream_equals_unary", u, s)


def _count(u: Any, key: str) -> int:
    v = u.get(key) if isinstance(u, dict) else None
    if not isinstance(v, int) or isinstance(v, bool) or v < 0:
        raise CheckFailure("anthropic_usage", f"usage.{key}: a non-negative integer", u)
    return v


def anthropic_usage(ctx: CheckContext) -> None:
    """Anthropic's usage, in the mode the request asked for: unary, `usage` with input_tokens and
    output_tokens; a stream, message_start's message.usage.input_tokens and message_delta's
    usage.output_tokens. The counts agree with the request: never more output than max_tokens."""
    body = ctx.body or {}
    if body.get("stream"):
        events = _stream(ctx, "anthropic_usage")  # JSON for stream: true is no stream at all
        starts = [e for e in events if e.get("type") == "message_start"]
        deltas = [e for e in events if e.get("type") == "message_delta"]
        if not starts or not deltas:
            raise CheckFailure("anthropic_usage", "a message_start and a message_delta carrying usage",
                               [e.get("type") for e in events][:12])
        _count((starts[0].get("message") or {}).get("usage"), "input_tokens")
        output = _count(deltas[-1].get("usage"), "output_tokens")
    else:
        u = ctx.exchange.json().get("usage")
        _count(u, "input_tokens")
        output = _count(u, "output_tokens")
    budget = body.get("max_tokens")
    if isinstance(budget, int) and output > budget:
        raise CheckFailure("anthropic_usage", f"output_tokens at most max_tokens ({budget})", output)


def anthropic_event_order(ctx: CheckContext) -> None:
    _stream(ctx, "anthropic_event_order")
    names = [e.event for e in ctx.exchange.events() if e.event != "ping"]
    for e in ctx.exchange.events():
        if e.json().get("type") != e.event:
            raise CheckFailure("anthropic_event_order", "data.type equal to the event name", (e.event, e.data[:80]))
    if not names or names[0] != "message_start" or names[-2:] != ["message_delta", "message_stop"]:
        raise CheckFailure("anthropic_event_order", "message_start ... message_delta, message_stop", names)
    expected_index, open_index = 0, None
    for e in ctx.exchange.events():
        d = e.json()
        if e.event == "content_block_start":
            if open_index is not None or d["index"] != expected_index:
                raise CheckFailure("anthropic_event_order", f"block {expected_index} starts after the last stopped", names)
            open_index = d["index"]
        elif e.event == "content_block_delta" and d["index"] != open_index:
            raise CheckFailure("anthropic_event_order", f"deltas for the open block {open_index}", d["index"])
        elif e.event == "content_block_stop":
            if d["index"] != open_index:
                raise CheckFailure("anthropic_event_order", f"stop of block {open_index}", d["index"])
            open_index, expected_index = None, expected_index + 1
    if open_index is not None:
        raise CheckFailure("anthropic_event_order", "every block stopped", f"block {open_index} open")


REASONING_MARKUP = ("<think>", "</think>")
TOOL_CALL_MARKUP = ("<tool_call>", "</tool_call>")


def reasoning_not_in_content(ctx: CheckContext) -> None:
    a = answer(ctx.exchange, ctx.endpoint)
    for marker in REASONING_MARKUP + TOOL_CALL_MARKUP:
        if marker in a.content:
            raise CheckFailure("reasoning_not_in_content", f"no {marker} in content", a.content)


def request_id_header(ctx: CheckContext) -> None:
    if not ctx.exchange.header("x-request-id"):
        raise CheckFailure("request_id_header", "an x-request-id header", None)


def _render(ctx: CheckContext) -> dict[str, Any]:
    doc = ctx.exchange.json()
    missing = [k for k in ("prompt", "tokens", "control_tokens") if not isinstance(doc, dict) or k not in doc]
    if missing:
        raise CheckFailure("render body", "a /v1/render answer (prompt, tokens, control_tokens)", f"lacks {missing}")
    return dict(doc)


def prompt_has_required_instruction(ctx: CheckContext) -> None:
    prompt = _render(ctx)["prompt"]
    if "You must call a tool." not in prompt:
        raise CheckFailure("prompt_has_required_instruction", "the required-call instruction line", prompt[-200:])


def prompt_forced_tool_applied(ctx: CheckContext) -> None:
    doc = _render(ctx)
    fam = ctx.spec.families[doc["family"]].row
    body = ctx.body or {}
    name = body["tool_choice"]["function"]["name"]
    declared = [t["function"]["name"] for t in body.get("tools", [])]
    strategy = fam["forced_tool_choice"]
    want = [name] if strategy in ("narrow", "narrow-and-name") else declared
    if doc["tools_offered"] != want:
        raise CheckFailure("prompt_forced_tool_applied", f"{strategy}: tools {want}", doc["tools_offered"])
    named = f"You must call the function {name}." in doc["prompt"]
    if named != (strategy == "narrow-and-name"):
        raise CheckFailure("prompt_forced_tool_applied", f"{strategy}: named in prose = {not named}", named)


def reasoning_present(ctx: CheckContext) -> None:
    if not answer(ctx.exchange, ctx.endpoint).reasoning.strip():
        raise CheckFailure("reasoning_present", "non-empty reasoning", "")


def reasoning_absent(ctx: CheckContext) -> None:
    a = answer(ctx.exchange, ctx.endpoint)
    if a.reasoning:
        raise CheckFailure("reasoning_absent", "no reasoning", a.reasoning)


def continuation_not_repeated(ctx: CheckContext) -> None:
    prefix = (ctx.body or {})["messages"][-1]["content"]
    a = answer(ctx.exchange, ctx.endpoint)
    if isinstance(prefix, str) and prefix and a.content.startswith(prefix):
        raise CheckFailure("continuation_not_repeated", f"an answer not starting with {prefix!r}", a.content)


_MARKER = re.compile(r"<\|[A-Za-z_]+\|>")  # the vectors' special-token text: <|user|>, <|im_end|>, ...


def _without_markers(value: Any) -> Any:
    if isinstance(value, str):
        return _MARKER.sub("", value)
    if isinstance(value, list):
        return [_without_markers(v) for v in value]
    if isinstance(value, dict):
        return {k: _without_markers(v) for k, v in value.items()}
    return value


def prompt_specials_literal(ctx: CheckContext) -> None:
    doc = _render(ctx)
    body = ctx.body or {}
    for m in body.get("messages", []):
        if isinstance(m.get("content"), str) and m["content"].strip() and m["content"].strip() not in doc["prompt"]:
            raise CheckFailure("prompt_specials_literal", "the prompt shows each message's text as sent",
                               {"missing": m["content"], "prompt": doc["prompt"]})
    plain = ctx.resend(_without_markers(body))
    if plain.status != 200:
        raise CheckFailure("prompt_specials_literal", "the request without the marker text renders too", plain.status)
    plain_doc = plain.json()
    if not isinstance(plain_doc, dict) or not isinstance(plain_doc.get("control_tokens"), list):
        raise CheckFailure("prompt_specials_literal", "a /v1/render answer with control_tokens", plain_doc)
    want, got = len(plain_doc["control_tokens"]), len(doc["control_tokens"])
    if got != want:
        raise CheckFailure("prompt_specials_literal", f"{want} control tokens (the template's own)",
                           f"{got}: the request's text added {got - want}")


def prompt_ends_with_generation_cue(ctx: CheckContext) -> None:
    doc = _render(ctx)
    last = (ctx.body or {})["messages"][-1]["content"]
    if doc["continuation"] or doc["prompt"].rstrip().endswith(last):
        raise CheckFailure("prompt_ends_with_generation_cue", "a new assistant cue after the closed turn", doc["prompt"][-80:])


def no_replacement_char(ctx: CheckContext) -> None:
    a = answer(ctx.exchange, ctx.endpoint)
    if "\ufffd" in a.content + a.reasoning:
        raise CheckFailure("no_replacement_char", "no U+FFFD", a.content)


def keepalive_seen(ctx: CheckContext) -> None:
    ex = ctx.exchange
    if not ex.comments() and not any(e.event == "ping" for e in ex.events()):
        raise CheckFailure("keepalive_seen", "an SSE comment or ping", "none")


def repeatable(ctx: CheckContext) -> None:
    assert ctx.body is not None
    again = ctx.resend(ctx.body)
    a, b = answer(ctx.exchange, ctx.endpoint), answer(again, ctx.endpoint)
    if (a.content, a.tool_calls, a.finish) != (b.content, b.tool_calls, b.finish):
        raise CheckFailure("repeatable", a, b)


def scheduler_accounting(ctx: CheckContext) -> None:
    try:
        doc = ctx.exchange.json()
    except ValueError:
        raise Unsupported("the target's /health answers no JSON snapshot") from None
    s = doc.get("scheduler") if isinstance(doc, dict) else None
    if s is None:
        raise NotApplicable("the health snapshot is not shown to this caller")
    if s["active"] != 0 or s["admitted"] != s["completed"] + s["failed"] + s["cancelled"]:
        raise CheckFailure("scheduler_accounting", "active 0, admitted = completed + failed + cancelled", s)


METRIC_FAMILIES = {
    "colibri_scheduler_active": "gauge", "colibri_scheduler_queued": "gauge", "colibri_scheduler_capacity": "gauge",
    "colibri_scheduler_max_queue": "gauge", "colibri_scheduler_admitted": "counter",
    "colibri_scheduler_completed": "counter", "colibri_scheduler_failed": "counter",
    "colibri_scheduler_rejected": "counter", "colibri_scheduler_timed_out": "counter",
    "colibri_scheduler_abandoned": "counter",
    "colibri_scheduler_cancelled": "counter", "colibri_scheduler_queue_wait_seconds": "histogram",
    "colibri_scheduler_slot_duration_seconds": "histogram", "colibri_scheduler_first_output_seconds": "histogram",
    "colibri_scheduler_engine_call_seconds": "histogram"}
BUCKET_LABELS = ["0.001", "0.01", "0.05", "0.1", "0.5", "1.0", "5.0", "10.0", "30.0", "60.0", "300.0", "+Inf"]


def _metrics(ex: Exchange) -> dict[str, Any]:
    """The colibri_scheduler_* families of a /metrics answer; Unsupported when the target
    serves no Prometheus text there (llama-server answers 501 unless started with --metrics)."""
    from prometheus_client.parser import text_string_to_metric_families

    if ex.status != 200:
        raise Unsupported(f"the target's /metrics answers {ex.status}")
    try:
        return {f.name: f for f in text_string_to_metric_families(ex.body.decode("utf-8"))
                if f.name.startswith("colibri_scheduler_")}
    except (ValueError, UnicodeDecodeError) as e:
        raise Unsupported(f"the target's /metrics is no Prometheus text ({e})") from None


def metrics_series(ctx: CheckContext) -> None:
    fams = _metrics(ctx.exchange)
    got = {n: f.type for n, f in fams.items()}
    if got != METRIC_FAMILIES:
        raise CheckFailure("metrics_series", METRIC_FAMILIES, got)
    for f in fams.values():
        for s in f.samples:
            extra = set(s.labels) - {"le"}
            if extra:
                raise CheckFailure("metrics_series", "no label but le", (s.name, s.labels))
            if s.name.endswith("_created"):
                raise CheckFailure("metrics_series", "no _created series", s.name)
        if f.type == "histogram":
            les = [s.labels["le"] for s in f.samples if s.name.endswith("_bucket")]
            if [str(float(x)) if x != "+Inf" else x for x in les] != BUCKET_LABELS:
                raise CheckFailure("metrics_series", BUCKET_LABELS, les)


def counters(target: Any) -> dict[str, float]:
    ex = target.send("GET", "/metrics", None, {})
    try:
        fams = _metrics(ex)
    except Unsupported:
        return {}
    return {s.name: s.value for f in fams.values() for s in f.samples if s.name.endswith("_total")}


def metrics_unchanged(ctx: CheckContext) -> None:
    if not ctx.before.get("counters"):
        raise Unsupported("the target serves no colibri_scheduler_* counters to compare")
    after = counters(ctx.target)
    if after != ctx.before.get("counters"):
        raise CheckFailure("metrics_unchanged", ctx.before.get("counters"), after)


def profile_turns(ctx: CheckContext) -> None:
    """Send one chat turn, read /profile: that turn is there, with the id and the counts its
    own response gave (timings are only checked for sign: they are noise)."""
    chat = ctx.spec.endpoints["chat"]
    body = {"model": _model(ctx), "max_tokens": 8, "temperature": 0,
            "messages": [{"role": "user", "content": "Repeat exactly: profile me"}]}
    sent = ctx.target.send("POST", chat.path, json.dumps(body).encode(), {"Content-Type": "application/json"})
    if sent.status != 200:
        raise NotApplicable(f"the chat turn to profile answered {sent.status}")
    usage = sent.json().get("usage") or {}
    doc = ctx.target.send("GET", ctx.spec.endpoints["profile"].path, None, {}).json()
    turns = doc.get("turns") or []
    if len(turns) > doc.get("capacity", 0):
        raise CheckFailure("profile_turns", f"at most {doc.get('capacity')} turns", len(turns))
    if not turns:
        raise CheckFailure("profile_turns", "the chat turn just sent", "no turn")
    # its own turn: found by request id (other requests may have finished since, in a run with
    # --concurrency), or the newest when the response carried no id (rule err.request-id)
    rid = sent.header("x-request-id")
    last = next((t for t in reversed(turns) if t.get("request_id") == rid), turns[-1])
    want = {"request_id": rid or last.get("request_id"), "endpoint": chat.path, "outcome": "completed",
            "prompt": usage.get("prompt_tokens"), "completion": usage.get("completion_tokens"),
            "cached": (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)}
    got = {"request_id": last.get("request_id"), "endpoint": last.get("endpoint"), "outcome": last.get("outcome"),
           **(last.get("tokens") or {})}
    if got != want:
        raise CheckFailure("profile_turns", want, got)
    negative = {k: v for k, v in (last.get("seconds") or {}).items() if v is not None and v < 0}
    if negative:
        raise CheckFailure("profile_turns", "no negative phase time", negative)


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


def _model(ctx: CheckContext) -> str:
    return getattr(ctx.target, "model", None) or "colibri-tiny"


def model_listed(ctx: CheckContext) -> None:
    data = ctx.exchange.json().get("data")
    ids = [m.get("id") for m in data if isinstance(m, dict)] if isinstance(data, list) else []
    if _model(ctx) not in ids:
        raise CheckFailure("model_listed", f"{_model(ctx)!r} among the listed ids", ids[:20])


# ---- /v1/systemone (spec/85-systemone.yaml) ------------------------------------------

S1_TOL = 1e-4


def _s1(ctx: CheckContext, kind: str | None) -> list[tuple[str, dict[str, Any], Any]]:
    """(name, question, answer) for the request's questions of `kind` (None: all)."""
    questions = (ctx.body or {}).get("questions") or {}
    answers = ctx.exchange.json().get("answers")
    if not isinstance(answers, dict):
        raise CheckFailure("systemone answers", "an answers object", answers)
    return [(n, q, answers.get(n)) for n, q in questions.items() if kind is None or q.get("type") == kind]


def _distribution(check: str, name: str, probs: Any, keys: list[str]) -> list[float]:
    """The probabilities of one answer: exactly `keys`, in order, each in [0, 1], summing to 1."""
    if not isinstance(probs, dict) or list(probs) != keys:
        raise CheckFailure(check, f"{name}: probabilities over exactly {keys}, in request order", probs)
    p = list(probs.values())
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v <= 1 for v in p):
        raise CheckFailure(check, f"{name}: each probability a number in [0, 1]", p)
    if abs(sum(p) - 1) > S1_TOL:
        raise CheckFailure(check, f"{name}: probabilities summing to 1 +/- {S1_TOL}", sum(p))
    return [float(v) for v in p]


def _first_argmax(p: list[float]) -> int:
    """The most probable answer's index, the first on a tie."""
    return max(range(len(p)), key=lambda i: (p[i], -i))


def _close(check: str, what: str, want: float, got: Any) -> None:
    if not isinstance(got, (int, float)) or isinstance(got, bool) or abs(got - want) > S1_TOL:
        raise CheckFailure(check, f"{what} = {want:.6f} +/- {S1_TOL}", got)


def systemone_complete(ctx: CheckContext) -> None:
    """Every question answered, nothing else, in request order, each with its question's type."""
    names = list((ctx.body or {}).get("questions") or {})
    answers = ctx.exchange.json().get("answers")
    if not isinstance(answers, dict) or list(answers) != names:
        raise CheckFailure("systemone_complete", f"answers for exactly {names}, in order",
                           list(answers) if isinstance(answers, dict) else answers)
    for name, q, a in _s1(ctx, None):
        if not isinstance(a, dict) or a.get("type") != q.get("type"):
            raise CheckFailure("systemone_complete", f"{name}: an answer of type {q.get('type')!r}", a)


def systemone_choice(ctx: CheckContext) -> None:
    """choice: a distribution over the options, the first most probable chosen, and
    confidence = clip((p_max - 1/k) / (1 - 1/k), 0, 1) (1 when k is 1)."""
    for name, q, a in _s1(ctx, "choice"):
        options = list(q.get("criteria") or {})
        p = _distribution("systemone_choice", name, (a or {}).get("probabilities"), options)
        best = _first_argmax(p)
        if a.get("choice") != options[best]:
            raise CheckFailure("systemone_choice", f"{name}: choice = the first most probable option "
                               f"{options[best]!r}", a.get("choice"))
        k = len(p)
        want = 1.0 if k == 1 else min(1.0, max(0.0, (p[best] - 1 / k) / (1 - 1 / k)))
        _close("systemone_choice", f"{name}: confidence", want, a.get("confidence"))


def systemone_score(ctx: CheckContext) -> None:
    """score: a distribution over levels "0".."k-1", score = sum i * p_i, the legend echoing the
    levels, and confidence = max(0, 1 - E|i - argmax| / D) with D the mean |i - (k-1)/2|."""
    for name, q, a in _s1(ctx, "score"):
        levels = list(q.get("criteria") or [])
        keys = [str(i) for i in range(len(levels))]
        p = _distribution("systemone_score", name, (a or {}).get("probabilities"), keys)
        _close("systemone_score", f"{name}: score", sum(i * v for i, v in enumerate(p)), a.get("score"))
        if a.get("legend") != dict(zip(keys, levels, strict=True)):
            raise CheckFailure("systemone_score", f"{name}: legend {dict(zip(keys, levels, strict=True))}",
                               a.get("legend"))
        k, best = len(p), _first_argmax(p)
        spread = sum(abs(i - (k - 1) / 2) for i in range(k)) / k
        want = 1.0 if k == 1 else max(0.0, 1 - sum(v * abs(i - best) for i, v in enumerate(p)) / spread)
        _close("systemone_score", f"{name}: confidence", want, a.get("confidence"))


def systemone_noul(ctx: CheckContext) -> None:
    """noul: P(true), a number in [0, 1]."""
    for name, _, a in _s1(ctx, "noul"):
        v = (a or {}).get("noul")
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not 0 <= v <= 1:
            raise CheckFailure("systemone_noul", f"{name}: noul = P(true) in [0, 1]", v)


def systemone_entropy(ctx: CheckContext) -> None:
    """colibri: entropy = -sum p ln p of each answer's distribution (noul: P(true), P(false)) in
    nats, and entropy_normalized = entropy / ln k (0 when k is 1)."""
    for name, q, a in _s1(ctx, None):
        a = a or {}
        p = [a["noul"], 1 - a["noul"]] if q.get("type") == "noul" else list((a.get("probabilities") or {}).values())
        h = -sum(v * math.log(v) for v in p if v > 0)
        _close("systemone_entropy", f"{name}: entropy", h, a.get("entropy"))
        _close("systemone_entropy", f"{name}: entropy_normalized", h / math.log(len(p)) if len(p) > 1 else 0.0,
               a.get("entropy_normalized"))


def systemone_usage(ctx: CheckContext) -> None:
    """usage.input_tokens an integer > 0 (prompts read), output_tokens 0 (nothing generated)."""
    u = ctx.exchange.json().get("usage")
    if not isinstance(u, dict) or not isinstance(u.get("input_tokens"), int) or u["input_tokens"] < 1 \
            or u.get("output_tokens") != 0:
        raise CheckFailure("systemone_usage", "usage {input_tokens > 0, output_tokens: 0}", u)


def systemone_prefix_reused(ctx: CheckContext) -> None:
    """colibri: with two or more questions the state's prompt prefix is computed once:
    usage.input_tokens_details.cached_tokens counts at least one reused token per later question."""
    n = len((ctx.body or {}).get("questions") or {})
    cached = ((ctx.exchange.json().get("usage") or {}).get("input_tokens_details") or {}).get("cached_tokens")
    if not isinstance(cached, int) or cached < n - 1:
        raise CheckFailure("systemone_prefix_reused", f"cached_tokens >= {n - 1} for {n} questions", cached)


def systemone_labels(ctx: CheckContext) -> None:
    """colibri: /health says, per question type, which labels the model offers."""
    s1 = ctx.exchange.json().get("systemone")
    want = {"choice": ("labels", "max_options"), "score": ("labels", "max_levels"), "noul": ("labels", "available")}
    if not isinstance(s1, dict) or any(not isinstance(s1.get(t), dict) or not all(k in s1[t] for k in ks)
                                       for t, ks in want.items()):
        raise CheckFailure("systemone_labels", "a systemone object: choice {labels, max_options}, score {labels, "
                           "max_levels}, noul {labels, available}", s1)


LENGTH_REASONS = ("length", "max_tokens")
STOP_REASONS = ("stop", "end_turn", "stop_sequence", "tool_calls", "tool_use")


def _budget_and_count(ctx: CheckContext) -> tuple[int, int | None, str | None]:
    """The request's token budget, the completion tokens the usage reports (None when the
    response carries no usage) and the finish reason."""
    body = ctx.body or {}
    budget = body.get("max_completion_tokens") or body.get("max_tokens")
    if not isinstance(budget, int):
        raise NotApplicable("the request sets no token budget")
    ex = ctx.exchange
    count = None
    if ex.is_sse:
        for d in _data_events(ex):
            u = d.get("usage") or (d.get("message") or {}).get("usage") if isinstance(d, dict) else None
            if isinstance(u, dict):
                count = u.get("completion_tokens", u.get("output_tokens", count))
    else:
        u = ex.json().get("usage") or {}
        count = u.get("completion_tokens", u.get("output_tokens"))
    return budget, count, answer(ex, ctx.endpoint).finish


def finish_matches_usage(ctx: CheckContext) -> None:
    """The finish reason agrees with the tokens used: `length` exactly when the budget was
    spent, a stop reason when the answer ended before it; never more tokens than the budget."""
    budget, count, finish = _budget_and_count(ctx)
    if count is None:
        if finish is None:
            raise CheckFailure("finish_matches_usage", "a finish reason", None)
        return
    if count > budget:
        raise CheckFailure("finish_matches_usage", f"at most {budget} completion tokens", count)
    if finish in LENGTH_REASONS and count != budget:
        raise CheckFailure("finish_matches_usage", f"{finish!r} only when all {budget} tokens were used", count)
    if count < budget and finish not in STOP_REASONS:
        raise CheckFailure("finish_matches_usage", f"a stop reason for an answer of {count} < {budget} tokens", finish)


def finish_consistent(ctx: CheckContext) -> None:
    budget, count, finish = _budget_and_count(ctx)
    if count is None or count > budget:
        return  # an overspent budget is the ceiling rule's verdict, not this one's
    finish_matches_usage(ctx)


def budget_respected(ctx: CheckContext) -> None:
    """Like finish_matches_usage, for vectors whose prompt should run past the budget: when the
    model ended first, the ceiling was not exercised and the result says so."""
    finish_matches_usage(ctx)
    budget, count, finish = _budget_and_count(ctx)
    if count is not None and count < budget:
        raise NotApplicable(f"the model ended after {count} of {budget} tokens; the ceiling was not reached")


def stop_truncates(ctx: CheckContext) -> None:
    """With a stop sequence the answer is the same request's answer without it, cut just before
    the first occurrence (temperature 0). When the answer without it never contains a stop
    sequence, the model did not exercise the rule."""
    stops = _stops(ctx.body)
    assert ctx.body is not None
    probe = {k: v for k, v in ctx.body.items() if k not in ("stop", "stop_sequences", "stream", "stream_options")}
    free = ctx.resend(probe)
    if free.status != 200:
        raise CheckFailure("stop_truncates", "200 for the same request without stop", free.status)
    text = answer(free, ctx.endpoint).content
    hits = [(text.find(s), s) for s in stops if s and s in text]
    if not hits:
        raise NotApplicable(f"without a stop sequence the model wrote {text[:80]!r}, which contains none of {stops}")
    at, matched = min(hits)
    got = answer(ctx.exchange, ctx.endpoint)
    if got.content != text[:at]:
        raise CheckFailure("stop_truncates", text[:at], got.content)
    if ctx.endpoint == "messages":
        doc = ctx.exchange.json() if not ctx.exchange.is_sse else {}
        if got.finish != "stop_sequence" or (doc and doc.get("stop_sequence") != matched):
            raise CheckFailure("stop_truncates", f"stop_reason stop_sequence, stop_sequence {matched!r}",
                               (got.finish, doc.get("stop_sequence")))
    elif got.finish != "stop":
        raise CheckFailure("stop_truncates", "finish_reason stop", got.finish)


def _vanished(ctx: CheckContext, a: Answer) -> str | None:
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


def _readable_answer(ctx: CheckContext) -> Answer:
    """The answer, for a precondition: one that cannot be read at all cannot show whether the
    model did the thing (the framing rules judge the unreadable stream)."""
    try:
        return answer(ctx.exchange, ctx.endpoint)
    except CheckFailure as f:
        raise NotApplicable(f"the answer could not be read ({f.actual})") from None


def stop_text_generated(ctx: CheckContext) -> None:
    """Precondition of the stop rules that judge what happens around a match: the same request
    without its stop sequences (unary) writes one of them, or ends in a start of one (the text a
    stream holds back); else the rule was never exercised (a canned reply, a model that wrote
    something else) and passing it would say nothing."""
    stops = [s for s in _stops(ctx.body) if s]
    assert ctx.body is not None
    probe = {k: v for k, v in ctx.body.items() if k not in ("stop", "stop_sequences", "stream", "stream_options")}
    free = ctx.resend(probe)
    if free.status != 200:
        raise CheckFailure("stop_text_generated", "200 for the same request without stop", free.status)
    text = answer(free, ctx.endpoint).content.rstrip()
    if not any(s in text or any(text.endswith(s[:n]) for n in range(1, len(s))) for s in stops):
        raise NotApplicable(f"without a stop sequence the answer is {text[:80]!r}: it neither contains nor ends "
                            f"in a start of any of {stops}, so nothing had to be cut or held back")


def tool_call_made(ctx: CheckContext) -> None:
    """Precondition of the tool-call rules: the model called a tool (else INCONCLUSIVE)."""
    a = _readable_answer(ctx)
    if not a.tool_calls:
        vanished = _vanished(ctx, a)
        if vanished:
            raise CheckFailure("tool_call_made", "the model's output back as a call or as text", vanished)
        raise no_call(a.content)
    if a.finish in CUT_OFF:
        raise cut_off()


def tool_call_attempted(ctx: CheckContext) -> None:
    """Precondition of a rule about where call markup goes: a call was parsed, or its markup
    reached content (the leak such a rule fails; it is no reason to call the run vacuous)."""
    a = _readable_answer(ctx)
    if not a.tool_calls and not any(m in a.content for m in TOOL_CALL_MARKUP):
        raise NotApplicable("the model made no tool call and wrote no call markup")


def reasoning_attempted(ctx: CheckContext) -> None:
    """Precondition of a rule about where reasoning goes: the answer carries reasoning, or its
    markup reached content."""
    a = _readable_answer(ctx)
    if not a.reasoning.strip() and not any(m in a.content for m in REASONING_MARKUP):
        raise NotApplicable("the answer carries no reasoning and no reasoning markup (the model did not reason)")


def reasoning_made(ctx: CheckContext) -> None:
    """Precondition of the reasoning-output rules: the answer carries reasoning (else INCONCLUSIVE)."""
    if not _readable_answer(ctx).reasoning.strip():
        raise NotApplicable("the answer carries no reasoning (the model or server did not reason)")


def stream_one_id(ctx: CheckContext) -> None:
    ids = {d.get("id") for d in _stream(ctx, "stream_one_id") if isinstance(d, dict)}
    if len(ids) != 1 or None in ids:
        raise CheckFailure("stream_one_id", "one id on every chunk", sorted(map(str, ids))[:5])


def stream_error_event(ctx: CheckContext) -> None:
    events = ctx.exchange.events()
    _stream(ctx, "stream_error_event")
    if len(events) < 2:
        raise CheckFailure("stream_error_event", "content, then an error event", [e.data[:60] for e in events])
    last = events[-1]
    try:
        doc = last.json()
    except ValueError:
        raise CheckFailure("stream_error_event", "a JSON error event last", last.data[:120]) from None
    schema = "error.anthropic.json" if ctx.endpoint == "messages" else "error.openai.json"
    if ctx.endpoint == "messages" and last.event != "error":
        raise CheckFailure("stream_error_event", "event: error last", last.event)
    if not validator(schema).is_valid(doc):
        raise CheckFailure("stream_error_event", f"the last event's data valid against {schema}", last.data[:200])


#: Checks evaluate runs before the JSON expectations: the model must have done what the rest
#: of the vector is about.
PRECONDITIONS = ("tool_call_made", "reasoning_made", "stop_text_generated", "tool_call_attempted",
                 "reasoning_attempted")


#: Checks that need a live server process (sockets, restarts) or a model of their own, run by
#: the tests named in their descriptions.
LIVE_ONLY = frozenset({"bound_to_loopback", "disconnect_cancels", "slow_client_dropped",
                       "prefix_reused_after_restart", "tool_parser_vectors", "full_pool_refused_at_once",
                       "connection_cap_refused", "idle_connection_kept", "differential_agreement",
                       "template_refusal_named", "loop_not_stalled", "chunked_body_bounded",
                       "request_buffer_bounded", "connection_cap_at_accept", "refused_without_drain",
                       "parser_errors_enveloped", "load_run"})


#: Why each of them cannot run in a rule run, in or out of process: what it needs beyond
#: requests to a running server, and where it is checked instead.
LIVE_ONLY_WHY = {
    "bound_to_loopback": "needs to start the server itself to see the address it binds (tests/test_live_server.py)",
    "disconnect_cancels": "needs to drop a connection mid-answer and read colibri's own slot counters "
                          "(tests/test_disconnect.py)",
    "slow_client_dropped": "needs a server started with a short read deadline (tests/test_admission.py)",
    "prefix_reused_after_restart": "needs to restart the server (tests/test_kv_store.py)",
    "tool_parser_vectors": "feeds the server's tool-call parsers directly, not over HTTP (tests/test_tool_parsers.py)",
    "full_pool_refused_at_once": "needs a server started with one slot, no queue and one thread (tests/test_admission.py)",
    "connection_cap_refused": "needs a server started with a small --max-client-connections (tests/test_admission.py)",
    "idle_connection_kept": "needs a server started with a short --idle-timeout (tests/test_admission.py)",
    "differential_agreement": "runs in `colibri-conform differential`, which compares servers on one model",
    "load_run": "runs in `colibri-conform load`, which judges every answer of many clients at once",
    "template_refusal_named": "needs a model whose own template refuses some messages (tests/test_chat_template.py)",
    "loop_not_stalled": "needs raw sockets that stall mid-request (tests/test_hostile_clients.py)",
    "chunked_body_bounded": "streams a chunked body past 4 MiB over a raw socket (tests/test_hostile_clients.py)",
    "request_buffer_bounded": "holds many partial bodies open from one address (tests/test_hostile_clients.py)",
    "connection_cap_at_accept": "opens 1,000 idle connections from one address (tests/test_hostile_clients.py)",
    "refused_without_drain": "announces an oversized body over a raw socket (tests/test_hostile_clients.py)",
    "parser_errors_enveloped": "sends malformed HTTP that an HTTP client library will not send "
                               "(tests/test_hostile_clients.py)",
}


def live_only_reason(names: Any) -> str:
    """The skip reason of a vector using these LIVE_ONLY checks."""
    return "; ".join(f"{n} {LIVE_ONLY_WHY.get(n, 'is checked by a test of its own (see spec/checks.yaml)')}"
                     for n in sorted(names))


def _live_only(name: str) -> Callable[[CheckContext], None]:
    def check(ctx: CheckContext) -> None:
        raise NotApplicable(live_only_reason([name]))
    return check


CHECKS: dict[str, Callable[[CheckContext], None]] = {f.__name__: f for f in (
    error_envelope, no_server_error, response_schema, usage_arithmetic, one_finish_reason, role_first, done_sentinel, sse_framing,
    usage_chunk_last, tool_call_delta_index, arguments_json_string, logprob_join, text_offset_chars, no_stop_text,
    stream_equals_unary, anthropic_usage, anthropic_event_order, reasoning_not_in_content, request_id_header,
    prompt_has_required_instruction, prompt_forced_tool_applied, reasoning_present, reasoning_absent,
    continuation_not_repeated, prompt_ends_with_generation_cue, prompt_specials_literal, no_replacement_char, keepalive_seen, repeatable,
    scheduler_accounting, metrics_series, metrics_unchanged, profile_turns, tool_calls_offered, tool_markup_offered,
    tool_names_declared, model_listed,
    finish_matches_usage, budget_respected, stop_truncates, stop_text_generated, tool_call_made, tool_call_attempted,
    reasoning_attempted, reasoning_made, stream_one_id,
    stream_error_event, finish_consistent, systemone_complete, systemone_choice, systemone_score, systemone_noul,
    systemone_entropy, systemone_usage, systemone_prefix_reused, systemone_labels)}
for _name in LIVE_ONLY:
    CHECKS[_name] = _live_only(_name)


def evaluate(ctx: CheckContext) -> None:
    """Raise CheckFailure on the first unmet expectation of the vector; NotApplicable when a
    named check cannot run here."""
    ex, e = ctx.exchange, ctx.expect
    if ex.status != e["status"]:
        raise CheckFailure("status", e["status"], f"{ex.status} {ex.text(300)}")
    if ex.status >= 400 and ("code" in e or "param" in e or "type" in e):
        try:
            doc = ex.json()
        except ValueError:
            raise CheckFailure("error body", "JSON", ex.body[:200]) from None
        err = doc.get("error") or {}
        if "type" in e and err.get("type") != e["type"]:
            raise CheckFailure("error type", e["type"], err.get("type"))
        if doc.get("type") != "error":  # the OpenAI envelope carries code and param
            for k in ("code", "param"):
                if k in e and err.get(k) != e[k]:
                    raise CheckFailure(f"error {k}", e[k], err.get(k))
    for name in e.get("checks", []):
        if name in PRECONDITIONS:
            CHECKS[name](ctx)
    if e.get("json") or e.get("absent"):
        doc = ex.json()
        for path, want in (e.get("json") or {}).items():
            got = get(doc, path)
            if got is MISSING and want is None and not ctx.strict:
                continue  # null means absent: a left-out nullable key reads as null in every SDK
            if got is MISSING or got != want:
                raise CheckFailure(f"json {path}", want, "(absent)" if got is MISSING else got)
        for path in e.get("absent", []):
            if get(doc, path) is not MISSING:
                raise CheckFailure(f"absent {path}", "absent", get(doc, path))
    for name, want in (e.get("headers") or {}).items():
        got = ex.header(name)
        if got is None or (want is not None and got != want and not got.startswith(str(want) + ";")):
            raise CheckFailure(f"header {name}", want if want is not None else "present", got)
    for name in e.get("absent_headers", []):
        if ex.header(name) is not None:
            raise CheckFailure(f"header {name}", "absent", ex.header(name))
    for name in e.get("checks", []):
        if name not in PRECONDITIONS:
            CHECKS[name](ctx)


def invariants(ctx: CheckContext) -> list[tuple[str, CheckFailure]]:
    """Run the invariants of spec/checks.yaml that apply to this response, whatever the vector
    is about; each failure is returned with the rule whose `invariant` field states it on this
    endpoint (not the vector's own rule, whose verdict stays its own)."""
    ex, ep = ctx.exchange, ctx.spec.endpoints[ctx.endpoint]
    path_ok = ex.path == ep.path or (ctx.endpoint == "model" and ex.path.startswith("/v1/models/"))
    if not path_ok or ex.method != ep.method or ex.status == 0:
        return []
    names: list[str] = []
    if 400 <= ex.status < 600:
        names += ["error_envelope", "no_server_error"]
    elif ex.status == 200 and ex.is_sse and _ends_in_error(ex):
        names.append("sse_framing")  # a stream that failed after its 200: stream.error-after-commit judges it
    elif ex.status == 200 and ex.is_sse and ctx.endpoint == "responses":
        names += ["sse_framing", "response_schema", "responses_stream_sequence", "responses_stream_brackets",
                  "responses_stream_assembly"]
    elif ex.status == 200 and ex.is_sse:
        names += ["sse_framing", "response_schema"]
        names += ["anthropic_event_order"] if ctx.endpoint == "messages" else ["stream_one_id"]
    elif ex.status == 200:
        names.append("response_schema")
        if ctx.endpoint == "responses":
            names.append("responses_usage")
        doc = _safe_json_text(ex.body.decode("utf-8", "replace"))
        if ctx.endpoint in ("chat", "completions") and isinstance(doc, dict) and doc.get("usage"):
            names.append("usage_arithmetic")
        if ctx.endpoint == "systemone" and isinstance(doc, dict) and isinstance(ctx.body, dict):
            names += ["systemone_complete", "systemone_choice", "systemone_score", "systemone_noul"]
    bare = CheckContext(ctx.spec, ctx.vector, ex, ctx.body, ctx.target, expect={"status": ex.status},
                        strict=ctx.strict)
    out = []
    for name in names:
        rule = ctx.spec.invariant_owner(name, ctx.endpoint)  # spec/: the rule's `invariant` field
        owner = rule.id if rule is not None else None
        if owner is None or owner == ctx.vector.rule_id:
            continue
        try:
            CHECKS[name](bare)
        except CheckFailure as f:
            out.append((owner, f))
        except BodyNotJson as e:
            out.append((owner, CheckFailure(name, "a JSON body", str(e))))
        except (NotApplicable, KeyError, TypeError, ValueError, AttributeError, IndexError):
            continue
    return out


def _ends_in_error(ex: Exchange) -> bool:
    events = ex.events()
    if not events:
        return False
    doc = _safe_json_text(events[-1].data)
    if isinstance(doc, dict) and doc.get("type") == "response.failed":
        return True
    return events[-1].event == "error" or (isinstance(doc, dict) and "error" in doc and "choices" not in doc
                                           and "response" not in doc)


def _safe_json_text(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


def _register_responses_checks() -> None:
    from .responses_checks import CHECKS as responses  # its own module; it imports this one
    from .tool_checks import CHECKS as tool_checks  # the same: checks of calls and reasoning splits

    CHECKS.update(responses)
    CHECKS.update(tool_checks)


_register_responses_checks()
