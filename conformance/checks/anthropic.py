"""Checks of the Anthropic Messages shapes: usage in the mode asked for, and the event order of
a stream (content blocks opened, filled and closed one at a time)."""
from __future__ import annotations

from typing import Any

from .core import CheckContext, CheckFailure, stream_data


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
        events = stream_data(ctx, "anthropic_usage")  # JSON for stream: true is no stream at all
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
    stream_data(ctx, "anthropic_event_order")
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


#: The checks of this module, registered by name in conformance/checks/__init__.py.
CHECKS = (anthropic_usage, anthropic_event_order)
