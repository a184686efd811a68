"""Verdicts consistent with their own evidence (issue 48 item 5): each test runs a few rules
against the reference server with one defect injected (conformance/mutants.py's wrappers) or
against a fake server, and asserts which rule gets which verdict, and on what exchange."""
from __future__ import annotations

import json

import pytest

from colibri.spec import load_spec
from colibri.spec.loader import build
from conformance.checks import CheckContext, CheckFailure
from conformance.checks.wire import no_server_error
from conformance.exchange import Exchange
from conformance.inprocess import ServerPool
from conformance.mutants import _json_response, _rewrite
from conformance.suite import Selection, run_suite

SPEC = load_spec()
OFFICIAL = ["openai", "anthropic", "responses", "systemone"]


def verdicts(rules, wrap=None, profiles=OFFICIAL):
    """{rule id: RuleResult} of a run of `rules` (ids or prefixes) on the reference server, wrapped."""
    pool = ServerPool(wrap=wrap, spec=SPEC)
    try:
        sel = Selection(profiles=list(profiles), prefixes=list(rules))
        results, _ = run_suite(SPEC, sel, lambda v: pool.target(v.server), release=lambda v: pool.release(v.server))
    finally:
        pool.close()
    return {rr.rule.id: rr for rr in results if rr.outcome != "SKIPPED" or rr.vectors}


# ------------------------------------------------------------------ invariants of every exchange

def _500_on_hot_temperature(path, body, status, headers, data):
    """A server that crashes on one input only: a temperature above 2 (req.temperature.range's vectors)."""
    if isinstance(body, dict) and isinstance(body.get("temperature"), (int, float)) and body["temperature"] > 2:
        return 500, [("Content-Type", "application/json")], json.dumps({"error": {
            "message": "Internal server error", "type": "server_error", "param": None, "code": None}}).encode()
    return status, headers, data


def test_err_no_500_for_client_input_is_judged_on_every_exchange():
    # The 500 answers another rule's vector; err.no-500-for-client-input's own vectors get 400s.
    res = verdicts(["err.no-500-for-client-input", "req.temperature.range"],
                   lambda a: _rewrite(a, response=_500_on_hot_temperature))
    assert res["req.temperature.range"].outcome == "FAIL"
    rr = res["err.no-500-for-client-input"]
    assert rr.outcome == "FAIL"
    own = [v for v in rr.vectors if v.vector.rule_id == "err.no-500-for-client-input" and "@" not in v.vector.name]
    assert own and all(v.result.outcome == "PASS" for v in own)  # its own vectors were answered right
    borrowed = [v for v in rr.vectors if v.result.outcome == "FAIL"]
    assert borrowed and all(v.vector.name.startswith("no_server_error@req.temperature.range[") for v in borrowed)
    assert all(v.result.exchange.status == 500 for v in borrowed)  # the evidence: the exchange that broke it
    # and without the defect both pass
    clean = verdicts(["err.no-500-for-client-input", "req.temperature.range"])
    assert {k: r.outcome for k, r in clean.items()} == {"err.no-500-for-client-input": "PASS",
                                                         "req.temperature.range": "PASS"}


def _ctx(status, expect_status):
    vector = next(v for v in SPEC.by_id["err.no-500-for-client-input"].vectors)
    vector = type(vector)(**{**vector.__dict__, "expect": {"status": expect_status}})
    ex = Exchange("POST", "/v1/chat/completions", {}, b"{}", status, {"content-type": "application/json"}, b"{}")
    return CheckContext(SPEC, vector, ex, {}, None)


@pytest.mark.parametrize(("status", "expect_status", "fails"), [
    (500, 400, True), (502, 200, True), (503, 200, False), (529, 200, False),  # overload answers judge capacity
    (500, 500, False),  # a vector that injects a fault asks for its 500
    (404, 200, False)])
def test_no_server_error_check(status, expect_status, fails):
    try:
        no_server_error(_ctx(status, expect_status))
        failed = False
    except CheckFailure:
        failed = True
    assert failed is fails


def test_each_invariant_has_one_owner_per_endpoint_in_spec_data():
    # The owners are spec data (the rule's `invariant` field), and a second owner is a load problem.
    assert SPEC.invariant_owner("no_server_error", "messages").id == "err.no-500-for-client-input"
    assert SPEC.invariant_owner("error_envelope", "responses").id == "err.envelope.openai"
    from colibri.spec.loader import read_files

    docs, problems = read_files(SPEC.root)
    rel = next(k for k, (d, _) in docs.items() if any(r["id"] == "chat.response.shape" for r in d.get("rules", [])))
    data, lines = docs[rel]
    data = json.loads(json.dumps(data))
    rule = next(r for r in data["rules"] if r["id"] == "chat.response.shape")
    rule["invariant"] = {"checks": ["error_envelope"]}  # err.envelope.openai owns it on chat
    problems = []
    build(SPEC.root, {**docs, rel: (data, lines)}, problems)
    assert any("err.envelope.openai already owns invariant error_envelope on chat" in str(p) for p in problems)


# ------------------------------------------------------------------ a canned-reply server

class Canned:
    """A server that answers every chat and messages request with the same text, whatever it
    asks (LiteLLM's mock, mockllm): it ignores `stop`, never calls a tool, never reasons.
    Its Anthropic answers can be broken on purpose (`anthropic`: what to break)."""

    model = "mock"
    live = False

    def __init__(self, text="This is a mock response", *, anthropic=(), output_tokens=3):
        self.text, self.anthropic, self.output_tokens = text, set(anthropic), output_tokens

    def send(self, method, path, body=None, headers=None, **kw):
        req = json.loads(body) if body else {}
        if path == "/v1/chat/completions" and isinstance(req, dict) and isinstance(req.get("messages"), list):
            return self._chat(method, path, body, req)
        if path == "/v1/messages" and isinstance(req, dict) and isinstance(req.get("messages"), list):
            return self._messages(method, path, body, req)
        return self._answer(method, path, body, 404, {"error": {"message": "not found", "type": "invalid_request_error",
                                                                "param": None, "code": "not_found"}})

    def _answer(self, method, path, body, status, doc):
        return Exchange(method, path, {}, body, status, {"content-type": "application/json"}, json.dumps(doc).encode())

    def _sse(self, method, path, body, events):
        data = b"".join((f"event: {name}\n".encode() if name else b"") + b"data: " +
                        (doc if isinstance(doc, bytes) else json.dumps(doc).encode()) + b"\n\n" for name, doc in events)
        return Exchange(method, path, {}, body, 200, {"content-type": "text/event-stream"}, data)

    def _chat(self, method, path, body, req):
        head = {"id": "chatcmpl-1", "created": 1, "model": self.model}
        usage = {"prompt_tokens": 5, "completion_tokens": 5, "total_tokens": 10}
        if not req.get("stream"):
            return self._answer(method, path, body, 200, {**head, "object": "chat.completion", "usage": usage, "choices": [
                {"index": 0, "message": {"role": "assistant", "content": self.text}, "finish_reason": "stop",
                 "logprobs": None}]})
        chunk = {**head, "object": "chat.completion.chunk"}
        return self._sse(method, path, body, [
            (None, {**chunk, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]}),
            (None, {**chunk, "choices": [{"index": 0, "delta": {"content": self.text}, "finish_reason": None}]}),
            (None, {**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
            (None, b"[DONE]")])

    def _messages(self, method, path, body, req):
        broken = self.anthropic
        usage = None if "null-usage" in broken else {"input_tokens": 5, "output_tokens": self.output_tokens}
        msg = {"id": "msg_1", "type": "message", "role": "assistant", "model": self.model, "stop_sequence": None}
        if not req.get("stream") or "json-for-stream" in broken:
            return self._answer(method, path, body, 200, {**msg, "content": [{"type": "text", "text": self.text}],
                                                          "stop_reason": "end_turn", "usage": usage})
        events = [] if "no-message-start" in broken else [
            ("message_start", {"type": "message_start", "message": {**msg, "content": [], "stop_reason": None,
                                                                    "usage": usage}})]
        events += [
            ("content_block_start", {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
            ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                     "delta": {"type": "text_delta", "text": self.text}}),
            ("content_block_stop", {"type": "content_block_stop", "index": 0}),
            ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                               "usage": None if usage is None else {"output_tokens": self.output_tokens}}),
            ("message_stop", {"type": "message_stop"})]
        return self._sse(method, path, body, events)


def canned_verdicts(rules, target, profiles=("openai", "anthropic")):
    sel = Selection(profiles=list(profiles), prefixes=list(rules), remote=True)
    results, _ = run_suite(SPEC, sel, lambda v: target)
    return {rr.rule.id: rr.outcome for rr in results if rr.outcome != "SKIPPED" or rr.vectors}


# ------------------------------------------------------------------ no vacuous PASS

def test_stop_stream_hold_back_is_inconclusive_on_a_server_that_ignores_stop():
    # The canned reply never holds the stop text: nothing had to be cut or held back.
    got = canned_verdicts(["stop.stream.hold-back", "chat.stop.honored"], Canned())
    assert got == {"stop.stream.hold-back": "INCONCLUSIVE", "chat.stop.honored": "INCONCLUSIVE"}
    # A server that ignores stop while the reply does hold the stop text leaks it: FAIL.
    got = canned_verdicts(["stop.stream.hold-back"], Canned("ALPHA STOP BETA"))
    assert got == {"stop.stream.hold-back": "FAIL"}


def test_tools_call_not_in_content_is_inconclusive_without_a_call():
    assert canned_verdicts(["tools.call.not-in-content"], Canned()) == {"tools.call.not-in-content": "INCONCLUSIVE"}
    # call markup left in the content is the leak itself, not a run without a call
    leak = Canned('<tool_call>{"name": "get_weather", "arguments": {"city": "Drassa"}}</tool_call>')
    assert canned_verdicts(["tools.call.not-in-content"], leak) == {"tools.call.not-in-content": "FAIL"}


def test_reasoning_not_in_content_is_inconclusive_without_reasoning():
    assert canned_verdicts(["reasoning.not-in-content"], Canned()) == {"reasoning.not-in-content": "INCONCLUSIVE"}
    # markup in the content still fails, reasoning or not
    assert canned_verdicts(["reasoning.not-in-content"], Canned("<think>hm</think>Sure.")) == {
        "reasoning.not-in-content": "FAIL"}


def test_reasoning_and_tool_rules_still_pass_on_the_reference_server():
    res = verdicts(["reasoning.not-in-content", "tools.call.not-in-content", "stop.stream.hold-back"],
                   profiles=["openai", "strict", "tools", "reasoning", "streaming"])
    assert {k: r.outcome for k, r in res.items()} == {"reasoning.not-in-content": "PASS",
                                                      "tools.call.not-in-content": "PASS", "stop.stream.hold-back": "PASS"}


# ------------------------------------------------------------------ both modes of a two-mode rule

@pytest.mark.parametrize(("broken", "output_tokens", "outcome"), [
    ((), 3, "PASS"),
    (("no-message-start",), 3, "FAIL"),  # mockllm's stream
    (("null-usage",), 3, "FAIL"),  # usage null on every event
    (("json-for-stream",), 3, "FAIL"),  # LiteLLM: stream: true answered with one JSON body
    ((), 503, "FAIL"),  # 503 output tokens under max_tokens 4
])
def test_msgs_usage_names_judges_unary_and_stream(broken, output_tokens, outcome):
    got = canned_verdicts(["msgs.usage.names"], Canned(anthropic=broken, output_tokens=output_tokens))
    assert got == {"msgs.usage.names": outcome}


# ------------------------------------------------------------------ types as the official schema has them

def test_resp_response_shape_accepts_a_float_created_at_under_the_official_contract():
    # transformers serve 5.25: "created_at": 1796307405.4455304; OpenAI's reference types it a number.
    from conformance.checks.responses import responses_usage

    doc = {"id": "resp_1", "object": "response", "created_at": 1796307405.4455304, "status": "completed",
           "model": "m", "output": [], "usage": {"input_tokens": 1, "output_tokens": 1, "total_tokens": 2,
                                                 "input_tokens_details": {"cached_tokens": 0},
                                                 "output_tokens_details": {"reasoning_tokens": 0}}}
    vector = SPEC.by_id["resp.response.shape"].vectors[0]
    outcomes = []
    for strict in (False, True):
        ex = Exchange("POST", "/v1/responses", {}, b"{}", 200, {"content-type": "application/json"}, json.dumps(doc).encode())
        try:
            responses_usage(CheckContext(SPEC, vector, ex, {}, None, strict=strict))
            outcomes.append(True)
        except CheckFailure:
            outcomes.append(False)
    assert outcomes == [True, False]  # official: a number; this project's strict contract: whole seconds
    doc["created_at"] = "1796307405"  # a string is no number under either
    ex = Exchange("POST", "/v1/responses", {}, b"{}", 200, {"content-type": "application/json"}, json.dumps(doc).encode())
    with pytest.raises(CheckFailure):
        responses_usage(CheckContext(SPEC, vector, ex, {}, None, strict=False))


# ------------------------------------------------------------------ one cause, one failing rule

def _no_retrieve_route(path, body, status, headers, data):
    """A server with POST /v1/responses but no GET/DELETE /v1/responses/{id}: its router's 404."""
    if path.startswith("/v1/responses/") or path.startswith("/v1/colibri-no-such-route/") or path == "/v1/nonexistent":
        return 404, [("Content-Type", "application/json")], b'{"detail":"Not Found"}'
    return status, headers, data


def test_an_absent_retrieve_route_is_unsupported_and_charged_to_route_unknown_path_alone():
    from conformance.discovery import Capabilities

    pool = ServerPool(wrap=lambda a: _rewrite(a, response=_no_retrieve_route), spec=SPEC)
    try:
        target = pool.target({})
        caps = Capabilities.discover(SPEC, target)
        assert caps.findings["response"].state == "absent" and caps.findings["responses"].state == "served"
        sel = Selection(profiles=OFFICIAL, prefixes=["resp.retrieve.unknown", "resp.store.retrieve",
                                                     "route.unknown-path", "resp.response.shape"], remote=True)
        results, _ = run_suite(SPEC, sel, lambda v: pool.target(v.server), gate=caps.gate)
    finally:
        pool.close()
    got = {rr.rule.id: rr.outcome for rr in results if rr.outcome != "SKIPPED" or rr.vectors}
    assert got == {"route.unknown-path": "FAIL", "resp.retrieve.unknown": "UNSUPPORTED",
                   "resp.store.retrieve": "UNSUPPORTED", "resp.response.shape": "PASS"}


def test_the_retrieve_route_of_the_reference_server_is_served():
    from conformance.discovery import Capabilities

    pool = ServerPool(spec=SPEC)
    try:
        caps = Capabilities.discover(SPEC, pool.target({}))
    finally:
        pool.close()
    assert caps.findings["response"].state == "served", caps.findings["response"].detail


def _chat_without_object(path, body, doc):
    if path == "/v1/chat/completions":
        doc.pop("object", None)


def test_a_request_a_rule_borrows_as_its_own_vector_is_charged_to_it_once():
    # gen.usage.counts and req.temperature.range send chat.response.shape's own request (the
    # minimal one); a shape defect fails chat.response.shape once on it, as its own vector,
    # not again for each rule that borrowed the same request.
    rules = ["chat.response.shape", "gen.usage.counts", "req.temperature.range"]
    res = verdicts(rules, lambda a: _rewrite(a, response=_json_response(_chat_without_object)))
    rr = res["chat.response.shape"]
    assert rr.outcome == "FAIL"
    failed = [vr for vr in rr.vectors if vr.result.outcome == "FAIL"]
    keys = [(vr.result.exchange.method, vr.result.exchange.path, vr.result.exchange.request_body) for vr in failed]
    assert len(keys) == len(set(keys)), [vr.vector.name for vr in failed]
    assert [vr.vector.name for vr in failed if "@" not in vr.vector.name] == ["shape"]
    assert failed[0].vector.name == "shape"  # its own vector carries the evidence
    assert len(failed) > 1  # other chat requests (other temperatures) still count as borrowed evidence


# ------------------------------------------------------------------ the published matrix

def test_regenerating_the_matrix_from_some_peers_keeps_the_other_columns_as_published(tmp_path):
    # bench/peers/run.py --only mockllm litellm --compat docs/compat: the heavy peers did not
    # run, and their columns, pages and verdicts stay exactly as published.
    import shutil

    from conformance.compat import main as compat

    pub = tmp_path / "compat"
    shutil.copytree("docs/compat", pub)
    reports = tmp_path / "reports"
    reports.mkdir()
    # one fresh run: mockllm's own published report, one verdict changed
    from conformance.report import embedded_reports

    doc = embedded_reports((pub / "html" / "mockllm" / "index.html").read_text())[0]
    rule = next(r for r in doc["rules"] if r["id"] == "stop.stream.hold-back")
    new = rule["outcome"] = "PASS" if rule["outcome"] != "PASS" else "INCONCLUSIVE"
    (reports / "mockllm.json").write_text(json.dumps(doc))
    (reports / "mockllm.meta.json").write_text(json.dumps({"name": "mockllm", "version": "0.0.8", "wall_seconds": 40}))
    before = {f.name: f.read_text() for f in pub.glob("*.md")}
    assert compat([str(reports), "--out", str(pub)]) == 0
    after = {f.name: f.read_text() for f in pub.glob("*.md")}
    assert {n for n in before if before[n] != after[n]} == {"README.md", "mockllm.md"}
    verdicts_now = json.loads((pub / "verdicts" / "vllm.json").read_text())
    assert verdicts_now["rules"] == json.loads(open("docs/compat/verdicts/vllm.json").read())["rules"]
    assert json.loads((pub / "verdicts" / "mockllm.json").read_text())["rules"]["stop.stream.hold-back"] == new
    row = next(line for line in after["README.md"].splitlines() if line.startswith("| `stop.stream.hold-back`"))
    assert row.count("|") == 11  # rule, level and all eight servers
