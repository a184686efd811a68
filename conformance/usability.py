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
from types import SimpleNamespace
from typing import Any, cast

from .checks.anthropic import anthropic_event_order
from .checks.core import CheckContext, CheckFailure
from .checks.responses import TERMINAL, responses_stream_brackets

#: The plain prompt and the text a model that follows it answers (the clients' text scenario).
PLAIN, EXPECT = "Repeat exactly: hello world", "hello world"
TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
WEATHER = "What is the weather in Paris?"
#: Request fields that switch thinking off, in the order they are tried, and pi's thinkingFormat
#: that sends each (pi-ai 0.73.1, providers/openai-completions.js): the chat template's own switch
#: (vLLM, SGLang), the top-level one (Qwen's API), the Z.ai/DeepSeek object, OpenAI's.
THINKING_OFF = (({"chat_template_kwargs": {"enable_thinking": False}}, "qwen-chat-template"),
                ({"enable_thinking": False}, "qwen"), ({"thinking": {"type": "disabled"}}, "deepseek"),
                ({"reasoning_effort": "none"}, "openai"))
#: The surfaces a plain answer is asked on, each with the probe that judges it.
SURFACES = {"chat": "chat_text", "messages": "messages_text", "responses": "responses_text"}

#: The usability probes, in the order they run, and what each tells. The compat profile's
#: `delivers` block has one entry per probe but thinking_off (whose finding is the switch itself).
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
    "responses_stream": "Responses stream events carry the output_index and content_index SDKs index by, and end with a terminal event",
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


def chat_message(doc: Any) -> dict[str, Any]:
    """choices[0].message of a chat answer, or {} when it has none."""
    choices = doc.get("choices") if isinstance(doc, dict) else None
    msg = choices[0].get("message") if choices and isinstance(choices[0], dict) else None
    return msg if isinstance(msg, dict) else {}


def reasoning_field(msg: dict[str, Any]) -> str | None:
    """The field a chat message carries its reasoning text in (servers differ), or None."""
    return next((f for f in ("reasoning_content", "reasoning") if isinstance(msg.get(f), str) and msg[f]), None)


def chat_content(ex: Any) -> str:
    content = chat_message(_doc(ex)).get("content")
    return content if isinstance(content, str) else ""


def _reasoning(ex: Any) -> str:
    msg = chat_message(_doc(ex))
    field = reasoning_field(msg)
    return msg[field] if field else ""


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
    calls = _calls(chat_message(_doc(ex)))
    if not calls:
        return "ignored", f"200 without a call, content {chat_content(ex)[:60]!r}", None
    fn = calls[0]["function"]
    if not isinstance(calls[0].get("id"), str):  # the tool result must name the call it answers
        return "ignored", f"200, {fn.get('name')} called without an id", None
    if not _arguments_ok(fn.get("arguments")):
        return "ignored", f"200, {fn.get('name')} called with arguments that are not a JSON object: {fn.get('arguments')!r}", None
    return "served", f"{fn.get('name')} called", {"id": calls[0].get("id"), "type": "function", "function": fn}


def judge_tool_result(ex: Any) -> Judged:
    msg = chat_message(_doc(ex))
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
    """The first call assembled from its deltas (by index: parallel calls are told apart), as
    an SDK's accumulator builds it."""
    events = _events(ex)
    if events is None:
        return "ignored", "200 without a stream of JSON events", None
    calls: dict[Any, list[str]] = {}  # index -> [name, arguments]
    finish = None
    for doc in events:
        for choice in doc.get("choices") or [] if isinstance(doc, dict) else []:
            finish = choice.get("finish_reason") or finish
            for call in (choice.get("delta") or {}).get("tool_calls") or []:
                fn = call.get("function") or {}
                parts = calls.setdefault(call.get("index"), ["", ""])
                parts[0] += fn.get("name") or ""
                parts[1] += fn.get("arguments") or ""
    if not calls:
        return "ignored", "the stream assembles no call", None
    name, args = next(iter(calls.values()))
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


def _context(ex: Any) -> CheckContext:
    """What the suite's stream checks read of their context: only the exchange."""
    return cast(CheckContext, SimpleNamespace(exchange=ex))


def judge_messages_stream(ex: Any) -> Judged:
    """The suite's own event-order check (msgs.stream.event_order): the Anthropic SDKs dispatch
    on the event name and assemble each block between its start and stop; pings and several
    blocks (thinking, then text) are in order."""
    try:
        anthropic_event_order(_context(ex))
    except CheckFailure as e:
        return "ignored", f"expected {e.expected}, got {str(e.actual)[:100]}", None
    if not any(e.event == "content_block_delta" for e in ex.events()):  # order alone delivers nothing
        return "ignored", "no content_block_delta: the stream carries no block to assemble", None
    return "served", "events in the official order", None


def judge_responses_text(ex: Any) -> Judged:
    doc = _doc(ex)
    text = "".join(part.get("text") or "" for item in (doc.get("output") if isinstance(doc, dict) else None) or []
                   if isinstance(item, dict) and item.get("type") == "message"
                   for part in item.get("content") or [] if isinstance(part, dict) and part.get("type") == "output_text")
    state, detail = _holds(text, "output_text")
    return state, detail, None


def judge_responses_stream(ex: Any) -> Judged:
    """What the SDKs' stream accumulators index by (output_index, content_index, the item ids:
    the suite's resp.stream.brackets check) and a terminal event to end on. sequence_number,
    which only a resumed stream reads, is left to rule resp.stream.sequence."""
    try:
        responses_stream_brackets(_context(ex))
    except CheckFailure as e:
        return "ignored", f"expected {e.expected}, got {str(e.actual)[:100]}", None
    events = _events(ex) or []
    last = events[-1].get("type") if events and isinstance(events[-1], dict) else None
    if last not in TERMINAL:
        return "ignored", f"the stream ends with {last}", None
    return "served", f"items and parts indexed, ending with {last}", None


#: What a judge raises on an answer shaped unlike any API's (a number for a name, a list for a
#: body): the probe files it as not delivered rather than stopping the run.
MALFORMED = (AttributeError, TypeError, ValueError, KeyError, IndexError)


def _judged(ex: Any, judge: Callable[[Any], Judged]) -> Judged:
    state_detail = _status(ex)
    if state_detail:
        return (*state_detail, None)
    try:
        return judge(ex)
    except MALFORMED as e:
        return "ignored", f"an answer the probe cannot read ({type(e).__name__}: {str(e)[:80]})", None


def _run(name: str, send: Send, endpoint: str, fields: dict[str, Any], judge: Callable[[Any], Judged], record: Any) -> Any:
    """Send, judge, file; the exchange when served, else None (a transport failure files nothing:
    the probe stays unknown)."""
    ex = send(endpoint, fields)
    if ex is None:
        return None
    state, detail, value = _judged(ex, judge)
    record(name, state, ex, detail, value)
    return ex if state == "served" else None


def _thinking_off(send: Send, plain: dict[str, Any], record: Any) -> tuple[dict[str, Any], Any] | None:
    """The first switch that brings the plain answer back as content (with that answer), or None."""
    tried = []
    for fields, _ in THINKING_OFF:
        ex = send("chat", {**plain, **fields})
        if ex is None:
            continue
        tried.append(ex)
        if ex.status == 200 and EXPECT in chat_content(ex).lower() and not _reasoning(ex):
            record("thinking_off", "served", ex, f"{json.dumps(fields)} brings the answer back as content", fields)
            return fields, ex
    if tried:
        refused = all(400 <= ex.status < 500 for ex in tried)
        record("thinking_off", "refused" if refused else "ignored", tried[-1],
               "every switch tried was refused" if refused else "no switch tried brings the answer back as content", None)
    return None


def follow_up(send: Send, served: Callable[[str], bool], record: Any) -> None:
    """Run every usability probe that its prerequisites allow. `send(endpoint, fields)` returns
    the Exchange, or None when the transport failed; `served(name)` reads a finding so far;
    `record(name, state, exchange, detail, value)` files one."""
    if not served("chat"):
        return
    plain = {"messages": [{"role": "user", "content": PLAIN}], "max_tokens": 20}
    ex = send("chat", plain)
    if ex is None:
        return
    state, detail, _ = _judged(ex, judge_chat_text)
    record("chat_text", state, ex, detail, None)
    off: dict[str, Any] = {}
    if state == "ignored" and _reasoning(ex) and (switched := _thinking_off(send, plain, record)):
        off, ex = switched
    _stop(send, {**plain, **off}, ex, record)
    _tools(send, served, off, record)
    if served("messages"):
        _messages(send, _plain_on(send, "messages", off, record), record)
    if served("responses"):
        _responses(send, served, _plain_on(send, "responses", off, record), record)


def _plain_on(send: Send, endpoint: str, off: dict[str, Any], record: Any) -> dict[str, Any]:
    """The plain request on a surface, and its probe filed: sent as it is first, and with the
    thinking switch only when the answer needs it there (a surface that validates its fields
    may refuse a chat-template field it has no use for). Value "thinking_off" marks a surface
    that needs the switch; the request returned carries it then."""
    plain: dict[str, Any] = ({"messages": [{"role": "user", "content": PLAIN}], "max_tokens": 20} if endpoint == "messages"
                             else {"input": PLAIN, "max_output_tokens": 20})
    judge = judge_messages_text if endpoint == "messages" else judge_responses_text
    ex = send(endpoint, plain)
    judged = _judged(ex, judge) if ex is not None else None
    if off and (judged is None or judged[0] != "served"):
        with_off = send(endpoint, {**plain, **off})
        if with_off is not None and (j := _judged(with_off, judge))[0] == "served":
            record(SURFACES[endpoint], "served", with_off, f"{j[1]}, with {json.dumps(off)}", "thinking_off")
            return {**plain, **off}
    if judged is not None:
        record(SURFACES[endpoint], judged[0], ex, judged[1], None)
    return plain


def _stop(send: Send, plain: dict[str, Any], answered: Any, record: Any) -> None:
    """Stop at the second word of the plain answer, which without the stop comes back."""
    words = chat_content(answered).split() if answered is not None and answered.status == 200 else []
    if len(words) < 2:
        def taken(ex: Any) -> Judged:
            return "served", "200; not judged whether it stops (the plain answer has under two words)", None
        _run("stop_list", send, "chat", {**plain, "stop": ["\n\n", "END", "###", "User:"]}, taken, record)
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


def accepted(ex: Any) -> Judged:
    return "served", "200", None


def _messages(send: Send, plain: dict[str, Any], record: Any) -> None:
    blocks = [{"role": "user", "content": [{"type": "text", "text": PLAIN}]}]
    _run("messages_blocks", send, "messages", {**plain, "messages": blocks}, accepted, record)
    _run("messages_stream", send, "messages", {**plain, "stream": True}, judge_messages_stream, record)


def _responses(send: Send, served: Callable[[str], bool], plain: dict[str, Any], record: Any) -> None:
    history = [{"role": "user", "content": "Repeat exactly: hello"}, {"role": "assistant", "content": "hello"},
               {"role": "user", "content": PLAIN}]
    _run("responses_history", send, "responses", {**plain, "input": history}, accepted, record)
    _run("responses_stream", send, "responses", {**plain, "stream": True}, judge_responses_stream, record)
    if not served("responses_chaining"):  # previous_response_id refused or ignored by name: nothing to chain
        return
    parent = send("responses", {**plain, "store": True})
    try:
        parent_id = parent.json().get("id") if parent is not None and parent.status == 200 else None
    except MALFORMED:
        parent_id = None
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
