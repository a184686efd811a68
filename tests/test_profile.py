"""GET /profile (rule ops.profile.ring): the ring keeps the newest turns up to its capacity,
each with its own request id, token counts and phase times; a refused request is no turn;
capacity 0 records nothing and reads no clock on the engine thread."""
from __future__ import annotations

import pytest
from falcon import testing

from colibri.server.app import create_app
from colibri.server.profile import PHASES
from colibri.server.service import Service, Settings

HOST = {"Host": "127.0.0.1"}


def chat(c: testing.TestClient, text: str, **extra) -> testing.Result:
    return c.simulate_post("/v1/chat/completions", headers=HOST, json={
        "model": "colibri-tiny", "max_tokens": 12, "temperature": 0,
        "messages": [{"role": "user", "content": f"Repeat exactly: {text}"}], **extra})


@pytest.fixture
def make():
    made: list[Service] = []

    def build(**settings) -> testing.TestClient:
        svc = Service(Settings(**settings))
        made.append(svc)
        return testing.TestClient(create_app(svc))

    yield build
    for svc in made:
        svc.close()


def test_ring_keeps_the_newest_turns_up_to_its_capacity(make):
    c = make(profile_turns=2)
    sent = [chat(c, w) for w in ("one", "two words", "three more words")]
    assert all(r.status_code == 200 for r in sent)
    doc = c.simulate_get("/profile", headers=HOST).json
    assert (doc["capacity"], doc["recorded"], doc["phases"]) == (2, 3, list(PHASES))
    assert [t["request_id"] for t in doc["turns"]] == [r.headers["x-request-id"] for r in sent[1:]]
    for t, r in zip(doc["turns"], sent[1:], strict=True):
        u = r.json["usage"]
        assert t["tokens"] == {"prompt": u["prompt_tokens"], "completion": u["completion_tokens"],
                               "cached": u["prompt_tokens_details"]["cached_tokens"]}
        assert (t["endpoint"], t["stream"], t["outcome"]) == ("/v1/chat/completions", False, "completed")
        assert t["decode_steps"] == u["completion_tokens"] - (r.json["choices"][0]["finish_reason"] == "length")
        s = t["seconds"]
        assert min(s.values()) >= 0 and s["prefill"] > 0 and s["decode"] > 0 and s["write"] == 0
        assert sum(s[p] for p in PHASES) <= s["total"] * 1.001 + 1e-6  # phases are parts of the whole
        assert 0 < t["ttft_seconds"] <= s["total"]


def test_a_streamed_turn_has_write_time_and_a_refused_request_is_no_turn(make):
    c = make()
    r = chat(c, "streamed words here", stream=True)
    assert r.status_code == 200 and r.text.rstrip().endswith("[DONE]")
    assert chat(c, "x", temperature=5).status_code == 400  # refused before admission
    turns = c.simulate_get("/profile", headers=HOST).json["turns"]
    assert len(turns) == 1
    t = turns[0]
    assert t["stream"] is True and t["request_id"] == r.headers["x-request-id"]
    assert t["seconds"]["write"] > 0 and t["seconds"]["text"] > 0
    assert t["tokens_per_second"] > 0


def test_logprobs_and_systemone_turns(make):
    c = make()
    assert chat(c, "with logprobs", logprobs=True, top_logprobs=3).status_code == 200
    s1 = c.simulate_post("/v1/systemone", headers=HOST, json={
        "model": "colibri-tiny", "state": "The sky is blue.",
        "questions": {"sky": {"type": "noul", "instructions": "Is the sky blue?"}}})
    assert s1.status_code == 200, s1.text
    lp, scored = c.simulate_get("/profile", headers=HOST).json["turns"]
    assert lp["seconds"]["logprobs"] > 0
    assert scored["endpoint"] == "/v1/systemone" and scored["tokens"]["completion"] == 0
    assert scored["tokens"]["prompt"] == s1.json["usage"]["input_tokens"] and scored["seconds"]["prefill"] > 0
    assert scored["decode_steps"] == 0 and scored["ttft_seconds"] is None and scored["seconds"]["text"] > 0


def test_capacity_zero_records_nothing(make):
    c = make(profile_turns=0)
    assert chat(c, "hello").status_code == 200
    doc = c.simulate_get("/profile", headers=HOST).json
    assert (doc["capacity"], doc["recorded"], doc["turns"]) == (0, 0, [])


def test_profile_takes_the_metrics_key(make):
    c = make(api_key="sekrit")
    assert c.simulate_get("/profile", headers=HOST).status_code == 401
    ok = c.simulate_get("/profile", headers={**HOST, "Authorization": "Bearer sekrit"})
    assert ok.status_code == 200 and ok.headers["cache-control"] == "no-store"
