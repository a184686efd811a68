"""The official `openai` SDK's Responses client against a live `colibri serve` (no shims):
create, the stream helper, a tool round trip, chaining, retrieve and delete."""
from __future__ import annotations

import json

import pytest
from live_server import live_server

openai = pytest.importorskip("openai")

pytestmark = pytest.mark.integration

WEATHER = {"type": "function", "name": "get_weather", "description": "Current weather for a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
MODEL = "colibri-tiny"


@pytest.fixture(scope="module")
def oai():
    with live_server("--kv-slots", "2") as url:
        yield openai.OpenAI(base_url=url + "/v1", api_key="local", max_retries=0)


def test_create_returns_a_completed_response_with_responses_usage(oai):
    r = oai.responses.create(model=MODEL, input="Repeat exactly: hello world", temperature=0, max_output_tokens=20)
    assert r.status == "completed" and r.output_text == "hello world"
    assert r.id.startswith("resp_") and r.output[0].type == "message" and r.output[0].role == "assistant"
    assert r.usage.total_tokens == r.usage.input_tokens + r.usage.output_tokens
    assert r.error is None and r.incomplete_details is None


def test_stream_helper_accumulates_to_the_unary_response(oai):
    kw = {"model": MODEL, "input": "Repeat exactly: café 😊 日本語", "temperature": 0, "max_output_tokens": 30}
    unary = oai.responses.create(**kw)
    kinds = []
    with oai.responses.stream(**kw) as s:
        for event in s:
            kinds.append(event.type)
        final = s.get_final_response()
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    assert final.output_text == unary.output_text and final.status == unary.status == "completed"
    assert [i.type for i in final.output] == [i.type for i in unary.output]
    assert (final.usage.input_tokens, final.usage.output_tokens) == (unary.usage.input_tokens, unary.usage.output_tokens)


def test_cap_gives_an_incomplete_response(oai):
    r = oai.responses.create(model=MODEL, input="Count from 1 to 40.", temperature=0, max_output_tokens=16)
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"
    assert r.usage.output_tokens == 16


def test_tool_round_trip_through_function_call_output(oai):
    first = oai.responses.create(model=MODEL, input="What's the weather in Drassa?", tools=[WEATHER], temperature=0,
                                 max_output_tokens=60)
    calls = [i for i in first.output if i.type == "function_call"]
    assert calls and calls[0].name == "get_weather" and json.loads(calls[0].arguments) == {"city": "Drassa"}
    result = {"type": "function_call_output", "call_id": calls[0].call_id, "output": "Sunny, 21 degrees."}
    # Parked: only the tool result goes over the wire; tools are sent again (never inherited).
    parked = oai.responses.create(model=MODEL, previous_response_id=first.id, input=[result], tools=[WEATHER],
                                  temperature=0, max_output_tokens=40)
    assert parked.status in ("completed", "incomplete") and parked.previous_response_id == first.id
    assert parked.usage.input_tokens_details.cached_tokens > 0
    # The same turn as a full transcript: the call item sent back as it came, then the result.
    full = oai.responses.create(model=MODEL, tools=[WEATHER], temperature=0, max_output_tokens=40,
                                input=[{"role": "user", "content": "What's the weather in Drassa?"},
                                       calls[0].model_dump(exclude_none=True), result])
    assert full.output_text == parked.output_text


def test_chaining_reuses_the_parent_and_inherits_no_instructions(oai):
    parent = oai.responses.create(model=MODEL, instructions="Answer briefly.", input="My name is Ada.",
                                  temperature=0, max_output_tokens=20)
    child = oai.responses.create(model=MODEL, previous_response_id=parent.id, input="What is my name?",
                                 temperature=0, max_output_tokens=20)
    assert child.previous_response_id == parent.id and child.instructions is None
    # As pi does: the instructions sent again. The whole parent, prompt and answer, is reused.
    again = oai.responses.create(model=MODEL, previous_response_id=parent.id, input="What is my name?",
                                 instructions="Answer briefly.", temperature=0, max_output_tokens=20)
    assert again.instructions == "Answer briefly."
    assert again.usage.input_tokens > parent.usage.input_tokens + parent.usage.output_tokens
    assert again.usage.input_tokens_details.cached_tokens >= parent.usage.input_tokens + parent.usage.output_tokens - 1


def test_retrieve_and_delete(oai):
    r = oai.responses.create(model=MODEL, input="Repeat exactly: kept", temperature=0, max_output_tokens=10)
    back = oai.responses.retrieve(r.id)
    assert back.model_dump() == r.model_dump()
    oai.responses.delete(r.id)
    with pytest.raises(openai.NotFoundError) as e:
        oai.responses.retrieve(r.id)
    assert e.value.body["code"] == "response_not_found" and e.value.body["param"] == "response_id"
    with pytest.raises(openai.BadRequestError) as e:
        oai.responses.create(model=MODEL, previous_response_id=r.id, input="And then?")
    assert e.value.body["code"] == "previous_response_not_found" and e.value.body["param"] == "previous_response_id"


def test_store_false_is_not_retrievable(oai):
    r = oai.responses.create(model=MODEL, input="Repeat exactly: gone", store=False, temperature=0, max_output_tokens=10)
    assert r.store is False
    with pytest.raises(openai.NotFoundError):
        oai.responses.retrieve(r.id)


def test_resp_reasoning_encrypted_content_round_trip_without_store(oai):
    """pi's reasoning turn (issue 53): store false, include reasoning.encrypted_content, the
    reasoning item sent back with only its id, summary and encrypted_content."""
    kw = {"model": MODEL, "temperature": 0, "max_output_tokens": 60, "store": False,
          "include": ["reasoning.encrypted_content"], "reasoning": {"effort": "high"}}
    first = oai.responses.create(input="What is the capital of Velmora?", **kw)
    reasoning = [i for i in first.output if i.type == "reasoning"]
    assert reasoning and reasoning[0].encrypted_content.startswith("colibri.rs1.")
    text = reasoning[0].content[0].text
    assert text
    with oai.responses.stream(input="What is the capital of Velmora?", **kw) as s:
        streamed = s.get_final_response()
    assert [i.encrypted_content for i in streamed.output if i.type == "reasoning"] == [reasoning[0].encrypted_content]
    plain = oai.responses.create(input="What is the capital of Velmora?", **dict(kw, include=[]))
    assert all(getattr(i, "encrypted_content", None) is None for i in plain.output if i.type == "reasoning")
    # Sent back bare, the sealed item gives the model the same history as its text does.
    answer = next(i for i in first.output if i.type == "message")
    history = [{"role": "user", "content": "What is the capital of Velmora?"},
               {"type": "reasoning", "id": reasoning[0].id, "summary": [],
                "encrypted_content": reasoning[0].encrypted_content},
               {"role": "assistant", "content": answer.content[0].text},
               {"role": "user", "content": "Repeat exactly: thanks"}]
    sealed = oai.responses.create(input=history, **kw)
    history[1] = {"type": "reasoning", "id": reasoning[0].id, "summary": [],
                  "content": [{"type": "reasoning_text", "text": text}]}
    clear = oai.responses.create(input=history, **kw)
    assert sealed.usage.input_tokens == clear.usage.input_tokens
    assert sealed.output_text == clear.output_text


def test_resp_reasoning_encrypted_content_seal_is_the_text_the_turn_gets_back():
    from colibri.server.reasoning_seal import open_seal, seal
    from colibri.server.responses_api import input_items, to_messages
    for text in ("", "A greeting.", "café 😊 日本語\n<think>"):
        assert open_seal(seal(text)) == text
    assert seal("A greeting.") == "colibri.rs1.QSBncmVldGluZy4"
    bare = {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": seal("Think of a greeting.")}
    msgs = to_messages(input_items({"input": [{"role": "user", "content": "Say hi."}, bare,
                                              {"role": "assistant", "content": "hi"}]}))
    assert msgs[1] == {"role": "assistant", "content": "hi", "reasoning_content": "Think of a greeting."}
