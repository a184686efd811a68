"""The named checks of spec/checks.yaml, and the evaluation of one vector's expectations.

A check is a plain function over a `CheckContext` (core.py); it raises `CheckFailure` carrying
what was expected and what was seen. The checks live in modules named for what they judge
(wire shapes every endpoint shares, the OpenAI and Anthropic shapes, /v1/responses, generation,
tool calls, prompts, operations, System One); each module lists its own in `CHECKS`, and
`CHECKS` here is the registry by name that the spec's vectors and invariants refer to.
`evaluate` runs a vector's expectations (status, error code/param/type, JSON paths, absent
paths, headers) and then its named checks; `invariants` runs the checks that hold for every
response of an endpoint.
"""
from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from colibri.spec.paths import MISSING, get

from ..exchange import BodyNotJson, Exchange
from . import anthropic, generation, live, openai, operations, prompts, responses, systemone, tools, wire
from .answers import Answer, answer
from .core import CheckContext, CheckFailure, NotApplicable, Unsupported
from .live import LIVE_ONLY, LIVE_ONLY_WHY, live_only_reason

__all__ = ["CHECKS", "LIVE_ONLY", "LIVE_ONLY_WHY", "PRECONDITIONS", "Answer", "Check", "CheckContext", "CheckFailure",
           "NotApplicable", "Unsupported", "answer", "evaluate", "invariants", "live_only_reason"]

Check = Callable[[CheckContext], None]


def _registry(*modules: Any) -> dict[str, Check]:
    """Every module's checks by name; a name registered twice is a load-time error, not a
    silent override."""
    out: dict[str, Check] = {}
    for module in modules:
        for check in module.CHECKS:
            if check.__name__ in out:
                raise RuntimeError(f"check {check.__name__} registered twice ({module.__name__})")
            out[check.__name__] = check
    return out


CHECKS = _registry(wire, openai, anthropic, generation, tools, prompts, operations, systemone, responses, live)

#: Checks evaluate runs before the JSON expectations: the model must have done what the rest
#: of the vector is about.
PRECONDITIONS = ("tool_call_made", "reasoning_made", "stop_text_generated", "tool_call_attempted",
                 "reasoning_attempted")


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
        doc = _json_or_none(ex.body.decode("utf-8", "replace"))
        if ctx.endpoint in ("chat", "completions") and isinstance(doc, dict) and doc.get("usage"):
            names.append("usage_arithmetic")
        if ctx.endpoint == "systemone" and isinstance(doc, dict) and isinstance(ctx.body, dict):
            names += ["systemone_complete", "systemone_choice", "systemone_score", "systemone_noul"]
    bare = CheckContext(ctx.spec, ctx.vector, ex, ctx.body, ctx.target, expect={"status": ex.status},
                        strict=ctx.strict)
    out: list[tuple[str, CheckFailure]] = []
    unread: Exception | None = None
    for name in names:
        rule = ctx.spec.invariant_owner(name, ctx.endpoint)  # spec/: the rule's `invariant` field
        owner = rule.id if rule is not None else None
        if owner is None:
            continue
        try:
            CHECKS[name](bare)
        except CheckFailure as f:
            out.append((owner, f))
        except BodyNotJson as e:
            out.append((owner, CheckFailure(name, "a JSON body", str(e))))
        except NotApplicable:
            continue
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as e:
            unread = unread or e
    if unread is not None and not out:  # out: some check, whoever owns it, failed this response
        # A check that cannot read a response no other check finds malformed has a bug (or a
        # case it does not know): the vector's ERROR says so, instead of a silent pass.
        raise unread
    # the vector's own rule keeps its own verdict: its invariant ran above only as evidence
    return [(owner, f) for owner, f in out if owner != ctx.vector.rule_id]


def _ends_in_error(ex: Exchange) -> bool:
    events = ex.events()
    if not events:
        return False
    doc = _json_or_none(events[-1].data)
    if isinstance(doc, dict) and doc.get("type") == "response.failed":
        return True
    return events[-1].event == "error" or (isinstance(doc, dict) and "error" in doc and "choices" not in doc
                                           and "response" not in doc)


def _json_or_none(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None
