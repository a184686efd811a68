"""Deliberately broken variants of the reference server, each a WSGI wrapper that injects one
known defect. The suite's own tests run against every mutant and check that exactly the
expected rule ids fail: proof that each rule can fail, and fails for the right reason."""
from __future__ import annotations

import io
import json
from collections.abc import Callable, Iterable
from typing import Any

from colibri.paths import EMBEDDED_MODEL_ID

Body = dict[str, Any]
WSGIApp = Callable[..., Iterable[bytes]]


def _rewrite(app: WSGIApp, *, request: Callable[[str, Body], Body] | None = None,
             response: Callable[[str, Body | None, int, list, bytes], tuple[int, list, bytes]] | None = None) -> WSGIApp:
    """Wrap a WSGI app with a request-body rewrite and/or a response rewrite."""

    def wrapped(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        body: Body | None = None
        chunked = "chunked" in environ.get("HTTP_TRANSFER_ENCODING", "").lower()
        if environ.get("REQUEST_METHOD") == "POST" and not chunked:  # a chunked body passes untouched
            raw = environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
            try:
                body = json.loads(raw)
            except (ValueError, RecursionError):
                body = None
            if request is not None and isinstance(body, dict):
                body = request(path, body)
                raw = json.dumps(body).encode()
            environ["wsgi.input"] = io.BytesIO(raw)
            environ["CONTENT_LENGTH"] = str(len(raw))
        captured: dict[str, Any] = {}

        def capture(status: str, headers: list, exc_info: Any = None) -> Any:
            captured["status"], captured["headers"] = status, headers
            return lambda data: None

        data = b"".join(app(environ, capture))
        status = int(captured["status"].split()[0])
        headers = captured["headers"]
        if response is not None:
            status, headers, data = response(path, body, status, headers, data)
        headers = [(k, v) for k, v in headers if k.lower() != "content-length"] + [("Content-Length", str(len(data)))]
        start_response(f"{status} X", headers)
        return [data]

    return wrapped


def _json_response(fn: Callable[[str, Body | None, dict[str, Any]], None]) -> Callable[..., tuple[int, list, bytes]]:
    def response(path: str, body: Body | None, status: int, headers: list, data: bytes) -> tuple[int, list, bytes]:
        if any(k.lower() == "content-type" and v.startswith("application/json") for k, v in headers):
            try:
                doc = json.loads(data)
            except (ValueError, RecursionError):
                return status, headers, data
            fn(path, body, doc)
            data = json.dumps(doc).encode()
        return status, headers, data
    return response


def _sse_response(fn: Callable[[list[bytes]], list[bytes]]) -> Callable[..., tuple[int, list, bytes]]:
    def response(path: str, body: Body | None, status: int, headers: list, data: bytes) -> tuple[int, list, bytes]:
        if any(k.lower() == "content-type" and v.startswith("text/event-stream") for k, v in headers):
            events = [e + b"\n\n" for e in data.split(b"\n\n") if e]
            data = b"".join(fn(events))
        return status, headers, data
    return response


def _drop_keys(*keys: str) -> Callable[[str, Body], Body]:
    return lambda path, body: {k: v for k, v in body.items() if k not in keys}


def _leak_stop(path: str, body: Body | None, doc: dict[str, Any]) -> None:
    stops = body.get("stop") if isinstance(body, dict) else None
    stops = [stops] if isinstance(stops, str) else stops
    if stops and doc.get("choices") and "message" in doc["choices"][0]:
        doc["choices"][0]["message"]["content"] = (doc["choices"][0]["message"]["content"] or "") + stops[0]


def _flat_errors(path: str, body: Body | None, doc: dict[str, Any]) -> None:
    if isinstance(doc.get("error"), dict) and "code" in doc["error"]:
        err = doc.pop("error")
        doc.update({"message": err["message"], "error_code": err["code"]})


def _tool_finish_stop(path: str, body: Body | None, doc: dict[str, Any]) -> None:
    for ch in doc.get("choices") or []:
        if ch.get("finish_reason") == "tool_calls":
            ch["finish_reason"] = "stop"


def _offset_plus_one(path: str, body: Body | None, doc: dict[str, Any]) -> None:
    for ch in doc.get("choices") or []:
        lp = ch.get("logprobs") or {}
        if "text_offset" in lp:
            lp["text_offset"] = [o + 1 for o in lp["text_offset"]]


def _reasoning_in_content(path: str, body: Body | None, doc: dict[str, Any]) -> None:
    for ch in doc.get("choices") or []:
        msg = ch.get("message") or {}
        if msg.get("reasoning_content"):
            msg["content"] = f"<think>{msg.pop('reasoning_content')}</think>" + (msg.get("content") or "")


def _anthropic_stop_end_turn(path: str, body: Body | None, doc: dict[str, Any]) -> None:
    if doc.get("stop_reason") == "stop_sequence":
        doc["stop_reason"], doc["stop_sequence"] = "end_turn", None


def _systemone_unnormalised(path: str, body: Body | None, doc: dict[str, Any]) -> None:
    """Label probabilities that are not a distribution (a softmax over the whole vocabulary
    read at the labels, say): every probability scaled by 0.9."""
    if path == "/v1/systemone":
        for a in (doc.get("answers") or {}).values():
            if isinstance(a.get("probabilities"), dict):
                a["probabilities"] = {k: v * 0.9 for k, v in a["probabilities"].items()}


def _renumbered(frames: list[tuple[bytes, dict[str, Any]]], skip_at: int | None = None) -> list[bytes]:
    """Responses events written back with sequence numbers 0, 1, ... (one number left out at
    `skip_at`), each as `event: <type>` plus its data."""
    out, n = [], 0
    for head, doc in frames:
        if n == skip_at:
            n += 1
        if "sequence_number" in doc:
            doc["sequence_number"] = n
            n += 1
        out.append(head + b"data: " + json.dumps(doc).encode() + b"\n\n")
    return out


def _responses_frames(events: list[bytes]) -> list[tuple[bytes, dict[str, Any]]] | None:
    frames = []
    for e in events:
        head, _, data = e.partition(b"data: ")
        try:
            doc = json.loads(data)
        except ValueError:
            return None
        if not (isinstance(doc, dict) and str(doc.get("type", "")).startswith("response.")):
            return None
        frames.append((head, doc))
    return frames


def _delta_before_part(events: list[bytes]) -> list[bytes]:
    """A Responses stream whose first text delta comes before its content part opens (the
    numbering stays gapless: only the order is wrong)."""
    frames = _responses_frames(events)
    if not frames:
        return events
    kinds = [doc["type"] for _, doc in frames]
    if "response.content_part.added" in kinds and "response.output_text.delta" in kinds:
        a, b = kinds.index("response.content_part.added"), kinds.index("response.output_text.delta")
        frames[a], frames[b] = frames[b], frames[a]
    return _renumbered(frames)


def _sequence_gap(events: list[bytes]) -> list[bytes]:
    """A Responses stream that skips sequence number 3."""
    frames = _responses_frames(events)
    return _renumbered(frames, skip_at=3) if frames else events


def _no_done(events: list[bytes]) -> list[bytes]:
    return [e for e in events if not e.startswith(b"data: [DONE]")]


def _no_role_chunk(events: list[bytes]) -> list[bytes]:
    return [e for e in events if b'"delta":{"role":"assistant"' not in e]


def _no_usage_chunk(events: list[bytes]) -> list[bytes]:
    return [e for e in events if b'"choices":[]' not in e]


def _tool_delta_without_index(events: list[bytes]) -> list[bytes]:
    out = []
    for e in events:
        if e.startswith(b"data: {") and b'"tool_calls"' in e:
            doc = json.loads(e[6:])
            for ch in doc.get("choices") or []:
                for tc in (ch.get("delta") or {}).get("tool_calls") or []:
                    tc.pop("index", None)
            e = b"data: " + json.dumps(doc).encode() + b"\n\n"
        out.append(e)
    return out


def _anthropic_out_of_order(events: list[bytes]) -> list[bytes]:
    if len(events) >= 2 and events[-1].startswith(b"event: message_stop"):
        events[-2], events[-1] = events[-1], events[-2]
    return events


def _drop_header(name: str) -> Callable[..., tuple[int, list, bytes]]:
    def response(path: str, body: Body | None, status: int, headers: list, data: bytes) -> tuple[int, list, bytes]:
        return status, [(k, v) for k, v in headers if k.lower() != name.lower()], data
    return response


def _server_error_on_bad_json(path: str, body: Body | None, status: int, headers: list, data: bytes):
    if status == 400 and b"invalid_json" in data:
        return 500, headers, b'{"error": {"message": "Internal error", "type": "server_error", "param": null, "code": null}}'
    return status, headers, data


def _clamp_top_logprobs(path: str, body: Body) -> Body:
    if isinstance(body.get("top_logprobs"), int) and body["top_logprobs"] > 32:
        body = dict(body, top_logprobs=32)
    return body


def _refuse_developer(path: str, body: Body | None, status: int, headers: list, data: bytes):
    msgs = body.get("messages") if isinstance(body, dict) else None
    if path == "/v1/chat/completions" and isinstance(msgs, list) and any(
            isinstance(m, dict) and m.get("role") == "developer" for m in msgs):
        return 400, [("Content-Type", "application/json")], json.dumps({"error": {
            "message": "developer is not one of ['system', 'assistant', 'user', 'tool']", "type": "invalid_request_error",
            "param": "messages", "code": None}}).encode()
    return status, headers, data


def _any_model(path: str, body: Body) -> Body:
    return dict(body, model=EMBEDDED_MODEL_ID) if "model" in body else body


def _drop_unknown(path: str, body: Body) -> Body:
    return {k: v for k, v in body.items() if k not in ("max_token", "x_unknown_field")}


#: name -> (wrapper factory, the rule ids that must fail and only they)
def _pin_hash_slot(path: str, body: Body) -> Body:
    """The gateway's slot choice: the conversation's hash slot (here of 2 slots) as a pin."""
    messages = body.get("messages") if isinstance(body, dict) else None
    if path in ("/v1/chat/completions", "/v1/messages") and "cache_slot" not in body and isinstance(messages, list) \
            and all(isinstance(m, dict) for m in messages):  # malformed messages are the validator's to refuse
        from colibri.server.slots import conversation_slot

        body = dict(body, cache_slot=conversation_slot(messages, 2))
    return body


MUTANTS: dict[str, tuple[Callable[[WSGIApp], WSGIApp], set[str]]] = {
    "stop-text-leaked": (lambda a: _rewrite(a, response=_json_response(_leak_stop)),
                         {"chat.stop.trimmed", "chat.stop.honored", "stop.earliest-wins", "chat.logprobs.join",
                          "logprobs.bytes-truncated-at-stop", "stop.leading-ignore", "stop.stream.hold-back"}),
    "done-missing": (lambda a: _rewrite(a, response=_sse_response(_no_done)), {"chat.stream.done_sentinel"}),
    # Every refusal on an OpenAI path checks the envelope; FLAT marks the mutant whose expected
    # failures are "err.envelope.openai, and only rules with an OpenAI-path refusal vector".
    "flat-error-envelope": (lambda a: _rewrite(a, response=_json_response(_flat_errors)), {"FLAT"}),
    "logit-bias-ignored": (lambda a: _rewrite(a, request=_drop_keys("logit_bias")), {"req.logit_bias.empty-only"}),
    "tool-finish-stop": (lambda a: _rewrite(a, response=_json_response(_tool_finish_stop)),
                         {"chat.tool_calls.shape", "chat.finish_reason.tool_calls",
                          # both compare the stream (finish_reason right) with the unary answer (wrong)
                          "chat.stream.tool_calls.index", "tools.call.not-in-content"}),
    # The chunk schema requires the index too: the always-on response-schema invariant sees it.
    "tool-delta-no-index": (lambda a: _rewrite(a, response=_sse_response(_tool_delta_without_index)),
                            {"chat.stream.tool_calls.index", "chat.response.shape"}),
    "echo-ignored": (lambda a: _rewrite(a, request=_drop_keys("echo")),
                     {"cmpl.echo.requires-logprobs", "cmpl.echo.prompt-logprobs", "cmpl.echo.boolean",
                      "chat.echo.refused"}),
    "text-offset-off-by-one": (lambda a: _rewrite(a, response=_json_response(_offset_plus_one)),
                               {"cmpl.logprobs.shape", "cmpl.echo.prompt-logprobs", "cmpl.text_offset.from-zero"}),
    "usage-chunk-missing": (lambda a: _rewrite(a, response=_sse_response(_no_usage_chunk)), {"chat.stream.usage.final_chunk"}),
    "role-chunk-missing": (lambda a: _rewrite(a, response=_sse_response(_no_role_chunk)), {"chat.stream.role-first"}),
    "anthropic-out-of-order": (lambda a: _rewrite(a, response=_sse_response(_anthropic_out_of_order)),
                               {"msgs.stream.event_order", "msgs.stream.stop_reason.tool_use"}),
    # A 500 on another rule's vector breaks the invariant err.no-500-for-client-input states too.
    "500-for-malformed-json": (lambda a: _rewrite(a, response=_server_error_on_bad_json),
                               {"body.json.invalid", "body.json.limits", "err.no-500-for-client-input"}),
    "top-logprobs-33-accepted": (lambda a: _rewrite(a, request=_clamp_top_logprobs), {"chat.top_logprobs.range"}),
    "request-id-missing": (lambda a: _rewrite(a, response=_drop_header("x-request-id")), {"err.request-id"}),
    "n-ignored": (lambda a: _rewrite(a, request=_drop_keys("n")), {"req.n.one"}),
    "developer-role-refused": (lambda a: _rewrite(a, response=_refuse_developer),
                               # the qwen-xml row refuses developer too, but by name and position
                               {"chat.role.developer", "chat.role.family"}),
    "reasoning-in-content": (lambda a: _rewrite(a, response=_json_response(_reasoning_in_content)),
                             {"chat.reasoning.field", "reasoning.not-in-content"}),
    "any-model-accepted": (lambda a: _rewrite(a, request=_any_model),
                           {"req.model.served", "models.served-id-configurable", "req.model.required",
                            "err.envelope.anthropic", "s1.request.fields", "resp.request.fields"}),
    "retry-after-missing": (lambda a: _rewrite(a, response=_drop_header("Retry-After")),
                            {"err.retry-after"}),
    "max-completion-tokens-ignored": (lambda a: _rewrite(a, request=_drop_keys("max_completion_tokens")),
                                      {"req.max_completion_tokens.accepted"}),
    "anthropic-stop-end-turn": (lambda a: _rewrite(a, response=_json_response(_anthropic_stop_end_turn)),
                                {"msgs.stop_sequence.reason"}),
    "unknown-fields-ignored": (lambda a: _rewrite(a, request=_drop_unknown),
                               {"req.unknown-field.refused", "s1.request.fields", "resp.request.fields"}),
    "hash-slot-pinned": (lambda a: _rewrite(a, request=_pin_hash_slot), {"ops.slot.choice"}),
    "responses-delta-before-part": (lambda a: _rewrite(a, response=_sse_response(_delta_before_part)),
                                    {"resp.stream.brackets"}),
    "responses-sequence-gap": (lambda a: _rewrite(a, response=_sse_response(_sequence_gap)), {"resp.stream.sequence"}),
    # previous_response_id lost on the way in: the child starts a new conversation
    "responses-chain-lost": (lambda a: _rewrite(a, request=_drop_keys("previous_response_id")),
                             {"resp.previous.chain", "resp.previous.unknown", "resp.previous.prefix-reused",
                              "resp.request.fields"}),  # its generated previous_response_id type vectors
    "systemone-unnormalised": (lambda a: _rewrite(a, response=_json_response(_systemone_unnormalised)),
                               {"s1.choice.answer", "s1.score.answer", "s1.entropy"}),
}
