"""The usability probes (conformance/usability.py) against servers faked from what real ones did
(issue 53, "settings proven"): each server takes a feature it does not deliver, and the derived
settings must leave that feature out. The exchanges are modelled on the evidence in
docs/clients/faults.yaml; the reference server's own derivation is tested live in
tests/test_sdk_clients.py and tests/test_conform_http.py."""
from __future__ import annotations

import json
from typing import Any

from conformance.exchange import Exchange
from conformance.report import all_of, client_settings, compat_profile, tools_usable
from conformance.usability import PLAIN, follow_up

CALL = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}


def _json(status: int, doc: Any) -> Exchange:
    return Exchange("POST", "/", {}, b"{}", status, {"content-type": "application/json"}, json.dumps(doc).encode())


def _sse(events: list[Any], done: bool = True, named: bool = False) -> Exchange:
    """A stream; NAMED gives each event an `event:` line with its type, as Anthropic's and
    OpenAI's Responses streams do."""
    def one(e: Any) -> bytes:
        head = f"event: {e['type']}\n".encode() if named else b""
        return head + b"data: " + json.dumps(e).encode() + b"\n\n"
    body = b"".join(one(e) for e in events) + (b"data: [DONE]\n\n" if done else b"")
    return Exchange("POST", "/", {}, b"{}", 200, {"content-type": "text/event-stream"}, body)


def chat(content: str | None, calls: list[Any] | None = None, reasoning: str | None = None) -> Exchange:
    msg: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        msg["tool_calls"] = calls
    if reasoning:
        msg["reasoning"] = reasoning
    return _json(200, {"choices": [{"index": 0, "message": msg, "finish_reason": "stop"}]})


def chat_stream(finish: bool = True, parallel: bool = False) -> Exchange:
    deltas = [{"tool_calls": [{"index": 0, "id": "call_1", "function": {"name": "get_weather", "arguments": ""}}]},
              {"tool_calls": [{"index": 0, "function": {"arguments": '{"city": "Paris"}'}}]}]
    if parallel:  # a second call, index 1, after the first
        deltas += [{"tool_calls": [{"index": 1, "id": "call_2", "function": {"name": "get_weather", "arguments": ""}}]},
                   {"tool_calls": [{"index": 1, "function": {"arguments": '{"city": "Lyon"}'}}]}]
    events = [{"choices": [{"index": 0, "delta": d, "finish_reason": None}]} for d in deltas]
    if finish:
        events.append({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})
    return _sse(events)


def _block(index: int, kind: str, text: str) -> list[dict[str, Any]]:
    delta = {"type": "thinking_delta", "thinking": text} if kind == "thinking" else {"type": "text_delta", "text": text}
    return [{"type": "content_block_start", "index": index, "content_block": {"type": kind}},
            {"type": "content_block_delta", "index": index, "delta": delta},
            {"type": "content_block_stop", "index": index}]


#: A thinking block, then the text, with pings between: the official shape of a reasoning answer.
MESSAGES_STREAM = [{"type": "message_start", "message": {}}, {"type": "ping"}, *_block(0, "thinking", "hm"),
                   {"type": "ping"}, *_block(1, "text", "hello world"), {"type": "message_delta", "delta": {}},
                   {"type": "message_stop"}]
ITEM = {"id": "msg_1", "type": "message"}
RESPONSES_STREAM = [
    {"type": "response.created", "sequence_number": 0, "response": {}},
    {"type": "response.output_item.added", "sequence_number": 1, "output_index": 0, "item": ITEM},
    {"type": "response.content_part.added", "sequence_number": 2, "output_index": 0, "content_index": 0, "item_id": "msg_1"},
    {"type": "response.output_text.delta", "sequence_number": 3, "output_index": 0, "content_index": 0, "item_id": "msg_1",
     "delta": "hello"},
    {"type": "response.content_part.done", "sequence_number": 4, "output_index": 0, "content_index": 0, "item_id": "msg_1"},
    {"type": "response.output_item.done", "sequence_number": 5, "output_index": 0, "item": ITEM},
    {"type": "response.completed", "sequence_number": 6, "response": {}}]


class Server:
    """A fake server: answers like the reference server unless a quirk is named."""

    def __init__(self, *quirks: str):
        self.quirks = set(quirks)
        self.sent: list[tuple[str, dict[str, Any]]] = []

    def send(self, endpoint: str, fields: dict[str, Any]) -> Exchange:
        self.sent.append((endpoint, fields))
        return getattr(self, endpoint)(fields)

    def chat(self, f: dict[str, Any]) -> Exchange:
        q = self.quirks
        if "reasoning-by-default" in q and f.get("chat_template_kwargs") != {"enable_thinking": False}:
            return chat(None, reasoning="hello world")  # vLLM's qwen3 parser, thinking left on
        if f.get("tools"):
            if f.get("stream"):
                if "malformed-stream" in q:
                    return _sse([{"choices": [None]}])
                return chat_stream(finish="no-finish" not in q, parallel="parallel" in q)
            if f["messages"][-1]["role"] == "tool":
                if "empty-result" in q:
                    return chat("")
                return _json(500, {"detail": "validation"}) if "500-on-result" in q else chat("Sunny.")
            if "call-as-text" in q:
                return chat('<tool_call>{"name": "get_weather"}</tool_call>')
            if "no-call-id" in q:
                return chat(None, [{k: v for k, v in CALL.items() if k != "id"}])
            if "bad-arguments" in q:
                return chat(None, [{**CALL, "function": {"name": "get_weather", "arguments": '{"city": "Pa\nris"'}}])
            return chat(None, [CALL])
        if f.get("stop") and "ignores-stop" not in q:
            return chat("hello ")
        if "one-word" in q:
            return chat("hello")
        return chat("This is a mock response." if "mock" in q else "hello world")

    def messages(self, f: dict[str, Any]) -> Exchange:
        if isinstance(f["messages"][0]["content"], list) and "500-on-blocks" in self.quirks:
            return Exchange("POST", "/", {}, b"{}", 500, {"content-type": "text/plain"}, b"Internal Server Error")
        if "chat-template-field-refused" in self.quirks and "chat_template_kwargs" in f:
            return _json(400, {"type": "error", "error": {"type": "invalid_request_error", "message": "unknown field"}})
        if f.get("stream"):
            bad = [{"type": "message_start"}, {"type": "message_delta", "delta": {"type": "content_block_delta"}},
                   {"type": "message_stop"}]
            return _sse(bad if "broken-messages-stream" in self.quirks else MESSAGES_STREAM, done=False, named=True)
        if "thinking-everywhere" in self.quirks and "chat_template_kwargs" not in f:
            return _json(200, {"content": [{"type": "thinking", "thinking": "hello world"}]})
        return _json(200, {"content": [{"type": "text", "text": "hello world"}]})

    def responses(self, f: dict[str, Any]) -> Exchange:
        q = self.quirks
        if f.get("previous_response_id") and "stores-nothing" in q:
            return _json(404, {"error": {"message": "Response with id not found", "type": "invalid_request_error"}})
        if isinstance(f["input"], list) and any(m["role"] == "assistant" for m in f["input"]) and "typed-items-only" in q:
            return _json(400, {"error": {"message": "Cannot determine type of 'item'", "type": "invalid_request_error"}})
        if f.get("stream"):
            events = RESPONSES_STREAM
            if "no-terminal" in q:
                events = events[:-1]
            if "unnumbered-events" in q:
                events = [{k: v for k, v in e.items() if k not in ("output_index", "sequence_number")} for e in events]
            return _sse(events, done=False, named=True)
        if "parent-is-a-list" in q and f.get("store"):
            return _json(200, ["resp_1"])
        return _json(200, {"id": "resp_1", "output": [{"type": "message", "content": [{"type": "output_text", "text": "hello world"}]}]})


def derived(*quirks: str, served: tuple[str, ...] = ("chat", "tools", "streaming", "messages", "responses",
                                                    "responses_chaining")):
    server, found = Server(*quirks), {}
    for name in served:
        found[name] = {"state": "served"}

    def record(name, state, ex, detail, value):
        found[name] = {"state": state, "status": ex.status, "detail": detail, **({"value": value} if value else {})}
    follow_up(server.send, lambda n: found.get(n, {}).get("state") == "served", record)
    return found, compat_profile(found), server


def test_the_reference_behaviour_delivers_everything():
    found, profile, _ = derived()
    assert all(profile["delivers"].values()), profile["delivers"]
    assert profile["thinking_off"] is None and profile["openai_sdk"]["tools"] is True
    assert profile["openai_sdk"]["anthropic_messages"] is True


def test_stop_list_is_judged_by_the_answer_not_by_the_status():
    # transformers serve: stop ["gamma"] taken, "alpha beta gamma" came back
    found, profile, server = derived("ignores-stop")
    assert found["stop_list"]["state"] == "ignored" and profile["stop_up_to_4"] is False
    assert found["stop_list"]["detail"] == "stop 'world' came back: content 'hello world'"
    stop = next(f["stop"] for e, f in server.sent if f.get("stop"))
    assert stop == ["world", "###", "User:", "END"]  # the second word of the plain answer, then 3 more


def test_tools_are_on_only_when_a_call_comes_back_and_its_result_is_answered():
    for quirk, probe, detail in (
            ("call-as-text", "tool_call", "200 without a call, content '<tool_call>{\"name\": \"get_weather\"}</tool_call>'"),
            ("bad-arguments", "tool_call", "200, get_weather called with arguments that are not a JSON object: '{\"city\": \"Pa\\nris\"'"),
            ("500-on-result", "tool_result", "answers 500")):
        found, profile, _ = derived(quirk)
        assert (found[probe]["state"], found[probe]["detail"]) == ("ignored" if quirk != "500-on-result" else "error", detail)
        assert profile["openai_sdk"]["tools"] is False, quirk
    found, profile, _ = derived("no-finish")  # llama-cpp-python's tool-call stream
    assert found["tool_call_stream"]["detail"] == "get_weather called, but no chunk carries a finish_reason"
    assert profile["openai_sdk"]["tools"] is True and profile["delivers"]["tool_call_stream"] is False


def test_a_plain_answer_filed_as_reasoning_finds_the_switch_that_brings_it_back():
    # vLLM, qwen3 reasoning parser: content null, the answer under reasoning, unless the chat
    # template is told thinking is off
    found, profile, server = derived("reasoning-by-default")
    assert found["chat_text"]["state"] == "ignored"
    assert found["thinking_off"]["value"] == {"chat_template_kwargs": {"enable_thinking": False}}
    assert profile["thinking_off"] == profile["openai_sdk"]["thinking_off"] == {"chat_template_kwargs": {"enable_thinking": False}}
    assert profile["pi_compat"]["thinkingFormat"] == "qwen-chat-template"
    assert profile["delivers"]["stop_list"] is True and profile["openai_sdk"]["tools"] is True
    later = [f for e, f in server.sent if e == "chat" and f.get("tools")]
    assert later and all(f["chat_template_kwargs"] == {"enable_thinking": False} for f in later)


def test_no_switch_leaves_the_plain_answer_unusable_and_the_profile_says_so():
    found, profile, _ = derived("mock")
    assert found["chat_text"] == {"state": "ignored", "status": 200, "detail": "200, content 'This is a mock response.'"}
    assert "thinking_off" not in found and profile["delivers"]["chat_text"] is False


def test_anthropic_blocks_and_stream_order_are_judged_apart_from_the_endpoint():
    # mockllm: 500 to content blocks, and message_delta events that carry the text
    found, profile, _ = derived("500-on-blocks", "broken-messages-stream")
    assert found["messages_blocks"]["state"] == "error" and profile["delivers"]["messages_blocks"] is False
    assert profile["openai_sdk"]["anthropic_messages"] is True  # the endpoint answers strings
    assert found["messages_stream"]["state"] == "ignored"
    assert found["messages_stream"]["detail"] == "no content_block_delta: the stream carries no block to assemble"


def test_a_thinking_block_before_the_text_and_pings_are_a_well_ordered_stream():
    found, _, _ = derived()
    assert found["messages_stream"] == {"state": "served", "status": 200, "detail": "events in the official order"}


def test_responses_streams_need_indexed_items_and_history_needs_untyped_items():
    # llama-server: no output_index (nor sequence_number, which rule resp.stream.sequence judges);
    # "Cannot determine type of 'item'"
    found, profile, _ = derived("unnumbered-events", "typed-items-only")
    assert found["responses_stream"]["detail"] == "expected output_index 0 for the next item, got None"
    assert (found["responses_history"]["state"], found["responses_history"]["status"]) == ("refused", 400)
    assert profile["delivers"]["responses_text"] is True


def test_a_responses_stream_that_never_ends_is_not_usable():
    found, _, _ = derived("no-terminal")
    assert found["responses_stream"]["detail"] == "the stream ends with response.output_item.done"


def test_a_tool_result_answered_with_nothing_leaves_tools_off():
    found, profile, _ = derived("empty-result")
    assert found["tool_result"]["detail"] == "200 with neither content nor a call"
    assert profile["openai_sdk"]["tools"] is False


def test_chaining_needs_the_stored_parent_to_be_found():
    # vLLM without VLLM_ENABLE_RESPONSES_API_STORE: store: true is ignored, the child gets a 404
    found, profile, server = derived("stores-nothing")
    assert found["responses_chain_stored"]["detail"] == "a child of the response just stored (store: true) answered 404"
    assert profile["delivers"]["responses_chain_stored"] is False
    parent = next(f for e, f in server.sent if e == "responses" and f.get("store"))
    assert parent["input"] == PLAIN
    found, _, server = derived(served=("chat", "responses"))  # previous_response_id refused by name
    assert "responses_chain_stored" not in found and not any(f.get("store") for e, f in server.sent)


def test_the_thinking_switch_goes_only_where_the_plain_answer_needs_it():
    found, profile, server = derived("reasoning-by-default")  # chat files the answer as reasoning; Messages does not
    assert profile["openai_sdk"]["thinking_off_surfaces"] == ["chat"]
    assert not any("chat_template_kwargs" in f for e, f in server.sent if e == "messages")
    found, profile, server = derived("reasoning-by-default", "thinking-everywhere")
    assert profile["openai_sdk"]["thinking_off_surfaces"] == ["chat", "messages"]
    assert found["messages_text"]["detail"] == \
        "'hello world' in text blocks, with {\"chat_template_kwargs\": {\"enable_thinking\": false}}"
    streamed = next(f for e, f in server.sent if e == "messages" and f.get("stream"))
    assert streamed["chat_template_kwargs"] == {"enable_thinking": False}


def test_a_surface_that_refuses_the_switch_keeps_its_plain_answer():
    found, profile, _ = derived("reasoning-by-default", "chat-template-field-refused")
    assert found["messages_text"]["state"] == "served" and profile["openai_sdk"]["thinking_off_surfaces"] == ["chat"]


def test_parallel_streamed_calls_are_assembled_by_index():
    found, _, _ = derived("parallel")
    assert found["tool_call_stream"]["detail"] == "get_weather called, finish_reason tool_calls"


def test_a_call_without_an_id_cannot_be_answered():
    found, profile, _ = derived("no-call-id")
    assert found["tool_call"]["detail"] == "200, get_weather called without an id" and profile["openai_sdk"]["tools"] is False


def test_a_malformed_answer_is_not_delivered_and_the_probes_go_on():
    found, profile, _ = derived("malformed-stream", "parent-is-a-list")
    assert found["tool_call_stream"]["state"] == "ignored"
    assert found["tool_call_stream"]["detail"].startswith("an answer the probe cannot read (AttributeError")
    assert "responses_chain_stored" not in found and profile["delivers"]["responses_stream"] is True


def test_a_one_word_answer_leaves_stop_taken_but_not_judged():
    found, _, server = derived("one-word")
    assert found["stop_list"]["detail"] == "200; not judged whether it stops (the plain answer has under two words)"
    assert next(f["stop"] for e, f in server.sent if f.get("stop")) == ["\n\n", "END", "###", "User:"]


def test_all_of_is_false_on_one_failure_and_unknown_on_one_unknown():
    assert all_of(True, True) is True and all_of(True, None) is None and all_of(None, False) is False


def test_settings_from_old_reports_without_usability_probes_keep_tools():
    # A report from before these probes has no tool_call finding: tools are unknown, not
    # disproved, and the settings and the scenarios both let a client use them.
    found = {"tools": {"state": "served"}}
    assert client_settings(found)["openai_sdk"]["tools"] is True and tools_usable(found) is None
    assert client_settings({"tools": {"state": "refused"}})["openai_sdk"]["tools"] is False
