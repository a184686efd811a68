"""The one responder every generating endpoint answers through, and the resource base they
share: parse (body, validation) → translate (the API's own function, to a GenerationRequest)
→ `Service.start` → format (the API's unary object or stream chunks) → `respond`.

`respond` sends a started generation as JSON or as server-sent events. The 200 is committed
only once the engine has accepted the prompt (Service.start returned); a stream that fails
after it ends with an error event in the endpoint's envelope (rule stream.error-after-commit),
and a client that stops reading cancels the work.
"""
from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

from .body import read_body
from .errors import ApiError, error
from .generation import Delta, Generation, Outcome
from .service import Service

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
log = logging.getLogger("colibri.server")


def dumps(obj: Any) -> bytes:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode()


def sse(obj: Any) -> bytes:
    return b"data: " + dumps(obj) + b"\n\n"


class Resource:
    """An endpoint with a JSON body: `endpoint` names its row of spec/endpoints.yaml (its
    error envelope) and its validator, compiled from spec/ at start-up."""

    endpoint = ""

    def __init__(self, service: Service):
        self.svc = service
        self.envelope = service.spec.endpoints[self.endpoint].envelope
        self.validator = service.validators[self.endpoint]

    def parse(self, req: Any) -> dict[str, Any]:
        """The request's body, read (body.py) and checked by the endpoint's rule tables: the
        first failure is a named 4xx carrying its rule id."""
        body = read_body(req)
        failure = self.validator.first_failure(body)
        if failure is not None:
            raise error(failure.code, failure.message, param=failure.param, rule_id=failure.rule_id)
        return body

    def respond(self, resp: Any, gen: Generation, stream: bool, unary: Callable[[Outcome], Any],
                chunks: Callable[[Generation], Iterator[bytes]], on_delta: Callable[[Delta], None] | None = None) -> None:
        """Answer a started generation: `unary(outcome)` as JSON, or `chunks(gen)` as the event
        stream; `on_delta` sees each delta of a JSON answer as a stream would."""
        assert gen.accepted is not None, "Service.start first"
        resp.set_header("x-colibri-queue-wait-ms", str(int(round(gen.accepted.queue_wait * 1000))))
        if stream:
            resp.content_type = "text/event-stream"
            for k, v in SSE_HEADERS.items():
                resp.set_header(k, v)
            resp.stream = guarded(gen, chunks(gen), self.envelope)
            return
        try:
            outcome = gen.run(on_delta)
            t0 = time.perf_counter()
            resp.data = dumps(unary(outcome))
            gen.task.turn.text += time.perf_counter() - t0
        finally:  # the server writes a JSON body after we return: no write time is measured
            gen.record()
        resp.content_type = "application/json"


def guarded(gen: Generation, it: Iterator[bytes], envelope: str = "openai") -> Iterator[bytes]:
    """Cancel the request when the client stops reading (the WSGI server closes the iterator);
    end a stream whose generation fails after the 200 with an error event in the endpoint's
    format instead of cutting it off (rule stream.error-after-commit)."""
    finished = False
    turn = gen.task.turn
    try:
        for chunk in it:
            t0 = time.perf_counter()
            yield chunk  # the WSGI server writes it before asking for the next
            turn.write += time.perf_counter() - t0
        finished = True
    except Exception as exc:  # noqa: BLE001 - the status is sent; only an event can still tell
        err = exc if isinstance(exc, ApiError) else error("engine_error")
        if not isinstance(exc, ApiError):
            log.exception("stream failed after its 200 (%s)", gen.task.request_id or "-")
        if envelope == "anthropic":
            yield b"event: error\ndata: " + dumps(err.to_anthropic()) + b"\n\n"
        else:
            yield b"data: " + dumps(err.to_openai()) + b"\n\n"
        finished = True
    finally:
        if not finished:
            gen.cancel()
        gen.record()
