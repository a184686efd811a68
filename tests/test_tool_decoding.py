"""Rule tools.decode.offered-names: once a call opens, its name is decoded from the offered
tools and (glm-xml, qwen-xml) each argument key from the named tool's parameters.

The decoder is tried on a small vocabulary made up here (so every slot edge is reached on
purpose), then in the scheduler on the embedded model, and the rule's vectors are shown to
fail on the same model with the hold off: without it the model names a tool of its own making
(`query_track`, `query_forecast`)."""
from __future__ import annotations

import pytest

from colibri.chat_template import render
from colibri.model import Model
from colibri.server.scheduler import Scheduler
from colibri.server.service import Service, Settings
from colibri.server.task import Done, Failed, Task, TokenRecord
from colibri.spec import load_spec
from colibri.tool_decoding import TokenIndex, ToolDecoder
from conformance.runner import run_vector
from conformance.targets import InProcessTarget

MUSIC_WEATHER = [{"type": "function", "function": {"name": "play_track", "parameters": {
                     "type": "object", "properties": {"artist": {"type": "string"}}, "required": ["artist"]}}},
                 {"type": "function", "function": {"name": "check_forecast", "parameters": {
                     "type": "object", "properties": {"place": {"type": "string"}}, "required": ["place"]}}}]
TOOLS = [{"type": "function", "function": {"name": "play_track", "parameters": {
             "type": "object", "properties": {"artist": {"type": "string"}}}}},
         {"type": "function", "function": {"name": "play_time", "parameters": {
             "type": "object", "properties": {"zone": {"type": "string"}, "format": {"type": "string"}}}}}]

# a made-up vocabulary: single bytes, a few merges, pieces that run past a slot's end, and a
# special token (empty bytes)
PIECES = [b""] + [bytes([c]) for c in range(32, 127)] + [b"\n"] + [
    b"<tool_call>", b"<arg_key>", b"</arg_key>", b"</tool_call>", b"play", b"play_", b"track", b"query",
    b"_track", b"time", b"track\n", b"track\n<arg_key>", b'"name": "', b"<function=", b"<parameter=", b"zone>",
    b"artist", b"artist</arg_key>", b"pl", b'{"']
ID = {b: i for i, b in enumerate(PIECES) if b}


def spelled(allowed: list[int] | None) -> set[bytes] | None:
    return None if allowed is None else {PIECES[i] for i in allowed}


def feed(d: ToolDecoder, *pieces: bytes) -> None:
    for p in pieces:
        d.feed(ID[p])


def glm() -> ToolDecoder:
    return ToolDecoder(TokenIndex(PIECES), "glm-xml", TOOLS)


def test_tools_decode_offered_names_free_until_a_call_opens():
    d = glm()
    assert d.allowed() is None
    feed(d, b"play", b" ", b"q")
    assert d.allowed() is None


def test_tools_decode_offered_names_the_name_slot_admits_only_offered_names():
    d = glm()
    feed(d, b"<tool_call>")
    got = spelled(d.allowed())
    assert {b"p", b"pl", b"play", b"play_"} <= got
    assert not got & {b"q", b"query", b"t", b"\n", b""}  # nothing off the offered names, no special
    feed(d, b"play_")
    assert spelled(d.allowed()) >= {b"t", b"track", b"time", b"track\n", b"track\n<arg_key>"}
    assert b"_track" not in spelled(d.allowed())  # "play__track" is no offered name


def test_tools_decode_offered_names_a_name_ends_at_the_syntax_end_then_keys_are_the_tools_own():
    d = glm()
    feed(d, b"<tool_call>", b"play_", b"track", b"\n")
    assert d.tool == "play_track" and d.allowed() is None  # between slots: free
    feed(d, b"<arg_key>")
    assert {b"a", b"artist", b"artist</arg_key>"} <= spelled(d.allowed())
    assert b"z" not in spelled(d.allowed())  # play_time's key, not this tool's
    feed(d, b"artist</arg_key>")
    assert d.allowed() is None  # the value is the model's


def test_tools_decode_offered_names_a_token_past_the_name_can_open_the_next_slot():
    d = glm()
    feed(d, b"<tool_call>", b"play_", b"track\n<arg_key>")
    assert d.tool == "play_track" and d.slot is not None and d.slot.kind == "key"


def test_tools_decode_offered_names_json_tags_names_and_qwen_xml_keys():
    j = ToolDecoder(TokenIndex(PIECES), "json-tags", TOOLS)
    feed(j, b"<tool_call>", b"\n", b'{"', b"n", b"a", b"m", b"e", b'"', b":", b" ", b'"')
    assert b"q" not in spelled(j.allowed()) and b"play" in spelled(j.allowed())
    feed(j, b"play_", b"time")
    assert b'"' in spelled(j.allowed()) and all(p.startswith(b'"') for p in spelled(j.allowed()))  # only the end
    q = ToolDecoder(TokenIndex(PIECES), "qwen-xml", TOOLS)
    feed(q, b"<tool_call>", b"\n", b"<function=", b"play_", b"time", b">", b"\n", b"<parameter=")
    assert {b"zone>", b"f"} <= spelled(q.allowed()) and b"a" not in spelled(q.allowed())


def feed_bytes(d: ToolDecoder, text: str) -> None:
    """Feed `text` one byte (one single-byte token) at a time."""
    for c in text.encode():
        d.feed(ID[bytes([c])])


def json_call() -> ToolDecoder:
    j = ToolDecoder(TokenIndex(PIECES), "json-tags", TOOLS)
    feed_bytes(j, '<tool_call>\n{"name": "play_time", "arguments": {')
    return j


def test_tools_decode_offered_names_json_keys_are_the_named_tools_own():
    j = json_call()
    assert j.allowed() is None  # whitespace may come before the key's quote
    feed_bytes(j, ' "')
    assert spelled(j.allowed()) >= {b"z", b"f"} and b"a" not in spelled(j.allowed())
    feed_bytes(j, 'zone"')
    assert j.slot is None
    feed_bytes(j, ': "Europe, \\"Paris\\", ')  # a value holding a comma and escaped quotes
    assert j.slot is None and j.in_string  # still inside the value: no key slot opened
    feed_bytes(j, '", "')
    assert spelled(j.allowed()) >= {b"z", b"f"}  # a second key, after the comma


def test_tools_decode_offered_names_json_nested_values_hold_no_keys_and_the_next_call_opens_again():
    j = json_call()
    feed_bytes(j, '"format": {"a": ["x", {"b": 1}], "c": "d"}')
    assert j.slot is None and j.depth == 1  # nested objects' keys are values' insides, not held
    feed_bytes(j, '}}\n</tool_call>\n<tool_call>\n{"name": "')
    assert j.depth == 0 and j.slot is not None and j.slot.kind == "name"


def test_tools_decode_offered_names_a_slot_entered_off_the_set_is_left_to_the_parser():
    d = glm()
    d.feed(ID[b"<tool_call>"])
    d.slot, d.written = None, b""  # as if the opener's own token had carried "q"
    d._scan(b"<tool_call>q")
    assert d.allowed() is None


@pytest.fixture(scope="module")
def model() -> Model:
    return Model()


def collect(task: Task) -> list:
    out = []
    while True:
        event = task.events.get(timeout=60)
        if isinstance(event, TokenRecord):
            out.append(event)
        elif isinstance(event, Done | Failed):
            return out


def test_tools_decode_offered_names_in_the_scheduler_logprobs_stay_the_models(model):
    """The embedded model, asked whether it will rain with play_track and check_forecast
    offered, would name a tool of its own (query_forecast); held, it names an offered tool,
    while each record's log probabilities are those of the unheld logits (the held token may
    rank below others)."""
    prompt_text = render(model.template("chat_template.glm.jinja"),
                         [{"role": "user", "content": "Will it rain in Izmir tomorrow?"}],
                         tools=MUSIC_WEATHER, add_generation_prompt=True, enable_thinking=False)
    prompt = model.encode(prompt_text)
    index = TokenIndex(model.token_bytes)
    s = Scheduler(model.engine(n_slots=2), n_slots=2)
    try:
        free = Task(prompt=prompt, max_new=8, end_tokens=frozenset(), temperature=0.0, top_k_logprobs=3)
        s.admit(free)
        free_text = b"".join(model.token_bytes[r.token] for r in collect(free))
        held = Task(prompt=prompt, max_new=8, end_tokens=frozenset(), temperature=0.0, top_k_logprobs=3,
                    decoder=ToolDecoder(index, "glm-xml", MUSIC_WEATHER))
        s.admit(held)
        recs = collect(held)
    finally:
        s.close()
    held_text = b"".join(model.token_bytes[r.token] for r in recs)
    assert free_text.startswith(b"<tool_call>query")  # what the rule prevents
    assert held_text.startswith((b"<tool_call>play_track\n", b"<tool_call>check_forecast\n"))
    first_name = recs[1]  # the first token after <tool_call>
    assert model.token_bytes[first_name.top[0][0]].startswith(b"q")  # the model's own favourite, reported
    assert first_name.logprob < first_name.top[0][1]


def _vectors():
    rule = next(r for r in load_spec().rules if r.id == "tools.decode.offered-names")
    return rule, [v for v in rule.vectors if v.name in ("rain", "messages-song", "chatml-song")]


@pytest.mark.parametrize("held", [True, False], ids=["held", "free"])
def test_tools_decode_offered_names_vectors_fail_without_the_hold(model, held):
    from colibri.server.app import create_app

    rule, vectors = _vectors()
    spec = load_spec()
    outcomes = {}
    for v in vectors:
        svc = Service(Settings(family=v.server.get("family", "glm"), offered_tool_names=held), model=model, spec=spec)
        target = InProcessTarget(create_app(svc), {"Host": "localhost"}, model="colibri-tiny")
        outcomes[v.name] = run_vector(spec, rule, v, target)
    assert len(outcomes) == 3
    for name, result in outcomes.items():
        if held:
            assert result.outcome == "PASS", (name, result.failure)
        else:
            assert result.outcome == "FAIL", (name, result.failure)
            named = result.failure.actual  # the names the check found
            assert set(named) - {"play_track", "check_forecast"}, (name, named)  # e.g. query_track


class Broken:
    """A decoder that fails: in `allowed` (before a sample) or in `feed` (after one)."""

    def __init__(self, where: str):
        self.where = where

    def allowed(self):
        if self.where == "allowed":
            raise RuntimeError("decoder broke before sampling")
        return None

    def feed(self, token: int) -> None:
        if self.where == "feed":
            raise RuntimeError("decoder broke after sampling")


@pytest.mark.parametrize("where", ["allowed", "feed"])
def test_tools_decode_offered_names_a_failing_decoder_fails_its_request_alone(model, where):
    """The decoder runs on the engine thread: should it raise, its own request ends with an
    error and a batch-mate's tokens are exactly those it gets alone."""
    prompt = model.encode("Count from one to ten.")
    s = Scheduler(model.engine(n_slots=2), n_slots=2, step_delay=0.002)
    try:
        alone = Task(prompt=prompt, max_new=16, end_tokens=frozenset(), temperature=0.0)
        s.admit(alone)
        want = [r.token for r in collect(alone)]
        good = Task(prompt=prompt, max_new=16, end_tokens=frozenset(), temperature=0.0)
        bad = Task(prompt=prompt, max_new=16, end_tokens=frozenset(), temperature=0.0, decoder=Broken(where))
        s.admit(good)
        s.admit(bad)
        events = []
        while True:
            events.append(bad.events.get(timeout=60))
            if isinstance(events[-1], Done | Failed):
                break
        assert isinstance(events[-1], Failed)
        assert [r.token for r in collect(good)] == want
        assert s.thread.is_alive() and s.snapshot()["failed"] == 1
    finally:
        s.close()
