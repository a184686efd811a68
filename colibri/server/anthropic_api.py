"""/v1/messages: Anthropic Messages on the same engine. The body is validated by the
Anthropic rules of spec/, translated into a GenerationRequest (`message_request`, its
conversation the common ChatInput), started by the Service, and answered with Anthropic's
message object or its named-event stream."""
from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

from .disconnect import detector
from .generation import Generation, Outcome
from .request import ChatInput, GenerationRequest, Output, sampling_of
from .responder import Resource, dumps

SIGNATURE = "colibri-local"


def _text(blocks: Any) -> str:
    if isinstance(blocks, str):
        return blocks
    return "".join(b.get("text", "") for b in blocks or [] if isinstance(b, dict) and b.get("type") == "text")


def to_chat_input(body: dict[str, Any]) -> ChatInput:
    msgs: list[dict[str, Any]] = []
    system = _text(body.get("system"))
    if system:
        msgs.append({"role": "system", "content": system})
    for m in body["messages"]:
        content = m["content"]
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        if m["role"] == "user":
            for b in blocks:
                if b.get("type") == "tool_result":
                    msgs.append({"role": "tool", "tool_call_id": b.get("tool_use_id"), "content": _text(b.get("content"))})
            text = _text([b for b in blocks if b.get("type") == "text"])
            if text or not any(b.get("type") == "tool_result" for b in blocks):
                msgs.append({"role": "user", "content": text})
        else:
            out: dict[str, Any] = {"role": "assistant", "content": _text(blocks)}
            reasoning = "".join(b.get("thinking", "") for b in blocks if b.get("type") == "thinking")
            if reasoning:
                out["reasoning_content"] = reasoning
            calls = [{"id": b.get("id"), "type": "function", "function": {"name": b["name"], "arguments": b.get("input") or {}}}
                     for b in blocks if b.get("type") == "tool_use"]
            if calls:
                out["tool_calls"] = calls
            msgs.append(out)
    tools = [{"name": t["name"], "description": t.get("description", ""), "parameters": t.get("input_schema") or {}}
             for t in body.get("tools") or []]
    choice = body.get("tool_choice")
    mapped: Any = None
    if isinstance(choice, dict):
        mapped = {"auto": "auto", "any": "required", "none": "none"}.get(str(choice.get("type")))
        if choice.get("type") == "tool":
            mapped = {"name": choice["name"]}
    thinking = isinstance(body.get("thinking"), dict) and body["thinking"].get("type") == "enabled"
    return ChatInput(msgs, tools, mapped, thinking)


def message_request(body: dict[str, Any]) -> GenerationRequest:
    """A validated Messages body as the typed request."""
    return GenerationRequest(chat=to_chat_input(body), param="messages", slot=body.get("cache_slot"),
                             sampling=sampling_of(body, body.get("max_tokens"), tuple(body.get("stop_sequences") or [])),
                             output=Output(stream=bool(body.get("stream"))))


def stop_reason(o: Outcome) -> str:
    if o.tool_calls:
        return "tool_use"
    if o.matched_stop is not None:
        return "stop_sequence"
    return "max_tokens" if o.finish_reason == "length" else "end_turn"


def _tool_blocks(o: Outcome) -> list[dict[str, Any]]:
    return [{"type": "tool_use", "id": f"toolu_{uuid.uuid4().hex[:24]}", "name": c["name"], "input": c["arguments"]}
            for c in o.tool_calls]


def event(name: str, data: dict[str, Any]) -> bytes:
    return f"event: {name}\n".encode() + b"data: " + dumps(dict(data, type=name)) + b"\n\n"


class MessagesResource(Resource):
    endpoint = "messages"

    def on_post(self, req: Any, resp: Any) -> None:
        request = message_request(self.parse(req))
        gen = self.svc.start(request, req.context.turn, detector(req.env))
        self.respond(resp, gen, request.output.stream, *self.formats(gen))

    def formats(self, gen: Generation) -> tuple[Any, Any]:
        """The message object and the named-event stream of a started generation."""
        mid, model, thinking = f"msg_{uuid.uuid4().hex[:24]}", self.svc.settings.model_id, gen.spec.thinking

        def unary(o: Outcome) -> dict[str, Any]:
            content: list[dict[str, Any]] = []
            if thinking:
                content.append({"type": "thinking", "thinking": o.reasoning, "signature": SIGNATURE})
            if o.content or not o.tool_calls:
                content.append({"type": "text", "text": o.content})
            content += _tool_blocks(o)
            return {"id": mid, "type": "message", "role": "assistant", "model": model, "content": content,
                    "stop_reason": stop_reason(o), "stop_sequence": o.matched_stop,
                    "usage": {"input_tokens": o.prompt_tokens, "output_tokens": o.completion_tokens,
                              "cache_read_input_tokens": o.cached_tokens}}

        def chunks(g: Generation) -> Iterator[bytes]:
            assert g.accepted is not None
            yield event("message_start", {"message": {
                "id": mid, "type": "message", "role": "assistant", "model": model, "content": [], "stop_reason": None,
                "stop_sequence": None, "usage": {"input_tokens": g.accepted.prompt_tokens, "output_tokens": 0}}})
            index, open_kind = -1, None

            def open_block(kind: str) -> Iterator[bytes]:
                nonlocal index, open_kind
                yield from close_block()
                index += 1
                open_kind = kind
                block = {"type": "thinking", "thinking": "", "signature": ""} if kind == "thinking" else {"type": "text", "text": ""}
                yield event("content_block_start", {"index": index, "content_block": block})

            def close_block() -> Iterator[bytes]:
                nonlocal open_kind
                if open_kind == "thinking":
                    yield event("content_block_delta", {"index": index, "delta": {"type": "signature_delta", "signature": SIGNATURE}})
                if open_kind is not None:
                    yield event("content_block_stop", {"index": index})
                open_kind = None

            if thinking:
                yield from open_block("thinking")
            for d in g.deltas():
                if d is None:
                    yield event("ping", {})
                    continue
                if not d.text:
                    continue
                if d.kind == "reasoning":
                    yield event("content_block_delta", {"index": index, "delta": {"type": "thinking_delta", "thinking": d.text}})
                else:
                    if open_kind != "text":
                        yield from open_block("text")
                    yield event("content_block_delta", {"index": index, "delta": {"type": "text_delta", "text": d.text}})
            o = g.outcome
            assert o is not None
            if open_kind != "text" and not o.tool_calls:
                yield from open_block("text")
            yield from close_block()
            for block in _tool_blocks(o):
                index += 1
                yield event("content_block_start", {"index": index, "content_block": dict(block, input={})})
                yield event("content_block_delta", {"index": index, "delta": {
                    "type": "input_json_delta", "partial_json": json.dumps(block["input"], ensure_ascii=False)}})
                yield event("content_block_stop", {"index": index})
            yield event("message_delta", {"delta": {"stop_reason": stop_reason(o), "stop_sequence": o.matched_stop},
                                          "usage": {"output_tokens": o.completion_tokens}})
            yield event("message_stop", {})

        return unary, chunks
