"""The usability probes (conformance/usability.py) against servers faked from what real ones did
(issue 53, "settings proven"): each server takes a feature it does not deliver, and the derived
settings must leave that feature out. The exchanges are modelled on the evidence in
docs/clients/faults.yaml; the reference server's own derivation is tested live in
tests/test_sdk_clients.py and tests/test_conform_http.py."""
from __future__ import annotations

import json
from typing import Any

from conformance.exchange import Exchange
from conformance.report import all_of, client_settings, compat_profile
from conformance.usability import PLAIN, follow_up

CALL = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}


def _json(status: int, doc: Any) -> Exchange:
    return Exchange("POST", "/", {}, b"{}", status, {"content-type": "application/json"}, json.dumps(doc).encode())


def _sse(events: list[Any], done: bool = True) -> Exchange:
    body = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events) + (b"data: [DONE]\n\n" if done else b"")
    return Exchange("POST", "/", {}, b"{}", 200, {"content-type": "text/event-stream"}, body)


def chat(content: str | None, calls: list[Any] | None = None, reasoning: str | None = None) -> Exchange:
    msg: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        msg["tool_calls"] = calls
    if reasoning:
        msg["reasoning"] = reasoning
    return _json(200, {"choices": [{"index": 0, "message": msg, "finish_reason": "stop"}]})


def chat_stream(finish: bool = True) -> Exchange:
    deltas = [{"tool_calls": [{"index": 0, "id": "call_1", "function": {"name": "get_weather", "arguments": ""}}]},
              {"tool_calls": [{"index": 0, "function": {"arguments": '{"city": "Paris"}'}}]}]
    events = [{"choices": [{"index": 0, "delta": d, "finish_reason": None}]} for d in deltas]
    if finish:
        events.append({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})
    return _sse(events)


MESSAGES_STREAM = [{"type": "message_start"}, {"type": "content_block_start"}, {"type": "content_block_delta"},
                   {"type": "content_block_delta"}, {"type": "content_block_stop"}, {"type": "message_delta"},
                   {"type": "message_stop"}]
RESPONSES_STREAM = [{"type": "response.created", "sequence_number": 0},
                    {"type": "response.output_item.added", "sequence_number": 1, "output_index": 0},
                    {"type": "response.output_text.delta", "sequence_number": 2, "output_index": 0, "delta": "hello"},
                    {"type": "response.completed", "sequence_number": 3}]


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
                return chat_stream(finish="no-finish" not in q)
            if f["messages"][-1]["role"] == "tool":
                return _json(500, {"detail": "validation"}) if "500-on-result" in q else chat("Sunny.")
            if "call-as-text" in q:
                return chat('<tool_call>{"name": "get_weather"}</tool_call>')
            if "bad-arguments" in q:
                return chat(None, [{**CALL, "function": {"name": "get_weather", "arguments": '{"city": "Pa\nris"'}}])
            return chat(None, [CALL])
        if f.get("stop") and "ignores-stop" not in q:
            return chat("hello ")
        return chat("This is a mock response." if "mock" in q else "hello world")

    def messages(self, f: dict[str, Any]) -> Exchange:
        if isinstance(f["messages"][0]["content"], list) and "500-on-blocks" in self.quirks:
            return Exchange("POST", "/", {}, b"{}", 500, {"content-type": "text/plain"}, b"Internal Server Error")
        if f.get("stream"):
            bad = [{"type": "message_start"}, {"type": "message_delta", "delta": {"type": "content_block_delta"}},
                   {"type": "message_stop"}]
            return _sse(bad if "broken-messages-stream" in self.quirks else MESSAGES_STREAM, done=False)
        return _json(200, {"content": [{"type": "text", "text": "hello world"}]})

    def responses(self, f: dict[str, Any]) -> Exchange:
        q = self.quirks
        if f.get("previous_response_id") and "stores-nothing" in q:
            return _json(404, {"error": {"message": "Response with id not found", "type": "invalid_request_error"}})
        if isinstance(f["input"], list) and any(m["role"] == "assistant" for m in f["input"]) and "typed-items-only" in q:
            return _json(400, {"error": {"message": "Cannot determine type of 'item'", "type": "invalid_request_error"}})
        if f.get("stream"):
            events = RESPONSES_STREAM
            if "unnumbered-events" in q:
                events = [{k: v for k, v in e.items() if k not in ("output_index", "sequence_number")} for e in events]
            return _sse(events, done=False)
        return _json(200, {"id": "resp_1", "output": [{"type": "message", "content": [{"type": "output_text", "text": "hello world"}]}]})


def derived(*quirks: str, served: tuple[str, ...] = ("chat", "tools", "streaming", "messages", "responses")):
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


def test_anthropic_messages_need_block_content_and_a_well_ordered_stream():
    # mockllm: 500 to content blocks, and message_delta events that carry the text
    found, profile, _ = derived("500-on-blocks", "broken-messages-stream")
    assert found["messages_blocks"]["state"] == "error" and profile["openai_sdk"]["anthropic_messages"] is False
    assert found["messages_stream"]["detail"] == "events ['message_start', 'message_delta', 'message_stop']"


def test_responses_streams_need_numbered_events_and_history_needs_untyped_items():
    # llama-server: no output_index or sequence_number; "Cannot determine type of 'item'"
    found, profile, _ = derived("unnumbered-events", "typed-items-only")
    assert found["responses_stream"]["detail"] == "response.created without sequence_number"
    assert (found["responses_history"]["state"], found["responses_history"]["status"]) == ("refused", 400)
    assert profile["delivers"]["responses_text"] is True


def test_chaining_needs_the_stored_parent_to_be_found():
    # vLLM without VLLM_ENABLE_RESPONSES_API_STORE: store: true is ignored, the child gets a 404
    found, profile, server = derived("stores-nothing")
    assert found["responses_chain_stored"]["detail"] == "a child of the response just stored (store: true) answered 404"
    assert profile["delivers"]["responses_chain_stored"] is False
    parent = next(f for e, f in server.sent if e == "responses" and f.get("store"))
    assert parent["input"] == PLAIN


def test_all_of_is_false_on_one_failure_and_unknown_on_one_unknown():
    assert all_of(True, True) is True and all_of(True, None) is None and all_of(None, False) is False


def test_settings_from_old_reports_without_usability_probes_leave_tools_off():
    # A report from before these probes has no tool_call finding: tools are not proven.
    assert client_settings({"tools": {"state": "served"}})["openai_sdk"]["tools"] is False
