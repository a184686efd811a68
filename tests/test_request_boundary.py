"""The typed request boundary (issue 51): each wire API's body becomes one GenerationRequest,
and the conversation a request belongs to (its preferred slot, its reuse key) is read from
the translated messages, so the same conversation is the same on every endpoint."""
from __future__ import annotations

import dataclasses

import pytest

from colibri.server.anthropic_api import message_request
from colibri.server.openai_api import chat_request, completion_request
from colibri.server.request import GenerationRequest
from colibri.server.responses_api import input_items, response_request
from colibri.server.slots import conversation_digest

SYSTEM, USER = "You answer briefly.", "What is the capital of France?"


def _same_conversation() -> list[GenerationRequest]:
    chat = chat_request({"model": "m", "messages": [{"role": "developer", "content": SYSTEM},
                                                    {"role": "user", "content": [{"type": "text", "text": USER}]}]})
    messages = message_request({"model": "m", "max_tokens": 8, "system": SYSTEM,
                                "messages": [{"role": "user", "content": USER}]})
    body = {"model": "m", "instructions": SYSTEM, "input": USER}
    responses = response_request(body, input_items(body), [])
    return [chat, messages, responses]


def test_the_same_conversation_has_one_digest_on_every_endpoint():
    requests = _same_conversation()
    digests = {conversation_digest(r.chat.messages) for r in requests if r.chat is not None}
    assert len(digests) == 1 and all(r.chat is not None for r in requests)


def test_a_request_is_frozen_and_holds_no_raw_body():
    r = chat_request({"model": "m", "messages": [{"role": "user", "content": "hi"}], "temperature": 0,
                      "top_p": 0.5, "seed": 7, "stop": "x", "max_tokens": 9, "logprobs": True, "top_logprobs": 2,
                      "stream": True, "stream_options": {"include_usage": True}})
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.slot = 1  # type: ignore[misc]
    assert (r.sampling.temperature, r.sampling.top_p, r.sampling.seed) == (0.0, 0.5, 7)
    assert (r.sampling.stops, r.sampling.max_tokens, r.param) == (("x",), 9, "messages")
    assert (r.output.stream, r.output.include_usage, r.output.logprobs) == (True, True, 2)


def test_defaults_when_the_body_leaves_sampling_out():
    r = completion_request({"model": "m", "prompt": "Once"})
    assert (r.text, r.chat, r.param) == ("Once", None, "prompt")
    assert (r.sampling.temperature, r.sampling.top_p, r.sampling.seed, r.sampling.max_tokens) == (1.0, 1.0, None, None)
    assert r.output.raw_text and r.output.logprobs == -1
    chat = chat_request({"model": "m", "messages": [{"role": "user", "content": "hi"}], "logprobs": True})
    assert chat.output.logprobs == 0  # the chosen token's logprob, no alternatives
    assert response_request({"model": "m", "input": "hi"}, input_items({"input": "hi"}), []).continuation is False
