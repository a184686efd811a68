"""Rule gen.context_length_exceeded: a prompt text too long for the context whatever its
tokens is refused before the tokenizer sees it (a few megabytes cost seconds of CPU to
tokenize for the same 400), on every endpoint that generates or scores."""
from __future__ import annotations

import pytest
from falcon import testing

from colibri.server.app import create_app
from colibri.server.service import Service, Settings

BIG = "lorem ipsum dolor sit amet " * 150_000  # 4 MB of text


@pytest.fixture(scope="module")
def setup():
    svc = Service(Settings(kv_slots=1))
    calls: list[int] = []
    model = svc.model
    encode_pieces, encode = model.encode_pieces, model.encode

    def counting_pieces(pieces):
        calls.append(sum(len(t) for t, _ in pieces))
        return encode_pieces(pieces)

    def counting(text):
        calls.append(len(text))
        return encode(text)

    model.encode_pieces, model.encode = counting_pieces, counting
    yield svc, testing.TestClient(create_app(svc), headers={"Host": "localhost"}), calls
    svc.scheduler.close()


CASES = {
    "chat": ("/v1/chat/completions", {"model": "colibri-tiny", "messages": [{"role": "user", "content": BIG}]}, "messages"),
    "completions": ("/v1/completions", {"model": "colibri-tiny", "prompt": BIG}, "prompt"),
    "messages": ("/v1/messages", {"model": "colibri-tiny", "max_tokens": 4, "messages": [{"role": "user", "content": BIG}]},
                 "messages"),
    "responses": ("/v1/responses", {"model": "colibri-tiny", "input": BIG}, "input"),
    "systemone": ("/v1/systemone", {"model": "colibri-tiny", "state": BIG, "questions": {"q": {"type": "noul"}}}, "state"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_gen_context_length_exceeded_refused_before_tokenizing(setup, case):
    svc, client, calls = setup
    path, body, param = CASES[case]
    calls.clear()
    got = client.simulate_post(path, json=body)
    assert got.status_code == 400, got.text
    err = got.json["error"]
    if case != "messages":  # the Anthropic envelope carries the type and message only
        assert (err["code"], err["param"]) == ("context_length_exceeded", param)
    assert "at least" in err["message"]
    assert calls == []  # the tokenizer never saw it


def test_gen_context_length_exceeded_the_bound_never_refuses_what_fits(setup):
    svc, client, calls = setup
    # Just under the bound: tokenized and judged by its tokens (which here do not fit either).
    n = svc.model.config.n_ctx * svc.longest_token - 1
    got = client.simulate_post("/v1/completions", json={"model": "colibri-tiny", "prompt": "a" * n, "max_tokens": 1})
    assert got.status_code == 400 and "at least" not in got.json["error"]["message"]
    assert calls and calls[-1] == n
    # The bound is sound: no token spells more bytes than longest_token.
    assert max(len(b) for b in svc.model.token_bytes) <= svc.longest_token
