"""Checks of what the server did with the model's output, on every generating endpoint: stop
sequences, token budgets and finish reasons, stream and unary alike, reasoning kept out of
the answer, repeatable greedy answers; and the preconditions that say whether the model did
what such a rule is about."""
from __future__ import annotations

from typing import Any

from .answers import REASONING_MARKUP, TOOL_CALL_MARKUP, answer, readable_answer
from .core import CheckContext, CheckFailure, NotApplicable, data_events


def stops_of(body: dict[str, Any] | None) -> list[str]:
    body = body or {}
    s = body.get("stop", body.get("stop_sequences"))
    return [s] if isinstance(s, str) else list(s or [])


def no_stop_text(ctx: CheckContext) -> None:
    a = answer(ctx.exchange, ctx.endpoint)
    for s in stops_of(ctx.body):
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
        for d in data_events(ex):
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
    stops = stops_of(ctx.body)
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


def stop_text_generated(ctx: CheckContext) -> None:
    """Precondition of the stop rules that judge what happens around a match: the same request
    without its stop sequences (unary) writes one of them, or ends in a start of one (the text a
    stream holds back); else the rule was never exercised (a canned reply, a model that wrote
    something else) and passing it would say nothing."""
    stops = [s for s in stops_of(ctx.body) if s]
    assert ctx.body is not None
    probe = {k: v for k, v in ctx.body.items() if k not in ("stop", "stop_sequences", "stream", "stream_options")}
    free = ctx.resend(probe)
    if free.status != 200:
        raise CheckFailure("stop_text_generated", "200 for the same request without stop", free.status)
    text = answer(free, ctx.endpoint).content.rstrip()
    if not any(s in text or any(text.endswith(s[:n]) for n in range(1, len(s))) for s in stops):
        raise NotApplicable(f"without a stop sequence the answer is {text[:80]!r}: it neither contains nor ends "
                            f"in a start of any of {stops}, so nothing had to be cut or held back")


def reasoning_not_in_content(ctx: CheckContext) -> None:
    a = answer(ctx.exchange, ctx.endpoint)
    for marker in REASONING_MARKUP + TOOL_CALL_MARKUP:
        if marker in a.content:
            raise CheckFailure("reasoning_not_in_content", f"no {marker} in content", a.content)


def reasoning_present(ctx: CheckContext) -> None:
    if not answer(ctx.exchange, ctx.endpoint).reasoning.strip():
        raise CheckFailure("reasoning_present", "non-empty reasoning", "")


def reasoning_absent(ctx: CheckContext) -> None:
    a = answer(ctx.exchange, ctx.endpoint)
    if a.reasoning:
        raise CheckFailure("reasoning_absent", "no reasoning", a.reasoning)


def reasoning_attempted(ctx: CheckContext) -> None:
    """Precondition of a rule about where reasoning goes: the answer carries reasoning, or its
    markup reached content."""
    a = readable_answer(ctx)
    if not a.reasoning.strip() and not any(m in a.content for m in REASONING_MARKUP):
        raise NotApplicable("the answer carries no reasoning and no reasoning markup (the model did not reason)")


def reasoning_made(ctx: CheckContext) -> None:
    """Precondition of the reasoning-output rules: the answer carries reasoning (else INCONCLUSIVE)."""
    if not readable_answer(ctx).reasoning.strip():
        raise NotApplicable("the answer carries no reasoning (the model or server did not reason)")


def answer_not_only_in_reasoning(ctx: CheckContext) -> None:
    """The turn's answer reaches content (or is a tool call): a parser that files the whole reply
    under reasoning leaves a client that shows `content` with nothing. A reply cut off by the
    token limit inside its reasoning has no answer yet, so it is no evidence."""
    a = answer(ctx.exchange, ctx.endpoint)
    if a.content.strip() or a.tool_calls:
        return
    if not a.reasoning.strip():
        raise NotApplicable("the model wrote nothing")
    if a.finish in ("length", "max_tokens"):
        raise NotApplicable("the reply was cut off inside its reasoning (finish length)")
    raise CheckFailure("answer_not_only_in_reasoning", "the answer in content, any reasoning beside it",
                       f"content {a.content!r}, reasoning {a.reasoning[:120]!r}")


def continuation_not_repeated(ctx: CheckContext) -> None:
    prefix = (ctx.body or {})["messages"][-1]["content"]
    a = answer(ctx.exchange, ctx.endpoint)
    if isinstance(prefix, str) and prefix and a.content.startswith(prefix):
        raise CheckFailure("continuation_not_repeated", f"an answer not starting with {prefix!r}", a.content)


def no_replacement_char(ctx: CheckContext) -> None:
    a = answer(ctx.exchange, ctx.endpoint)
    if "\ufffd" in a.content + a.reasoning:
        raise CheckFailure("no_replacement_char", "no U+FFFD", a.content)


def repeatable(ctx: CheckContext) -> None:
    assert ctx.body is not None
    again = ctx.resend(ctx.body)
    a, b = answer(ctx.exchange, ctx.endpoint), answer(again, ctx.endpoint)
    if (a.content, a.tool_calls, a.finish) != (b.content, b.tool_calls, b.finish):
        raise CheckFailure("repeatable", a, b)


#: The checks of this module, registered by name in conformance/checks/__init__.py.
CHECKS = (no_stop_text, stream_equals_unary, finish_matches_usage, finish_consistent, budget_respected,
          stop_truncates, stop_text_generated, reasoning_not_in_content, reasoning_present, reasoning_absent,
          reasoning_attempted, reasoning_made, answer_not_only_in_reasoning, continuation_not_repeated,
          no_replacement_char, repeatable)
