"""False verdicts found by hand on real servers, each fixed at its cause: the official contracts
(a run without the strict profile) accept what the official APIs allow, and this project's
stricter contract still refuses it."""
from __future__ import annotations

import json

import pytest

from colibri.spec import load_spec
from conformance.checks import CheckContext, CheckFailure, evaluate
from conformance.checks.openai import logprob_join, text_offset_chars, usage_chunk_last
from conformance.checks.wire import error_envelope
from conformance.discovery import Capabilities, Finding
from conformance.exchange import Exchange

SPEC = load_spec()


def ctx(endpoint, body, *, strict, expect=None, status=200, sse=False, path=None):
    vector = next(v for r in SPEC.rules for v in r.vectors if v.endpoint == endpoint)
    ex = Exchange("POST", path or SPEC.endpoints[endpoint].path, {}, b"{}", status,
                  {"content-type": "text/event-stream" if sse else "application/json"},
                  body if isinstance(body, bytes) else json.dumps(body).encode())
    return CheckContext(SPEC, vector, ex, {}, None, expect=expect or {"status": status}, strict=strict)


def both(check, *args, **kw):
    """(passes under the official contract, passes under strict)"""
    out = []
    for strict in (False, True):
        try:
            check(ctx(*args, strict=strict, **kw))
            out.append(True)
        except CheckFailure:
            out.append(False)
    return tuple(out)


def test_chat_logprobs_with_bytes_null_are_openai_conformant():
    # llama-cpp-python: "bytes": null on every token; OpenAI documents bytes as nullable.
    doc = {"choices": [{"message": {"content": "Hi"}, "logprobs": {"content": [
        {"token": "H", "logprob": -1.0, "bytes": None, "top_logprobs": []},
        {"token": "i", "logprob": -1.0, "bytes": None, "top_logprobs": []}]}}]}
    assert both(logprob_join, "chat", doc) == (True, False)
    doc["choices"][0]["logprobs"]["content"][0]["token"] = "X"  # the tokens themselves still must join
    assert both(logprob_join, "chat", doc) == (False, False)


def test_completions_text_offset_may_count_from_the_prompt_under_openai():
    # llama-cpp-python (like OpenAI's legacy API) offsets from the prompt's start.
    doc = {"choices": [{"text": "abc", "logprobs": {"tokens": ["a", "bc"], "text_offset": [68, 69]}}]}
    assert both(text_offset_chars, "completions", doc) == (True, False)
    doc["choices"][0]["logprobs"]["text_offset"] = [68, 70]  # but it must advance by the tokens
    assert both(text_offset_chars, "completions", doc) == (False, False)


def test_a_left_out_nullable_key_reads_as_null_under_openai():
    # transformers serve leaves out choices[0].logprobs; the vector expects null.
    doc = {"choices": [{"text": "x", "index": 0, "finish_reason": "stop"}]}
    expect = {"status": 200, "json": {"choices.0.logprobs": None}}
    assert both(evaluate, "completions", doc, expect=expect) == (True, False)


def test_usage_key_left_out_of_earlier_chunks_is_openai_conformant():
    # llama-server: no "usage" key on the chunks before the final usage chunk.
    events = [{"id": "a", "choices": [{"index": 0, "delta": {"content": "x"}}]},
              {"id": "a", "choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}]
    body = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events) + b"data: [DONE]\n\n"
    assert both(usage_chunk_last, "chat", body, sse=True) == (True, False)


def test_an_error_without_the_nullable_param_key_is_openai_conformant():
    body = {"error": {"message": "nope", "type": "invalid_request_error", "code": None}}
    assert both(error_envelope, "chat", body, status=400) == (True, False)
    body["error"]["code"] = 400  # a number where OpenAI has a string or null stays a FAIL
    assert both(error_envelope, "chat", body, status=400) == (False, False)


def test_an_unimplemented_model_retrieve_endpoint_is_unsupported_not_failed():
    # llama-server and transformers serve answer 404 to GET /v1/models/{their own model}.
    ex = Exchange("GET", "/v1/models/smollm2", {}, None, 404, {}, b'{"detail": "Not Found"}')
    caps = Capabilities(SPEC, {"model": Finding("model", "absent", 404, "answers 404", ex)})
    vector = next(v for v in SPEC.by_id["models.get"].vectors if v.name == "served")
    res = caps.gate(vector, "unary")
    assert res is not None and res.outcome == "UNSUPPORTED" and res.exchange is ex


@pytest.mark.parametrize("rule_id", ["chat.logprobs.shape", "cmpl.logprobs.shape", "cmpl.response.shape",
                                     "chat.stream.usage.final_chunk", "route.unknown-path", "models.get"])
def test_the_rules_behind_those_verdicts_are_official(rule_id):
    assert "openai" in SPEC.by_id[rule_id].profiles


def test_a_clean_refusal_of_an_optional_capability_is_unsupported_not_failed():
    # vLLM without --enable-auto-tool-choice answers tools on /v1/messages with a clean 400.
    from conformance.suite import Selection, run_rule

    class Refuses:
        model = "m"

        def send(self, method, path, body=None, headers=None, **kw):
            return Exchange(method, path, {}, body, 400, {"content-type": "application/json"},
                            b'{"type": "error", "error": {"type": "BadRequestError", "message": "tools need a parser"}}')

    sel = Selection(profiles=["openai", "anthropic"], remote=True)
    rr = run_rule(SPEC, SPEC.by_id["msgs.tool_use.block"], lambda v: Refuses(), sel, [100])
    assert rr.outcome == "UNSUPPORTED" and "refused cleanly with 400" in rr.vectors[0].result.reason
    # a core rule refused the same way stays a FAIL
    rr = run_rule(SPEC, SPEC.by_id["msgs.response.shape"], lambda v: Refuses(), sel, [100])
    assert rr.outcome == "FAIL"


def test_a_null_optional_key_in_a_stream_chunk_reads_as_absent_under_openai():
    # mockllm sends "role": null in every delta after the first; no SDK minds.
    from conformance.checks.wire import response_schema

    chunk = {"id": "a", "object": "chat.completion.chunk", "created": 1, "model": "m",
             "choices": [{"index": 0, "delta": {"role": None, "content": "x"}, "finish_reason": None}]}
    body = b"data: " + json.dumps(chunk).encode() + b"\n\ndata: [DONE]\n\n"
    assert both(response_schema, "chat", body, sse=True) == (True, False)
    chunk["choices"] = None  # a required key that is null is still missing
    body = b"data: " + json.dumps(chunk).encode() + b"\n\ndata: [DONE]\n\n"
    assert both(response_schema, "chat", body, sse=True) == (False, False)
