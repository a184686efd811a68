"""Checks of the OpenAI shapes (spec/10-chat.yaml, 20-completions.yaml, 30-streaming.yaml,
50-logprobs.yaml): usage arithmetic, the chunk sequence of a chat stream, logprobs, and the
model list."""
from __future__ import annotations

from typing import Any

from .core import CheckContext, CheckFailure, data_events, stream_data, target_model


def usage_arithmetic(ctx: CheckContext) -> None:
    ex = ctx.exchange
    docs = [d for d in data_events(ex) if d.get("usage")] if ex.is_sse else [ex.json()]
    if not docs:
        raise CheckFailure("usage_arithmetic", "a usage object", None)
    u = docs[-1]["usage"]
    p, c, t = u.get("prompt_tokens"), u.get("completion_tokens"), u.get("total_tokens")
    if not all(isinstance(x, int) and x >= 0 for x in (p, c, t)) or p + c != t:
        raise CheckFailure("usage_arithmetic", "total = prompt + completion, non-negative integers", u)


def one_finish_reason(ctx: CheckContext) -> None:
    chunks = [d for d in stream_data(ctx, "one_finish_reason") if d.get("choices")]
    reasons = [(i, ch["finish_reason"]) for i, d in enumerate(chunks) for ch in d["choices"] if ch.get("finish_reason")]
    if len(reasons) != 1 or reasons[0][0] != len(chunks) - 1:
        raise CheckFailure("one_finish_reason", "exactly one finish_reason, in the last choice chunk",
                           f"{len(reasons)} at chunk(s) {[i for i, _ in reasons]} of {len(chunks)}")


def role_first(ctx: CheckContext) -> None:
    chunks = stream_data(ctx, "role_first")
    role = chunks[0]["choices"][0]["delta"].get("role") if chunks and chunks[0].get("choices") else None
    if role != "assistant":
        raise CheckFailure("role_first", "assistant", role)


def done_sentinel(ctx: CheckContext) -> None:
    stream_data(ctx, "done_sentinel")
    events = ctx.exchange.events()
    last = events[-1].data if events else None
    if last != "[DONE]":
        raise CheckFailure("done_sentinel", "[DONE]", last)


def usage_chunk_last(ctx: CheckContext) -> None:
    chunks = stream_data(ctx, "usage_chunk_last")
    with_usage = [i for i, d in enumerate(chunks) if d.get("usage") is not None]
    if with_usage != [len(chunks) - 1] or chunks[-1].get("choices") != []:
        raise CheckFailure("usage_chunk_last", "one final usage chunk with choices []", with_usage)
    # OpenAI sends usage: null on every other chunk; a left-out key reads the same in every
    # SDK, so only this project's contract asks for the key itself.
    if ctx.strict and any("usage" not in d for d in chunks[:-1]):
        raise CheckFailure("usage_chunk_last", "usage: null on every other chunk", "a chunk without the key")


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


def model_listed(ctx: CheckContext) -> None:
    data = ctx.exchange.json().get("data")
    ids = [m.get("id") for m in data if isinstance(m, dict)] if isinstance(data, list) else []
    if target_model(ctx) not in ids:
        raise CheckFailure("model_listed", f"{target_model(ctx)!r} among the listed ids", ids[:20])


#: The checks of this module, registered by name in conformance/checks/__init__.py.
CHECKS = (usage_arithmetic, one_finish_reason, role_first, done_sentinel, usage_chunk_last, logprob_join,
          text_offset_chars, model_listed)
