"""/v1/chat/completions, /v1/completions and /v1/render: validated by the compiled tables,
answered as JSON or as server-sent events (the 200 is committed only once the engine has
accepted the prompt)."""
from __future__ import annotations

import json
import logging
import math
import time
import uuid
from collections.abc import Iterator
from typing import Any

from .body import read_body
from .disconnect import detector
from .errors import ApiError, error
from .generation import Generation, LogprobEntry, Outcome, now
from .prompt import from_openai_chat
from .service import Service
from .slots import conversation_digest, conversation_slot

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
log = logging.getLogger("colibri.server")


def _num(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None


def dumps(obj: Any) -> bytes:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode()


def sse(obj: Any) -> bytes:
    return b"data: " + dumps(obj) + b"\n\n"


def stops_of(body: dict[str, Any]) -> list[str]:
    stop = body.get("stop")
    return [stop] if isinstance(stop, str) else list(stop or [])


def tool_calls_json(calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
             "function": {"name": c["name"], "arguments": json.dumps(c["arguments"], ensure_ascii=False)}}
            for c in calls]


def usage(o: Outcome) -> dict[str, Any]:
    return {"prompt_tokens": o.prompt_tokens, "completion_tokens": o.completion_tokens,
            "total_tokens": o.prompt_tokens + o.completion_tokens,
            "prompt_tokens_details": {"cached_tokens": o.cached_tokens}}


def chat_logprobs(entries: list[LogprobEntry]) -> dict[str, Any]:
    return {"content": [{"token": e.token, "logprob": _num(e.logprob), "bytes": e.bytes,
                         "top_logprobs": [{"token": t, "logprob": _num(lp), "bytes": b} for t, lp, b in e.top]}
                        for e in entries], "refusal": None}


def completion_logprobs(entries: list[LogprobEntry]) -> dict[str, Any]:
    return {"tokens": [e.token for e in entries], "token_logprobs": [_num(e.logprob) for e in entries],
            "top_logprobs": [({t: _num(lp) for t, lp, _ in e.top} if e.logprob is not None else None)
                             for e in entries],
            "text_offset": [e.offset for e in entries]}


class ChunkWriter:
    """SSE chunks of one OpenAI stream: shared id/object/created/model, `usage: null` on every
    chunk when include_usage asked for a final usage chunk, and the closing [DONE]."""

    def __init__(self, cid: str, obj: str, created: int, model: str, include_usage: bool):
        self.head = {"id": cid, "object": obj, "created": created, "model": model}
        self.include_usage = include_usage

    def choice(self, fields: dict[str, Any], finish: str | None = None) -> bytes:
        c: dict[str, Any] = dict(self.head, choices=[{"index": 0, **fields, "logprobs": None, "finish_reason": finish}])
        if self.include_usage:
            c["usage"] = None
        return sse(c)

    def tail(self, o: Outcome) -> Iterator[bytes]:
        if self.include_usage:
            yield sse(dict(self.head, choices=[], usage=usage(o)))
        yield b"data: [DONE]\n\n"


class _Endpoint:
    def __init__(self, service: Service):
        self.svc = service

    #: How a stream that fails after its 200 says so (rule stream.error-after-commit).
    envelope = "openai"

    def _respond(self, resp: Any, gen: Generation, stream: bool, unary: Any, chunks: Any) -> None:
        gen.task.turn.stream = stream
        accepted = gen.start()
        resp.set_header("x-colibri-queue-wait-ms", str(int(round(accepted.queue_wait * 1000))))
        if stream:
            resp.content_type = "text/event-stream"
            for k, v in SSE_HEADERS.items():
                resp.set_header(k, v)
            resp.stream = _guarded(gen, chunks(gen), self.envelope)
        else:
            try:
                outcome = gen.run()
                t0 = time.perf_counter()
                resp.data = dumps(unary(outcome))
                gen.task.turn.text += time.perf_counter() - t0
            finally:  # the server writes a JSON body after we return: no write time is measured
                gen.record()
            resp.content_type = "application/json"


def _guarded(gen: Generation, it: Iterator[bytes], envelope: str = "openai") -> Iterator[bytes]:
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


class ChatResource(_Endpoint):
    def on_post(self, req: Any, resp: Any) -> None:
        body = read_body(req)
        self.svc.validate("chat", body)
        rendered, ids = self.svc.render(from_openai_chat(body), context_param="messages")
        requested = body.get("max_completion_tokens") or body.get("max_tokens")
        max_new = self.svc.budget(ids, requested, "messages")
        prefer = conversation_slot(body["messages"], self.svc.settings.kv_slots)  # ops.slot.choice
        k = (body.get("top_logprobs") or 0) if body.get("logprobs") else -1
        task = self.svc.task(ids, body, turn=req.context.turn, max_new=max_new, slot=body.get("cache_slot"), prefer=prefer,
                             logprobs_k=k, reuse_key=conversation_digest(body["messages"]))
        gen = self.svc.generation(task, stops=stops_of(body), ignore_leading=bool(body.get("x_colibri_ignore_leading_stop")),
                                  thinking=rendered.thinking, tools=rendered.tools_offered,
                                  strict_tools=bool(body.get("strict_tool_calls")), client_gone=detector(req.env))
        cid, created, model = f"chatcmpl-{uuid.uuid4().hex}", now(), self.svc.settings.model_id
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))

        def unary(o: Outcome) -> dict[str, Any]:
            msg: dict[str, Any] = {"role": "assistant", "content": o.content, "refusal": None}
            if o.tool_calls:
                msg["tool_calls"] = tool_calls_json(o.tool_calls)
                msg["content"] = o.content or None
            if o.reasoning:
                msg["reasoning_content"] = o.reasoning
            return {"id": cid, "object": "chat.completion", "created": created, "model": model,
                    "choices": [{"index": 0, "message": msg,
                                 "logprobs": chat_logprobs(gen.content_logprobs()) if k >= 0 else None,
                                 "finish_reason": o.finish_reason}], "usage": usage(o)}

        w = ChunkWriter(cid, "chat.completion.chunk", created, model, include_usage)

        def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
            return w.choice({"delta": delta}, finish)

        def chunks(g: Generation) -> Iterator[bytes]:
            yield chunk({"role": "assistant", "content": ""})
            for d in g.deltas():
                if d is None:
                    yield b": keepalive\n\n"
                elif d.text:
                    yield chunk({"reasoning_content": d.text} if d.kind == "reasoning" else {"content": d.text})
            o = g.outcome
            assert o is not None
            for i, call in enumerate(tool_calls_json(o.tool_calls)):
                yield chunk({"tool_calls": [dict(call, index=i)]})
            yield chunk({}, o.finish_reason)
            yield from w.tail(o)

        self._respond(resp, gen, bool(body.get("stream")), unary, chunks)


class CompletionsResource(_Endpoint):
    def on_post(self, req: Any, resp: Any) -> None:
        body = read_body(req)
        self.svc.validate("completions", body)
        prompt = body["prompt"]
        self.svc.refuse_if_too_long(len(prompt), "prompt")
        ids = self.svc.model.encode(prompt)
        max_new = self.svc.budget(ids, body.get("max_tokens"), "prompt")
        lp = body.get("logprobs")
        k = lp if isinstance(lp, int) and not isinstance(lp, bool) and lp > 0 else -1
        echo = bool(body.get("echo"))
        task = self.svc.task(ids, body, turn=req.context.turn, max_new=max_new, slot=body.get("cache_slot"), logprobs_k=k, echo=echo)
        gen = self.svc.generation(task, stops=stops_of(body), ignore_leading=bool(body.get("x_colibri_ignore_leading_stop")),
                                  thinking=False, tools=[], strip=False, client_gone=detector(req.env))
        cid, created, model = f"cmpl-{uuid.uuid4().hex}", now(), self.svc.settings.model_id
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))

        def unary(o: Outcome) -> dict[str, Any]:
            text, logprobs = o.content, None
            if k > 0:
                entries = gen.content_logprobs()
                if echo:
                    head = gen.echo_logprobs()
                    shift = sum(len(e.token) for e in head)
                    for e in entries:
                        e.offset += shift
                    entries = head + entries
                    text = prompt + text
                logprobs = completion_logprobs(entries)
            return {"id": cid, "object": "text_completion", "created": created, "model": model,
                    "choices": [{"index": 0, "text": text, "logprobs": logprobs, "finish_reason": o.finish_reason}],
                    "usage": usage(o)}

        w = ChunkWriter(cid, "text_completion", created, model, include_usage)

        def chunk(text: str, finish: str | None = None) -> bytes:
            return w.choice({"text": text}, finish)

        def chunks(g: Generation) -> Iterator[bytes]:
            for d in g.deltas():
                if d is None:
                    yield b": keepalive\n\n"
                elif d.text:
                    yield chunk(d.text)
            o = g.outcome
            assert o is not None
            yield chunk("", o.finish_reason)
            yield from w.tail(o)

        self._respond(resp, gen, bool(body.get("stream")), unary, chunks)


class RenderResource:
    """colibri extension: the prompt a chat request would be given, without generating."""

    def __init__(self, service: Service):
        self.svc = service

    def on_post(self, req: Any, resp: Any) -> None:
        body = read_body(req)
        self.svc.validate("render", body)
        rendered, ids = self.svc.render(from_openai_chat(body))
        resp.data = dumps({"object": "render", "family": self.svc.settings.family, "prompt": rendered.text,
                           "tokens": ids,
                           "control_tokens": [i for i, t in enumerate(ids) if t in self.svc.model.special_ids],
                           "tools_offered": [t["name"] for t in rendered.tools_offered],
                           "continuation": rendered.continuation})
        resp.content_type = "application/json"
