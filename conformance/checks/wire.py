"""Checks of what every endpoint's answer shares on the wire: the error envelope, the response
schema (under the run's contract), SSE framing, one id per stream, the request id and
keep-alive."""
from __future__ import annotations

from typing import Any

from colibri.schemas import validator
from colibri.server.errors import envelope_for

from .core import CheckContext, CheckFailure, data_events, stream_data


def error_envelope(ctx: CheckContext) -> None:
    ex = ctx.exchange
    if ex.status < 400:
        raise CheckFailure("error_envelope", "an error status", ex.status)
    anthropic = envelope_for(ex.path) == "anthropic"  # the path's envelope, as the server chooses it
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
        for d in data_events(ex):
            if isinstance(d, dict) and isinstance(d.get("response"), dict):
                errs = _schema_errors(ctx, v, d["response"])
                if errs:
                    raise CheckFailure("response_schema", schema, f"{errs[0].message} in {d.get('type')}")
        return
    schema = {"chat": "chat.chunk.json", "completions": "completions.response.json", "messages": "messages.event.json"}[ctx.endpoint]
    v = validator(schema)
    for d in data_events(ex):
        errs = _schema_errors(ctx, v, d)
        if errs:
            raise CheckFailure("response_schema", schema, f"{errs[0].message} in {d}")


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


def stream_one_id(ctx: CheckContext) -> None:
    ids = {d.get("id") for d in stream_data(ctx, "stream_one_id") if isinstance(d, dict)}
    if len(ids) != 1 or None in ids:
        raise CheckFailure("stream_one_id", "one id on every chunk", sorted(map(str, ids))[:5])


def stream_error_event(ctx: CheckContext) -> None:
    events = ctx.exchange.events()
    stream_data(ctx, "stream_error_event")
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


def request_id_header(ctx: CheckContext) -> None:
    if not ctx.exchange.header("x-request-id"):
        raise CheckFailure("request_id_header", "an x-request-id header", None)


def keepalive_seen(ctx: CheckContext) -> None:
    ex = ctx.exchange
    if not ex.comments() and not any(e.event == "ping" for e in ex.events()):
        raise CheckFailure("keepalive_seen", "an SSE comment or ping", "none")


#: The checks of this module, registered by name in conformance/checks/__init__.py.
CHECKS = (error_envelope, no_server_error, response_schema, sse_framing, stream_one_id, stream_error_event,
          request_id_header, keepalive_seen)
