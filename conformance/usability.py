"""Probes that tell a feature a server accepts from one a client can use (issue 53, "settings
proven"). The first discovery probes ask whether a request is taken; these send what a client
library sends and read the answer as it would: does the plain answer hold the text asked for, is
a stop sequence applied, does a tool call come back and can its result be sent back, is each
stream well formed for an SDK's accumulator, does a stored response chain. A server that takes
`stop` and ignores it (transformers serve), or streams Responses events without output_index
(llama-server), then gets settings that leave the feature out, and its compat profile says why.

They run after the first probes, in order, and some are built from earlier answers (the stop
word is the second word of the plain answer; the tool result answers the call that came back).
When the plain answer lands in a reasoning field (vLLM's qwen3 parser, thinking not switched
off), `thinking_off` looks for the request fields that bring it back as content, and every later
probe sends them, as a client configured from the settings would.
"""
from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

#: The plain prompt and the text a model that follows it answers (the clients' text scenario).
PLAIN, EXPECT = "Repeat exactly: hello world", "hello world"
TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
WEATHER = "What is the weather in Paris?"
#: Request fields that switch thinking off, in the order they are tried: the chat template's own
#: switch (vLLM, SGLang), the top-level one (Qwen's API), the Z.ai/DeepSeek object, OpenAI's.
THINKING_OFF = ({"chat_template_kwargs": {"enable_thinking": False}}, {"enable_thinking": False},
                {"thinking": {"type": "disabled"}}, {"reasoning_effort": "none"})

#: name -> what the probe tells (the report's discovery section prints it)
WHAT = {
    "chat_text": f"chat answers {PLAIN!r} with {EXPECT!r} in content",
    "thinking_off": "the request fields that bring a plain chat answer back as content (sent by every later probe)",
    "stop_list": "chat takes stop as a list of 4 strings (the official maximum) and stops at one",
    "tool_call": "chat with tools answers a weather question with a call whose arguments are a JSON object",
    "tool_result": "chat answers the tool result sent back for that call (assistant content null, then a tool message)",
    "tool_call_stream": "a streamed chat with tools assembles the call and ends with a finish_reason",
    "messages_text": f"Anthropic messages answer {PLAIN!r} with {EXPECT!r} in a text block",
    "messages_blocks": "Anthropic messages take content as a list of blocks (the official shape @ai-sdk/anthropic sends)",
    "messages_stream": "an Anthropic stream sends message_start, content_block_start/delta/stop, message_delta, message_stop",
    "responses_text": f"Responses answer {PLAIN!r} with {EXPECT!r} in an output_text part",
    "responses_history": "Responses take a history of message items without `type`, an assistant turn among them",
    "responses_stream": "Responses stream events carry sequence_number, and output_index where OpenAI sends it",
    "responses_chain_stored": "a response chained onto one just stored (store: true) is answered",
}

Send = Callable[[str, dict[str, Any]], Any]  # (endpoint, fields over its minimal request) -> Exchange
Judged = tuple[str, str, Any]  # state, detail, value


def _doc(ex: Any) -> Any:
    try:
        return ex.json()
    except ValueError:
        return None


def _status(ex: Any) -> tuple[str, str] | None:
    """The state an answer that is not a 200 JSON body gets, or None for one to read."""
    if 400 <= ex.status < 500:
        return "refused", f"refused with {ex.status}"
    if ex.status != 200:
        return "error", f"answers {ex.status}"
    return None


def _message(doc: Any) -> dict[str, Any]:
    choices = doc.get("choices") if isinstance(doc, dict) else None
    msg = choices[0].get("message") if choices and isinstance(choices[0], dict) else None
    return msg if isinstance(msg, dict) else {}


def chat_content(ex: Any) -> str:
    content = _message(_doc(ex)).get("content")
    return content if isinstance(content, str) else ""


def _reasoning(ex: Any) -> str:
    msg = _message(_doc(ex))
    return next((msg[f] for f in ("reasoning_content", "reasoning") if isinstance(msg.get(f), str) and msg[f]), "")


def _holds(text: str, where: str) -> tuple[str, str]:
    if EXPECT in text.lower():
        return "served", f"{EXPECT!r} in {where}"
    return "ignored", f"200, {where} {text[:80]!r}"


def judge_chat_text(ex: Any) -> Judged:
    state, detail = _holds(chat_content(ex), "content")
    if state != "served" and (r := _reasoning(ex)):
        detail += f", reasoning {r[:60]!r}"
    return state, detail, None


def _calls(msg: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for c in msg.get("tool_calls") or [] if isinstance(c, dict) and isinstance(c.get("function"), dict)]


def _arguments_ok(arguments: Any) -> bool:
    try:
        return isinstance(json.loads(arguments), dict)
    except (TypeError, ValueError):
        return False


def judge_tool_call(ex: Any) -> Judged:
    calls = _calls(_message(_doc(ex)))
    if not calls:
        return "ignored", f"200 without a call, content {chat_content(ex)[:60]!r}", None
    fn = calls[0]["function"]
    if not _arguments_ok(fn.get("arguments")):
        return "ignored", f"200, {fn.get('name')} called with arguments that are not a JSON object: {fn.get('arguments')!r}", None
    return "served", f"{fn.get('name')} called", {"id": calls[0].get("id"), "type": "function", "function": fn}


def judge_tool_result(ex: Any) -> Judged:
    msg = _message(_doc(ex))
    if chat_content(ex).strip() or _calls(msg):
        return "served", "answered", None
    return "ignored", "200 with neither content nor a call", None


def _events(ex: Any) -> list[Any] | None:
    """The JSON events of a stream, or None when it is not one."""
    if not ex.is_sse:
        return None
    out = []
    for e in ex.events():
        if e.data == "[DONE]":
            continue
        try:
            out.append(e.json())
        except ValueError:
            return None
    return out


def judge_tool_call_stream(ex: Any) -> Judged:
    events = _events(ex)
    if events is None:
        return "ignored", "200 without a stream of JSON events", None
    name, args, finish = "", "", None
    for doc in events:
        for choice in doc.get("choices") or [] if isinstance(doc, dict) else []:
            finish = choice.get("finish_reason") or finish
            for call in (choice.get("delta") or {}).get("tool_calls") or []:
                fn = call.get("function") or {} if isinstance(call, dict) else {}
                name += fn.get("name") or ""
                args += fn.get("arguments") or ""
    if not name:
        return "ignored", "the stream assembles no call", None
    if not _arguments_ok(args):
        return "ignored", f"the streamed arguments are not a JSON object: {args[:80]!r}", None
    if finish is None:
        return "ignored", f"{name} called, but no chunk carries a finish_reason", None
    return "served", f"{name} called, finish_reason {finish}", None


def judge_messages_text(ex: Any) -> Judged:
    doc = _doc(ex)
    blocks = doc.get("content") if isinstance(doc, dict) else None
    text = "".join(b.get("text") or "" for b in blocks or [] if isinstance(b, dict) and b.get("type") == "text")
    state, detail = _holds(text, "text blocks")
    return state, detail, None


def judge_messages_stream(ex: Any) -> Judged:
    events = _events(ex)
    if events is None:
        return "ignored", "200 without a stream of JSON events", None
    kinds = [e.get("type") for e in events if isinstance(e, dict) and e.get("type") != "ping"]
    order = ["message_start", "content_block_start", "content_block_delta", "content_block_stop",
             "message_delta", "message_stop"]
    seen = [k for i, k in enumerate(kinds) if i == 0 or kinds[i - 1] != k]  # runs of deltas as one
    if [k for k in seen if k in order] != order or kinds[0] != "message_start":
        return "ignored", f"events {seen[:8]}", None
    return "served", "events in the official order", None


def judge_responses_text(ex: Any) -> Judged:
    doc = _doc(ex)
    text = "".join(part.get("text") or "" for item in (doc.get("output") if isinstance(doc, dict) else None) or []
                   if isinstance(item, dict) and item.get("type") == "message"
                   for part in item.get("content") or [] if isinstance(part, dict) and part.get("type") == "output_text")
    state, detail = _holds(text, "output_text")
    return state, detail, None


#: Responses events that OpenAI numbers by output item: an SDK's accumulator indexes by it.
INDEXED = ("response.output_item.added", "response.output_item.done", "response.content_part.added",
           "response.content_part.done", "response.output_text.delta", "response.output_text.done")


def judge_responses_stream(ex: Any) -> Judged:
    events = _events(ex)
    if events is None:
        return "ignored", "200 without a stream of JSON events", None
    for e in events:
        kind = e.get("type") if isinstance(e, dict) else None
        if not isinstance(kind, str):
            return "ignored", f"an event without a type: {json.dumps(e)[:80]}", None
        if not isinstance(e.get("sequence_number"), int):
            return "ignored", f"{kind} without sequence_number", None
        if kind in INDEXED and not isinstance(e.get("output_index"), int):
            return "ignored", f"{kind} without output_index", None
    last = events[-1].get("type") if events else None
    if last not in ("response.completed", "response.incomplete", "response.failed"):
        return "ignored", f"the stream ends with {last}", None
    return "served", f"numbered events, ending with {last}", None


def accepted(ex: Any) -> Judged:
    return "served", "200", None


def _run(name: str, send: Send, endpoint: str, fields: dict[str, Any], judge: Callable[[Any], Judged], record: Any) -> Any:
    ex = send(endpoint, fields)
    if ex is None:  # the transport failed; send recorded it
        return None
    state_detail = _status(ex)
    state, detail, value = (*state_detail, None) if state_detail else judge(ex)
    record(name, state, ex, detail, value)
    return ex if state == "served" else None


def _thinking_off(send: Send, plain: dict[str, Any], record: Any) -> tuple[dict[str, Any], Any] | None:
    """The first switch that brings the plain answer back as content (with that answer), or None."""
    last = None
    for fields in THINKING_OFF:
        ex = send("chat", {**plain, **fields})
        if ex is None:
            continue
        last = ex
        if ex.status == 200 and EXPECT in chat_content(ex).lower() and not _reasoning(ex):
            record("thinking_off", "served", ex, f"{json.dumps(fields)} brings the answer back as content", fields)
            return fields, ex
    if last is not None:
        record("thinking_off", "ignored", last, "no switch tried brings the answer back as content", None)
    return None


def follow_up(send: Send, served: Callable[[str], bool], record: Any) -> None:
    """Run every usability probe that its prerequisites allow. `send(endpoint, fields)` returns
    the Exchange (or None when the transport failed, which it records itself); `served(name)`
    reads a finding so far; `record(name, state, exchange, detail, value)` files one."""
    if not served("chat"):
        return
    plain = {"messages": [{"role": "user", "content": PLAIN}], "max_tokens": 20}
    ex = send("chat", plain)
    if ex is None:
        return
    st = _status(ex)
    state, detail, _ = (*st, None) if st else judge_chat_text(ex)
    record("chat_text", state, ex, detail, None)
    off: dict[str, Any] = {}
    if state == "ignored" and _reasoning(ex) and (switched := _thinking_off(send, plain, record)):
        off, ex = switched
    _stop(send, {**plain, **off}, ex, record)
    _tools(send, served, off, record)
    _messages(send, served, off, record)
    _responses(send, served, off, record)


def _stop(send: Send, plain: dict[str, Any], answered: Any, record: Any) -> None:
    """Stop at the second word of the plain answer, which without the stop comes back."""
    words = chat_content(answered).split() if answered is not None and answered.status == 200 else []
    if len(words) < 2:
        _run("stop_list", send, "chat", {**plain, "stop": ["\n\n", "END", "###", "User:"]}, accepted, record)
        return
    word = words[1]

    def judge(ex: Any) -> Judged:
        content = chat_content(ex)
        if word in content:
            return "ignored", f"stop {word!r} came back: content {content[:60]!r}", None
        return "served", f"the answer stops before {word!r}", None
    _run("stop_list", send, "chat", {**plain, "stop": [word, "###", "User:", "END"]}, judge, record)


def _tools(send: Send, served: Callable[[str], bool], off: dict[str, Any], record: Any) -> None:
    if not served("tools"):
        return
    ask = {"messages": [{"role": "user", "content": WEATHER}], "tools": [TOOL], "max_tokens": 100, **off}
    ex = _run("tool_call", send, "chat", ask, judge_tool_call, record)
    if ex is None:
        return
    call = judge_tool_call(ex)[2]
    history = [*ask["messages"], {"role": "assistant", "content": None, "tool_calls": [call]},
               {"role": "tool", "tool_call_id": call["id"], "content": "Sunny, 21 degrees."}]
    _run("tool_result", send, "chat", {**ask, "messages": history}, judge_tool_result, record)
    if served("streaming"):
        _run("tool_call_stream", send, "chat", {**ask, "stream": True}, judge_tool_call_stream, record)


def _messages(send: Send, served: Callable[[str], bool], off: dict[str, Any], record: Any) -> None:
    if not served("messages"):
        return
    plain = {"messages": [{"role": "user", "content": PLAIN}], "max_tokens": 20, **off}
    _run("messages_text", send, "messages", plain, judge_messages_text, record)
    blocks = [{"role": "user", "content": [{"type": "text", "text": PLAIN}]}]
    _run("messages_blocks", send, "messages", {**plain, "messages": blocks}, accepted, record)
    _run("messages_stream", send, "messages", {**plain, "stream": True}, judge_messages_stream, record)


def _responses(send: Send, served: Callable[[str], bool], off: dict[str, Any], record: Any) -> None:
    if not served("responses"):
        return
    plain = {"input": PLAIN, "max_output_tokens": 20, **off}
    _run("responses_text", send, "responses", plain, judge_responses_text, record)
    history = [{"role": "user", "content": "Repeat exactly: hello"}, {"role": "assistant", "content": "hello"},
               {"role": "user", "content": PLAIN}]
    _run("responses_history", send, "responses", {**plain, "input": history}, accepted, record)
    _run("responses_stream", send, "responses", {**plain, "stream": True}, judge_responses_stream, record)
    parent = send("responses", {**plain, "store": True})
    parent_id = (_doc(parent) or {}).get("id") if parent is not None and parent.status == 200 else None
    if not isinstance(parent_id, str):
        return
    ex = send("responses", {**plain, "input": "Repeat exactly: world", "previous_response_id": parent_id})
    if ex is None:
        return
    if ex.status == 200:
        record("responses_chain_stored", "served", ex, "a child of the response just stored is answered", None)
    else:  # the id was just handed out: a 404 or not_found here means nothing was stored
        record("responses_chain_stored", "ignored", ex,
               f"a child of the response just stored (store: true) answered {ex.status}", None)
