"""The checks behind the tool and reasoning rules that real parsers were found to break (issue 48),
each fed the answer a real server gave: vLLM's glm45 and qwen3 reasoning parsers filing a whole
reply under `reasoning`, and calls that do not follow a tool choice or do not add up in a stream."""
from __future__ import annotations

import json

import pytest

from colibri.spec import load_spec
from conformance.checks import CheckContext, CheckFailure, NotApplicable
from conformance.checks.generation import answer_not_only_in_reasoning
from conformance.checks.tools import (
    tool_call_delta_pieces,
    tool_call_named,
    tool_call_required,
    tool_calls_parallel,
    tools_reach_prompt,
)
from conformance.exchange import Exchange

SPEC = load_spec()
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}}


def _ex(doc, sse=False):
    body = "".join(f"data: {json.dumps(d)}\n\n" for d in doc) + "data: [DONE]\n\n" if sse else json.dumps(doc)
    return Exchange("POST", "/v1/chat/completions", {}, b"{}", 200,
                    {"content-type": "text/event-stream" if sse else "application/json"}, body.encode())


class _Target:
    """Answers the unary resend of a streamed vector with DOC."""

    def __init__(self, doc):
        self.doc = doc

    def send(self, method, path, body, headers):
        return _ex(self.doc)


def ctx(doc, body=None, sse=False, resend=None):
    vector = next(v for r in SPEC.rules for v in r.vectors if v.endpoint == "chat")
    return CheckContext(SPEC, vector, _ex(doc, sse), body or {}, _Target(resend), expect={"status": 200})


def msg(content=None, reasoning=None, calls=(), finish="stop"):
    m = {"role": "assistant", "content": content, "reasoning": reasoning,
         "tool_calls": [{"id": f"c{i}", "type": "function", "function": {"name": n, "arguments": a}}
                        for i, (n, a) in enumerate(calls)]}
    return {"choices": [{"index": 0, "message": m, "finish_reason": finish}]}


def test_answer_filed_whole_under_reasoning_fails():
    # vLLM 0.32, --reasoning-parser glm45, thinking off (the template closed the block in the prompt)
    with pytest.raises(CheckFailure, match="the answer in content"):
        answer_not_only_in_reasoning(ctx(msg(None, "'m marble.")))
    answer_not_only_in_reasoning(ctx(msg("\n\nThe capital is Tűzvár.", "Sárkány is a country.")))
    answer_not_only_in_reasoning(ctx(msg(None, None, [("get_weather", '{"city": "Oslo"}')])))
    with pytest.raises(NotApplicable):  # cut off inside its reasoning: no answer yet
        answer_not_only_in_reasoning(ctx(msg(None, "Sárkány is", finish="length")))


def test_required_and_named_choices_need_the_call():
    body = {"tools": [TIME, WEATHER], "tool_choice": "required"}
    tool_call_required(ctx(msg(None, None, [("get_weather", "{}")]), body))
    with pytest.raises(CheckFailure, match="no call"):
        tool_call_required(ctx(msg("It is sunny."), body))
    with pytest.raises(CheckFailure):
        tool_call_required(ctx(msg(None, None, [("get_forecast", "{}")]), body))
    named = {"tools": [TIME, WEATHER], "tool_choice": {"type": "function", "function": {"name": "get_weather"}}}
    tool_call_named(ctx(msg(None, None, [("get_weather", "{}")], finish="stop"), named))
    with pytest.raises(CheckFailure):
        tool_call_named(ctx(msg(None, None, [("get_time", "{}")]), named))
    with pytest.raises(CheckFailure):
        tool_call_named(ctx(msg("Sunny."), named))


def _chunks(*deltas):
    return [{"choices": [{"index": 0, "delta": d, "finish_reason": None}]} for d in deltas] + [
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}]


def test_stream_argument_pieces_must_add_up_to_the_unary_call():
    unary = msg(None, None, [("get_weather", '{"city": "Oslo"}')], finish="tool_calls")
    good = _chunks({"tool_calls": [{"index": 0, "id": "c0", "type": "function",
                                    "function": {"name": "get_weather", "arguments": ""}}]},
                   {"tool_calls": [{"index": 0, "function": {"arguments": '{"city": '}}]},
                   {"tool_calls": [{"index": 0, "function": {"arguments": '"Oslo"}'}}]})
    tool_call_delta_pieces(ctx(good, {"stream": True}, sse=True, resend=unary))
    doubled = _chunks({"tool_calls": [{"index": 0, "id": "c0", "type": "function",
                                       "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}]},
                      {"tool_calls": [{"index": 0, "function": {"arguments": '{"city": "Oslo"}'}}]})
    with pytest.raises(CheckFailure, match="JSON object"):  # the whole arguments sent twice
        tool_call_delta_pieces(ctx(doubled, {"stream": True}, sse=True, resend=unary))
    new_id = _chunks({"tool_calls": [{"index": 0, "id": "c0", "type": "function",
                                      "function": {"name": "get_weather", "arguments": '{"city": '}}]},
                     {"tool_calls": [{"index": 0, "id": "c9", "function": {"arguments": '"Oslo"}'}}]})
    with pytest.raises(CheckFailure, match="one id"):
        tool_call_delta_pieces(ctx(new_id, {"stream": True}, sse=True, resend=unary))
    other = msg(None, None, [("get_weather", '{"city": "Rome"}')], finish="tool_calls")
    with pytest.raises(CheckFailure, match="unary"):
        tool_call_delta_pieces(ctx(good, {"stream": True}, sse=True, resend=other))


def test_a_call_returned_as_text_is_unsupported_not_inconclusive():
    # transformers serve 5.24 on a llama-type model without a response_template parses nothing:
    # the model's call comes back as content. The server does not parse this model's calls.
    from conformance.checks import Unsupported
    from conformance.checks.tools import arguments_json_string, tool_call_made
    from conformance.runner import _judge

    text = msg('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Drassa"}}\n</tool_call>')
    for check in (tool_call_made, arguments_json_string):
        with pytest.raises(Unsupported, match="returned it as text"):
            check(ctx(text))
    with pytest.raises(NotApplicable) as prose:  # no call written at all: the model's choice
        tool_call_made(ctx(msg("It is sunny in Drassa.")))
    assert not isinstance(prose.value, Unsupported)
    rule = SPEC.by_id["chat.tool_calls.shape"]

    def judged(doc):
        return _judge(rule, CheckContext(SPEC, rule.vectors[0], _ex(doc), rule.vectors[0].request, None,
                                         strict=False)).outcome

    assert judged(text) == "UNSUPPORTED"
    forced = {"tools": [TIME, WEATHER], "tool_choice": "required"}  # the same cause, not a choice ignored
    with pytest.raises(Unsupported):
        tool_call_required(ctx(text, forced))
    assert judged(msg("It is sunny in Drassa.")) == "INCONCLUSIVE"
    assert judged(msg(None, None, [("get_weather", '{"city": "Drassa"}')], finish="tool_calls")) == "PASS"


def test_a_call_the_token_limit_cut_is_no_evidence_of_its_shape():
    # llama-server on the qwen-xml export: its grammar holds the model inside a <parameter=...>
    # value it never closes; at max_tokens the call's arguments are an unfinished JSON text,
    # as OpenAI's own are when max_tokens cuts a call.
    from conformance.checks.tools import arguments_json_string, tool_call_made

    cut = msg("", None, [("get_weather", '{"city":"<arg_key>city\\": \\"Drassa\\"}}')], finish="length")
    for check in (tool_call_made, arguments_json_string):
        with pytest.raises(NotApplicable, match="token limit"):
            check(ctx(cut))
    done = msg("", None, [("get_weather", '{"city":"<arg_key>city')], finish="tool_calls")
    with pytest.raises(CheckFailure):  # a finished turn with broken arguments still fails
        arguments_json_string(ctx(done))


def test_a_call_the_parser_swallowed_fails():
    # vLLM 0.32 --tool-call-parser qwen3_xml on the qwen-xml export: the model wrote a JSON-tags
    # call (24 tokens) and the answer has no content, no reasoning and no call
    from conformance.checks.tools import tool_call_made

    gone = msg(None, None) | {"usage": {"prompt_tokens": 70, "completion_tokens": 24, "total_tokens": 94}}
    with pytest.raises(CheckFailure, match="24 tokens generated"):
        tool_call_made(ctx(gone))
    empty = msg(None, None) | {"usage": {"prompt_tokens": 70, "completion_tokens": 0, "total_tokens": 70}}
    with pytest.raises(NotApplicable):  # the model wrote nothing: no evidence either way
        tool_call_made(ctx(empty))


def test_tools_parallel_calls_each_call_its_own_entry_with_its_own_id():
    body = {"tools": [WEATHER], "parallel_tool_calls": True}
    two = [("get_weather", '{"city": "Drassa"}'), ("get_weather", '{"city": "Castelune"}')]
    tool_calls_parallel(ctx(msg(None, None, two, finish="tool_calls"), body))
    with pytest.raises(NotApplicable, match="one call"):  # the model's choice: no evidence
        tool_calls_parallel(ctx(msg(None, None, two[:1], finish="tool_calls"), body))
    with pytest.raises(NotApplicable, match="no tool call"):
        tool_calls_parallel(ctx(msg("It is sunny."), body))
    same_id = msg(None, None, two, finish="tool_calls")
    for c in same_id["choices"][0]["message"]["tool_calls"]:
        c["id"] = "call_0"
    with pytest.raises(CheckFailure, match="distinct id"):
        tool_calls_parallel(ctx(same_id, body))
    # the first call parsed, the second handed back as text
    second_as_text = msg('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Castelune"}}\n</tool_call>',
                         None, two[:1], finish="tool_calls")
    with pytest.raises(CheckFailure, match="left in content"):
        tool_calls_parallel(ctx(second_as_text, body))
    with pytest.raises(NotApplicable, match="token limit"):
        tool_calls_parallel(ctx(msg(None, None, two, finish="length"), body))


def test_tools_parallel_calls_streamed_by_index_and_never_merged():
    body = {"tools": [WEATHER], "parallel_tool_calls": True, "stream": True}
    split = _chunks(*[{"tool_calls": [{"index": i, "id": f"c{i}", "type": "function",
                                       "function": {"name": "get_weather", "arguments": f'{{"city": "{c}"}}'}}]}
                      for i, c in enumerate(("Drassa", "Castelune"))])
    tool_calls_parallel(ctx(split, body, sse=True))
    merged = _chunks(*[{"tool_calls": [{"index": 0, "id": f"c{i}", "type": "function",
                                        "function": {"name": "get_weather", "arguments": f'{{"city": "{c}"}}'}}]}
                       for i, c in enumerate(("Drassa", "Castelune"))])
    with pytest.raises(CheckFailure, match="one non-empty id"):  # two calls under one index
        tool_calls_parallel(ctx(merged, body, sse=True))


def test_tool_choice_auto_default_tools_must_reach_the_prompt():
    # llama-cpp-python 0.3.36 --chat_format chatml-function-calling renders no tools unless the
    # request names a tool_choice: 22 prompt tokens with the tools and without them
    body = {"tools": [WEATHER], "messages": [{"role": "user", "content": "What's the weather in Drassa?"}]}

    def usage(n):
        return msg("No weather tool is available.") | {"usage": {"prompt_tokens": n, "completion_tokens": 1,
                                                                 "total_tokens": n + 1}}
    tools_reach_prompt(ctx(usage(70), body, resend=usage(22)))
    with pytest.raises(CheckFailure, match="22 prompt tokens with the tools, 22 without"):
        tools_reach_prompt(ctx(usage(22), body, resend=usage(22)))
    with pytest.raises(NotApplicable, match="no usage"):
        tools_reach_prompt(ctx(msg("Sunny."), body, resend=usage(22)))
