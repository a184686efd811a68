"""/v1/chat/completions, /v1/completions and /v1/render: each body translated into a
GenerationRequest (`chat_request`, `completion_request`), started by the Service, and
answered as JSON or as server-sent events through the shared responder."""
from __future__ import annotations

import json
import math
import uuid
from collections.abc import Iterator
from typing import Any

from ..spec.paths import text_of
from .disconnect import detector
from .generation import Generation, LogprobEntry, Outcome
from .request import ChatInput, GenerationRequest, Output, parse_arguments, sampling_of
from .responder import Resource, dumps, sse


def _num(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None


def thinking_requested(body: dict[str, Any]) -> bool:
    """enable_thinking, then zai-style thinking.type, then reasoning_effort (spec: reasoning)."""
    if isinstance(body.get("enable_thinking"), bool):
        return bool(body["enable_thinking"])
    thinking = body.get("thinking")
    if isinstance(thinking, dict) and thinking.get("type") in ("enabled", "disabled"):
        return bool(thinking["type"] == "enabled")
    effort = body.get("reasoning_effort")
    return effort is not None and effort != "none"


def from_openai_chat(body: dict[str, Any]) -> ChatInput:
    msgs = []
    for m in body["messages"]:
        out: dict[str, Any] = {"role": "system" if m["role"] == "developer" else m["role"],
                               "content": text_of(m.get("content")) or ""}
        if m.get("tool_calls"):
            out["tool_calls"] = [{"id": c.get("id"), "type": "function",
                                  "function": {"name": c["function"]["name"],
                                               "arguments": parse_arguments(c["function"].get("arguments"))}}
                                 for c in m["tool_calls"]]
        if isinstance(m.get("reasoning_content"), str):
            out["reasoning_content"] = m["reasoning_content"]
        if m.get("tool_call_id") is not None:
            out["tool_call_id"] = m["tool_call_id"]
        msgs.append(out)
    tools = [t["function"] for t in body.get("tools") or []]
    choice = body.get("tool_choice")
    if isinstance(choice, dict):
        choice = {"name": choice["function"]["name"]}
    return ChatInput(msgs, tools, choice, thinking_requested(body), bool(body.get("preserve_thinking")))


def stops_of(body: dict[str, Any]) -> tuple[str, ...]:
    stop = body.get("stop")
    return (stop,) if isinstance(stop, str) else tuple(stop or [])


def chat_request(body: dict[str, Any]) -> GenerationRequest:
    """A validated chat completions body as the typed request."""
    include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
    return GenerationRequest(
        chat=from_openai_chat(body), param="messages", slot=body.get("cache_slot"),
        sampling=sampling_of(body, body.get("max_completion_tokens") or body.get("max_tokens"), stops_of(body),
                             bool(body.get("x_colibri_ignore_leading_stop"))),
        output=Output(stream=bool(body.get("stream")), include_usage=include_usage,
                      logprobs=(body.get("top_logprobs") or 0) if body.get("logprobs") else -1,
                      strict_tools=bool(body.get("strict_tool_calls"))))


def completion_request(body: dict[str, Any]) -> GenerationRequest:
    """A validated legacy completions body as the typed request: its prompt is text, as it is."""
    lp = body.get("logprobs")
    include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
    return GenerationRequest(
        text=body["prompt"], param="prompt", slot=body.get("cache_slot"),
        sampling=sampling_of(body, body.get("max_tokens"), stops_of(body),
                             bool(body.get("x_colibri_ignore_leading_stop"))),
        output=Output(stream=bool(body.get("stream")), include_usage=include_usage, raw_text=True,
                      logprobs=lp if isinstance(lp, int) and not isinstance(lp, bool) and lp > 0 else -1,
                      echo=bool(body.get("echo"))))


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


class ChatResource(Resource):
    endpoint = "chat"

    def on_post(self, req: Any, resp: Any) -> None:
        request = chat_request(self.parse(req))
        gen = self.svc.start(request, req.context.turn, detector(req.env))
        self.respond(resp, gen, request.output.stream, *self.formats(gen, request))

    def formats(self, gen: Generation, request: GenerationRequest) -> tuple[Any, Any]:
        """The chat.completion object and the chunk stream of a started generation."""
        cid, created, model = f"chatcmpl-{uuid.uuid4().hex}", gen.created, self.svc.settings.model_id
        k = request.output.logprobs

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

        w = ChunkWriter(cid, "chat.completion.chunk", created, model, request.output.include_usage)

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

        return unary, chunks


class CompletionsResource(Resource):
    endpoint = "completions"

    def on_post(self, req: Any, resp: Any) -> None:
        request = completion_request(self.parse(req))
        gen = self.svc.start(request, req.context.turn, detector(req.env))
        self.respond(resp, gen, request.output.stream, *self.formats(gen, request))

    def formats(self, gen: Generation, request: GenerationRequest) -> tuple[Any, Any]:
        """The text_completion object and the chunk stream of a started generation."""
        cid, created, model = f"cmpl-{uuid.uuid4().hex}", gen.created, self.svc.settings.model_id
        k, prompt = request.output.logprobs, request.text or ""

        def unary(o: Outcome) -> dict[str, Any]:
            text, logprobs = o.content, None
            if k > 0:
                entries = gen.content_logprobs()
                if request.output.echo:
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

        w = ChunkWriter(cid, "text_completion", created, model, request.output.include_usage)

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

        return unary, chunks


class RenderResource(Resource):
    """colibri extension: the prompt a chat request would be given, without generating."""

    endpoint = "render"

    def on_post(self, req: Any, resp: Any) -> None:
        rendered, ids = self.svc.render(from_openai_chat(self.parse(req)))
        resp.data = dumps({"object": "render", "family": self.svc.settings.family, "prompt": rendered.text,
                           "tokens": ids,
                           "control_tokens": [i for i, t in enumerate(ids) if t in self.svc.model.special_ids],
                           "tools_offered": [t["name"] for t in rendered.tools_offered],
                           "continuation": rendered.continuation})
        resp.content_type = "application/json"
