"""/v1/responses (OpenAI Responses) on the chat pipeline, and GET/DELETE /v1/responses/{id}.

A request is validated by the `resp.*` rules of spec/, its input items (after the stored
context of `previous_response_id`, when given) become the common ChatInput, and the
generation's deltas are folded into output items by `OutputItems` (reasoning, message,
function calls), the same fold for JSON and for the event stream, so both give the same
response. A stored response keeps its context (inherited items, its input, its output) so a
child continues exactly where it ended; instructions and tools are never inherited."""
from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Iterator
from typing import Any

from .disconnect import detector
from .errors import ApiError, error
from .generation import Delta, Generation, Outcome
from .reasoning_seal import open_seal, seal
from .request import ChatInput, GenerationRequest, Output, parse_arguments, sampling_of
from .responder import Resource, dumps
from .service import Service

log = logging.getLogger("colibri.server")
TERMINAL = {"completed": "response.completed", "incomplete": "response.incomplete", "failed": "response.failed"}


def _id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


def _text(content: Any) -> str:
    """A message's text: the string, or its text parts joined (validated: input_text,
    output_text or reasoning_text parts)."""
    if isinstance(content, str):
        return content
    return "".join(p.get("text") or "" for p in content or [] if isinstance(p, dict))


def input_items(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The request's input as typed items: a string is one user message."""
    raw = body["input"]
    if isinstance(raw, str):
        return [{"type": "message", "role": "user", "content": raw}]
    return [dict(it, type=it.get("type") or "message") for it in raw]


def to_messages(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Items to chat messages: function calls join the assistant turn they follow (or start
    one), reasoning goes to the assistant turn after it, tool outputs are tool turns."""
    msgs: list[dict[str, Any]] = []
    reasoning = ""
    prev = ""  # the type (or assistant role) of the previous item
    for it in items:
        kind = it["type"]
        if kind == "reasoning":
            reasoning += _reasoning_text(it)
        elif kind == "message" and it["role"] == "assistant":
            m: dict[str, Any] = {"role": "assistant", "content": _text(it["content"])}
            if reasoning:
                m["reasoning_content"], reasoning = reasoning, ""
            msgs.append(m)
        elif kind == "message":
            msgs.append({"role": "system" if it["role"] == "developer" else it["role"], "content": _text(it["content"])})
        elif kind == "function_call":
            call = {"id": it["call_id"], "type": "function",
                    "function": {"name": it["name"], "arguments": parse_arguments(it.get("arguments"))}}
            if prev in ("assistant", "function_call") and not reasoning:
                msgs[-1].setdefault("tool_calls", []).append(call)
            else:
                m = {"role": "assistant", "content": "", "tool_calls": [call]}
                if reasoning:
                    m["reasoning_content"], reasoning = reasoning, ""
                msgs.append(m)
        elif kind == "function_call_output":
            msgs.append({"role": "tool", "tool_call_id": it["call_id"], "content": _text(it["output"])})
        prev = "assistant" if kind == "message" and it.get("role") == "assistant" else kind
    return msgs


def _reasoning_text(item: dict[str, Any]) -> str:
    """A reasoning item's text: its content, else its summary, else its sealed copy (rule
    resp.reasoning.encrypted_content)."""
    text = _text(item.get("content")) or "".join(s.get("text", "") for s in item.get("summary") or []
                                                 if isinstance(s, dict))
    if not text and item.get("encrypted_content"):
        return open_seal(item["encrypted_content"])
    return text


def chat_input(body: dict[str, Any], context: list[dict[str, Any]]) -> ChatInput:
    msgs = to_messages(context)
    if body.get("instructions"):
        msgs.insert(0, {"role": "system", "content": body["instructions"]})
    tools = [{"name": t["name"], "description": t.get("description") or "", "parameters": t.get("parameters") or {}}
             for t in body.get("tools") or []]
    choice = body.get("tool_choice")
    if isinstance(choice, dict):
        choice = {"name": choice["name"]}
    effort = (body.get("reasoning") or {}).get("effort")
    return ChatInput(msgs, tools, choice, effort is not None and effort != "none")


def response_request(body: dict[str, Any], items: list[dict[str, Any]], history: list[int]) -> GenerationRequest:
    """A validated Responses body as the typed request: `items` are its input after the
    parent's context, `history` the tokens the parent's slot holds. A trailing assistant
    item is history here, never a turn to continue."""
    return GenerationRequest(chat=chat_input(body, items), param="input", continuation=False, history=tuple(history),
                             sampling=sampling_of(body, body.get("max_output_tokens")),
                             output=Output(stream=bool(body.get("stream"))))


class OutputItems:
    """Deltas and the outcome folded into output items, with the stream events that tell it.

    Items open when their first text arrives and close when another kind begins or the
    generation ends; function calls are emitted whole at the end (the tool parser reads the
    finished text). `events` collects what a stream sends; JSON answers ignore it."""

    def __init__(self, sealed: bool = False) -> None:
        self.sealed = sealed  # include asked for reasoning.encrypted_content
        self.items: list[dict[str, Any]] = []
        self.open: dict[str, Any] | None = None
        self.events: list[tuple[str, dict[str, Any]]] = []

    def _emit(self, kind: str, **data: Any) -> None:
        self.events.append((kind, data))

    def _start(self, item: dict[str, Any], part: dict[str, Any]) -> None:
        index = len(self.items)
        self.items.append(item)
        self.open = item
        self._emit("response.output_item.added", output_index=index, item=json.loads(dumps(item)))
        self._emit("response.content_part.added", item_id=item["id"], output_index=index, content_index=0, part=part)

    def feed(self, d: Delta) -> None:
        if not d.text:
            return
        if d.kind == "reasoning":
            if self.open is None or self.open["type"] != "reasoning":
                self._close("completed")
                self._start({"type": "reasoning", "id": _id("rs"), "summary": [], "content": []},
                            {"type": "reasoning_text", "text": ""})
            assert self.open is not None
            self.open["_text"] = self.open.get("_text", "") + d.text
            self._emit("response.reasoning_text.delta", item_id=self.open["id"], output_index=len(self.items) - 1,
                       content_index=0, delta=d.text)
            return
        if self.open is None or self.open["type"] != "message":
            self._close("completed")
            self._start(self._message(), {"type": "output_text", "text": "", "annotations": []})
        assert self.open is not None
        self.open["_text"] = self.open.get("_text", "") + d.text
        self._emit("response.output_text.delta", item_id=self.open["id"], output_index=len(self.items) - 1,
                   content_index=0, delta=d.text, logprobs=[])

    @staticmethod
    def _message() -> dict[str, Any]:
        return {"type": "message", "id": _id("msg"), "status": "in_progress", "role": "assistant", "content": []}

    def _close(self, status: str) -> None:
        item, self.open = self.open, None
        if item is None:
            return
        index, text = self.items.index(item), item.pop("_text", "")
        if item["type"] == "reasoning":
            part = {"type": "reasoning_text", "text": text}
            self._emit("response.reasoning_text.done", item_id=item["id"], output_index=index, content_index=0, text=text)
        else:
            part = {"type": "output_text", "text": text, "annotations": []}
            item["status"] = status
            self._emit("response.output_text.done", item_id=item["id"], output_index=index, content_index=0, text=text,
                       logprobs=[])
        item["content"] = [part]
        if item["type"] == "reasoning" and self.sealed:
            item["encrypted_content"] = seal(text)
        self._emit("response.content_part.done", item_id=item["id"], output_index=index, content_index=0, part=part)
        self._emit("response.output_item.done", output_index=index, item=item)

    def finish(self, o: Outcome) -> None:
        """Close what is open, add the function calls, and make sure there is an answer item."""
        status = "incomplete" if o.finish_reason == "length" else "completed"
        if not self.items and not o.tool_calls:  # an empty answer is still a message
            self._start(self._message(), {"type": "output_text", "text": "", "annotations": []})
        self._close(status)
        for c in o.tool_calls:
            args = json.dumps(c["arguments"], ensure_ascii=False)
            item = {"type": "function_call", "id": _id("fc"), "call_id": _id("call"), "name": c["name"],
                    "arguments": "", "status": "in_progress"}
            index = len(self.items)
            self.items.append(item)
            self._emit("response.output_item.added", output_index=index, item=dict(item))
            self._emit("response.function_call_arguments.delta", item_id=item["id"], output_index=index, delta=args)
            self._emit("response.function_call_arguments.done", item_id=item["id"], output_index=index,
                       name=c["name"], arguments=args)
            item.update(arguments=args, status="completed")
            self._emit("response.output_item.done", output_index=index, item=item)

    def drain(self) -> list[tuple[str, dict[str, Any]]]:
        out, self.events = self.events, []
        return out


class ResponsesResource(Resource):
    endpoint = "responses"

    def on_post(self, req: Any, resp: Any) -> None:
        body = self.parse(req)
        items, history = self._context(body)
        request = response_request(body, items, history)
        gen = self.svc.start(request, req.context.turn, detector(req.env))
        shell = self._shell(body, gen)
        fold = OutputItems(sealed="reasoning.encrypted_content" in (body.get("include") or ()))
        store = body.get("store") is not False

        def finished(o: Outcome) -> dict[str, Any]:
            fold.finish(o)
            out = dict(shell, status="incomplete" if o.finish_reason == "length" else "completed",
                       output=fold.items, usage=_usage(o, gen.reasoning_tokens()))
            if o.finish_reason == "length":
                out["incomplete_details"] = {"reason": "max_output_tokens"}
            if store:
                self.svc.responses.put(out, items + fold.items, gen.task.prompt + [rec.token for rec, _, _ in gen.records])
            return out

        self.respond(resp, gen, request.output.stream, finished, lambda g: self._events(g, shell, fold, finished),
                     on_delta=fold.feed)

    def _context(self, body: dict[str, Any]) -> tuple[list[dict[str, Any]], list[int]]:
        """The input items after the stored context of previous_response_id, and the tokens the
        parent's slot holds (none without a parent)."""
        parent_id = body.get("previous_response_id")
        if parent_id is None:
            return input_items(body), []
        parent = self.svc.responses.get(parent_id)
        if parent is None:  # depends on the store, so not a table check (rule resp.previous.unknown)
            raise error("previous_response_not_found", f"Previous response with id '{parent_id}' not found.",
                        param="previous_response_id", rule_id="resp.previous.unknown")
        return parent.context + input_items(body), parent.tokens

    def _shell(self, body: dict[str, Any], gen: Generation) -> dict[str, Any]:
        """The response object before any output: what the request set, echoed. A request
        without max_output_tokens still has a cap (--max-tokens, or the room the context
        leaves): the response names it (rule resp.max_output_tokens.effective), so an answer
        cut there is not "incomplete" under a null limit."""
        reasoning = body.get("reasoning") or {}
        return {"id": _id("resp"), "object": "response", "created_at": gen.created,
                "status": "in_progress", "background": False, "error": None, "incomplete_details": None,
                "instructions": body.get("instructions"), "max_output_tokens": body.get("max_output_tokens") or gen.task.max_new,
                "metadata": body.get("metadata") or {}, "model": self.svc.settings.model_id, "output": [],
                "parallel_tool_calls": body.get("parallel_tool_calls") is not False,
                "previous_response_id": body.get("previous_response_id"),
                "reasoning": {"effort": reasoning.get("effort"), "summary": reasoning.get("summary")},
                "store": body.get("store") is not False,
                "temperature": 1.0 if body.get("temperature") is None else body["temperature"],
                "text": {"format": {"type": "text"}},
                "tool_choice": body.get("tool_choice") or "auto",
                "tools": [dict(t, strict=t.get("strict", True), description=t.get("description"))
                          for t in body.get("tools") or []],
                "top_p": 1.0 if body.get("top_p") is None else body["top_p"],
                "truncation": "disabled", "usage": None, "user": body.get("user")}

    def _events(self, gen: Generation, shell: dict[str, Any], fold: OutputItems, finished: Any) -> Iterator[bytes]:
        seq = 0

        def event(kind: str, data: dict[str, Any]) -> bytes:
            nonlocal seq
            frame = f"event: {kind}\n".encode() + b"data: " + dumps({"type": kind, "sequence_number": seq, **data}) + b"\n\n"
            seq += 1
            return frame

        yield event("response.created", {"response": shell})
        yield event("response.in_progress", {"response": shell})
        try:
            for d in gen.deltas():
                if d is None:
                    yield b": keepalive\n\n"
                    continue
                fold.feed(d)
                for kind, data in fold.drain():
                    yield event(kind, data)
            assert gen.outcome is not None
            final = finished(gen.outcome)
        except Exception as exc:  # noqa: BLE001 - after the 200 only events can tell: error, then the failed response
            if not isinstance(exc, ApiError):
                log.exception("response stream failed after its 200 (%s)", gen.task.request_id or "-")
                exc = error("engine_error")
            yield event("error", {"code": exc.code, "message": exc.message, "param": exc.param})
            yield event("response.failed", {"response": dict(shell, status="failed", output=fold.items,
                                                             error={"code": exc.code, "message": exc.message})})
            return
        for kind, data in fold.drain():
            yield event(kind, data)
        yield event(TERMINAL[final["status"]], {"response": final})


def _usage(o: Outcome, reasoning_tokens: int) -> dict[str, Any]:
    return {"input_tokens": o.prompt_tokens, "input_tokens_details": {"cached_tokens": o.cached_tokens},
            "output_tokens": o.completion_tokens, "output_tokens_details": {"reasoning_tokens": reasoning_tokens},
            "total_tokens": o.prompt_tokens + o.completion_tokens}


class ResponseResource:
    """GET and DELETE /v1/responses/{response_id}: the stored object, or its removal."""

    def __init__(self, service: Service):
        self.svc = service

    def _missing(self, rid: str) -> ApiError:
        return error("response_not_found", f"Response with id '{rid}' not found.", param="response_id",
                     rule_id="resp.retrieve.unknown")

    def on_get(self, req: Any, resp: Any, response_id: str) -> None:
        stored = self.svc.responses.get(response_id)
        if stored is None:
            raise self._missing(response_id)
        resp.data = dumps(stored.response)
        resp.content_type = "application/json"

    def on_delete(self, req: Any, resp: Any, response_id: str) -> None:
        if not self.svc.responses.delete(response_id):
            raise self._missing(response_id)
        resp.data = dumps({"id": response_id, "object": "response.deleted", "deleted": True})
        resp.content_type = "application/json"
