"""The load rules of spec/92-load.yaml, judged over records as `colibri-conform load` judges
them (conformance/load/fold.py), and one request under load judged by the suite's own checks
(conformance/load/judge.py). No Locust here: the live runs are in test_load_live.py."""
from __future__ import annotations

import json

import pytest

from colibri.model import Model
from colibri.server.app import create_app
from colibri.server.service import Service, Settings
from conformance.differential import Reference
from conformance.exchange import Exchange
from conformance.load.fold import Idle, fold_load
from conformance.load.fold import Settings as LoadSettings
from conformance.load.judge import DONE_UNFINISHED, Judge, Record, ending, retry_after_ok
from conformance.load.plan import Item, build, neutral_reason
from conformance.suite import REMOTE_DEFAULT, Selection
from conformance.targets import InProcessTarget

HOST = {"Host": "localhost"}
OK_IDLE = Idle(probe_status=200,
               before={"colibri_scheduler_admitted_total": 10, "colibri_scheduler_completed_total": 10,
                       "colibri_scheduler_cancelled_total": 0},
               after={"colibri_scheduler_admitted_total": 20, "colibri_scheduler_completed_total": 18,
                      "colibri_scheduler_cancelled_total": 2, "colibri_scheduler_active": 0,
                      "colibri_scheduler_queued": 0})


@pytest.fixture(scope="module")
def colibri():
    return InProcessTarget(create_app(Service(Settings(kv_slots=2), model=Model())), HOST)


def item(spec, rule_id="chat.response.shape", name="shape", mode="unary"):
    rule = spec.rule(rule_id)
    vec = next(v for v in rule.vectors if v.name == name)
    return Item(f"{vec.id}~{mode}", rule, vec, mode, True)


def rec(key="chat.response.shape[shape]~unary", status=200, mode="unary", **kw):
    r = Record(key, "chat", mode, 1000.0, 0.1, status=status, **kw)
    return r.to_dict()


def verdicts(spec, records, alone=None, idle=OK_IDLE, batch_invariant=False, reference=None):
    items = {"chat.response.shape[shape]~unary": item(spec)}
    results, _ = fold_load(spec, records, items, alone or {}, LoadSettings(batch_invariant, 8, 60.0), idle,
                           reference or (lambda key: None))
    return {r.rule.id: r for r in results}


def test_plan_holds_only_behaviour_neutral_vectors(spec):
    plan = build(spec, Selection(profiles=list(REMOTE_DEFAULT), remote=True), "m")
    assert plan.items and all(i.rule.kind == "wire" and i.vector.expect["status"] == 200 for i in plan.items)
    assert {i.mode for i in plan.items} == {"unary", "stream"}
    ops = spec.rule("ops.cancel.disconnect")
    assert neutral_reason(spec, ops, ops.vectors[0], Selection(profiles=["strict"], remote=True))


def test_a_request_under_load_is_judged_by_the_suites_checks(spec, colibri):
    r = Judge(spec, True, ["strict"], 60.0).send(item(spec, "stream.chunk.same-id", "chat", "stream"), colibri)
    assert (r.status, r.failures, r.lost) == (200, [], None)
    assert r.ttft is not None and r.output_tokens and r.ending == "[DONE]"


def test_load_requests_none_lost_a_reset_and_a_cut_stream_fail(spec):
    alone = {"chat.response.shape[shape]~unary": {"answer": None, "ending": "[DONE]"}}
    ok = verdicts(spec, [rec(), rec(status=429, retry_after="1")], alone)
    assert ok["load.requests.none-lost"].outcome == "PASS"
    bad = verdicts(spec, [rec(), rec(lost="reset", status=0), rec(mode="stream", ending="chat.completion.chunk")], alone)
    r = bad["load.requests.none-lost"]
    assert r.outcome == "FAIL"
    assert {v.result.failure.check for v in r.vectors} == {"reset", "stream end"}


def _stream(*chunks: dict) -> Exchange:
    body = b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"
    return Exchange("POST", "/v1/chat/completions", {}, b"{}", 200, {"content-type": "text/event-stream"}, body)


def test_load_requests_none_lost_a_stream_closed_early_without_a_finish_reason_is_cut(spec):
    """llama-cpp-python under load: a stream that ends [DONE] after a few content chunks and
    no finish_reason (its interrupt_requests) is cut short, although [DONE] closes it cleanly."""
    role = {"choices": [{"index": 0, "delta": {"role": "assistant"}, "finish_reason": None}]}
    text = {"choices": [{"index": 0, "delta": {"content": "6"}, "finish_reason": None}]}
    done = {"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}
    assert ending(_stream(role, text, done)) == "[DONE]"
    assert ending(_stream(role, text)) == DONE_UNFINISHED
    alone = {"chat.response.shape[shape]~unary": {"answer": None, "ending": "[DONE]"}}
    r = verdicts(spec, [rec(mode="stream", ending="[DONE]"), rec(mode="stream", ending=DONE_UNFINISHED)], alone)
    lost = r["load.requests.none-lost"]
    assert lost.outcome == "FAIL"
    assert [(v.result.failure.check, v.result.failure.actual) for v in lost.vectors] == [("stream end", DONE_UNFINISHED)]


def test_load_saturation_no_5xx_a_503_a_timeout_and_a_hang_fail(spec):
    assert verdicts(spec, [rec(), rec(status=429, retry_after="1")])["load.saturation.no-5xx"].outcome == "PASS"
    r = verdicts(spec, [rec(status=503), rec(lost="timeout"), rec(lost="hang")])["load.saturation.no-5xx"]
    assert r.outcome == "FAIL"
    assert sorted(v.result.failure.check for v in r.vectors) == ["503", "hang", "timeout"]


class Refusing:
    """A target refusing every request with the given 429."""

    remote, model = True, "m"

    def __init__(self, headers, body):
        self.headers, self.body = headers, body

    def send(self, method, path, body=None, headers=None, **kw):
        return Exchange(method, path, headers or {}, body, 429, self.headers, self.body, 0.01)


@pytest.mark.parametrize(("headers", "body", "check"), [
    ({"content-type": "application/json"}, b'{"error": {"message": "busy", "type": "rate_limit_error"}}', "Retry-After"),
    ({"content-type": "text/plain", "retry-after": "1"}, b"busy", "error_envelope"),
])
def test_load_saturation_retry_after_a_429_without_header_or_envelope_fails(spec, headers, body, check):
    r = Judge(spec, False, list(REMOTE_DEFAULT), 60.0).send(item(spec), Refusing(headers, body))
    assert r.status == 429
    assert [f[:2] for f in r.failures if f[0] == "load.saturation.retry-after"] == [["load.saturation.retry-after", check]]
    out = verdicts(spec, [r.to_dict()])
    assert out["load.saturation.retry-after"].outcome == "FAIL"
    assert out["chat.response.shape"].outcome != "FAIL"  # a refusal for load is not the vector's failure


def test_load_saturation_retry_after_passes_on_good_refusals_and_is_inconclusive_without_any(spec):
    good = Refusing({"content-type": "application/json", "retry-after": "1"},
                    b'{"error": {"message": "busy", "type": "rate_limit_error", "param": null, "code": "queue_full"}}')
    r = Judge(spec, False, list(REMOTE_DEFAULT), 60.0).send(item(spec), good)
    assert r.failures == []
    assert verdicts(spec, [r.to_dict()])["load.saturation.retry-after"].outcome == "PASS"
    assert verdicts(spec, [rec()])["load.saturation.retry-after"].outcome == "INCONCLUSIVE"
    assert retry_after_ok("Wed, 21 Oct 2015 07:28:00 GMT") and not retry_after_ok("soon")


def test_load_disconnect_frees_capacity(spec):
    left = [rec(), rec(key="disconnect", disconnected=True)]
    assert verdicts(spec, left)["load.disconnect.frees-capacity"].outcome == "PASS"
    leaked = Idle(200, before=OK_IDLE.before, after=dict(OK_IDLE.after, colibri_scheduler_active=1))
    miscount = Idle(200, before=OK_IDLE.before, after=dict(OK_IDLE.after, colibri_scheduler_completed_total=17))
    unnoticed = Idle(200, before=OK_IDLE.before, after=dict(OK_IDLE.after, colibri_scheduler_cancelled_total=0,
                                                            colibri_scheduler_completed_total=20))
    for idle, check in ((leaked, "idle"), (miscount, "accounting"), (unnoticed, "cancelled"),
                        (Idle(429, "queue full"), "request alone after the load")):
        r = verdicts(spec, left, idle=idle)["load.disconnect.frees-capacity"]
        assert (r.outcome, r.vectors[0].result.failure.check) == ("FAIL", check)
    unreadable = verdicts(spec, left, idle=Idle(200))["load.disconnect.frees-capacity"]
    assert unreadable.outcome == "PASS" and "not readable" in unreadable.vectors[0].result.reason
    assert verdicts(spec, [rec()])["load.disconnect.frees-capacity"].outcome == "INCONCLUSIVE"


ALONE_ANSWER = ["The capital is Paris.", "", [], "stop", None]
REF = Reference("The capital is Paris.", ["The", " capital", " is", " Paris", "."], [-0.1, -0.2, -0.05, -0.3, -0.01],
                [[("The", -0.1), ("L", -0.105)], [(" capital", -0.2), (" city", -2.5)], [(" is", -0.05)],
                 [(" Paris", -0.3), (" Lyon", -4.0)], [(".", -0.01)]])
KEY = "chat.response.shape[shape]~unary"


def greedy_verdicts(spec, loaded, batch_invariant=False):
    alone = {KEY: {"answer": ALONE_ANSWER, "ending": None}}
    return verdicts(spec, [rec(answer=a) for a in loaded], alone, batch_invariant=batch_invariant,
                    reference=lambda key: REF)


def test_load_greedy_near_tie_a_flip_at_a_near_tie_passes_a_confident_one_fails(spec):
    tie = ["L'Etoile.", "", [], "stop", None]  # alone led "The" over "L" by 0.005 nats
    confident = ["The city is Lyon.", "", [], "stop", None]  # alone led " capital" over " city" by 2.3 nats
    assert greedy_verdicts(spec, [ALONE_ANSWER, tie])["load.greedy.near-tie"].outcome == "PASS"
    r = greedy_verdicts(spec, [ALONE_ANSWER, confident])["load.greedy.near-tie"]
    assert r.outcome == "FAIL" and "2.300 nats" in r.vectors[0].result.failure.actual


def test_load_greedy_divergence_rate_is_reported_as_non_strict(spec):
    tie = ["L'Etoile.", "", [], "stop", None]
    r = greedy_verdicts(spec, [ALONE_ANSWER, ALONE_ANSWER, ALONE_ANSWER, tie])["load.greedy.divergence-rate"]
    assert r.outcome == "NON-STRICT" and r.reason.startswith("1 of 4 greedy answers") and "25.0%" in r.reason
    assert greedy_verdicts(spec, [ALONE_ANSWER])["load.greedy.divergence-rate"].outcome == "PASS"


def test_load_greedy_bit_identical_log_probabilities_count_only_when_promised(spec):
    shifted = ALONE_ANSWER[:4] + [[-0.1000001]]
    alone = {KEY: {"answer": ALONE_ANSWER[:4] + [[-0.1]], "ending": None}}
    promised = verdicts(spec, [rec(answer=shifted)], alone, batch_invariant=True)
    assert promised["load.greedy.bit-identical"].outcome == "FAIL"
    assert promised["load.greedy.divergence-rate"].outcome == "PASS"  # the same text: no divergence
    assert verdicts(spec, [rec(answer=shifted)], alone)["load.greedy.bit-identical"].outcome == "SKIPPED"


def test_parity_failures_under_load_are_a_must_only_for_a_batch_invariant_target(spec):
    f = [["stream.equals-unary", "stream_equals_unary", "same", "other"]]
    records = [rec(mode="stream", parity=True, failures=f)]
    assert verdicts(spec, records, batch_invariant=True)["stream.equals-unary"].outcome == "FAIL"
    out = verdicts(spec, records)
    assert out["stream.equals-unary"].outcome == "SKIPPED"
    assert out["load.greedy.divergence-rate"].outcome == "NON-STRICT"


def test_every_answer_under_load_counts_for_its_rule_and_the_invariants(spec):
    bad = rec(failures=[["chat.response.shape", "response_schema", "chat.response.json", "no id"]],
              evidence={"chat.response.shape response_schema": {"request": {}, "response": {"status": 200}}})
    out = verdicts(spec, [rec(), bad])
    r = out["chat.response.shape"]
    assert r.outcome == "FAIL" and r.vectors[0].result.exchange.to_dict()["response"]["status"] == 200
    assert out["gen.usage.counts"].outcome == "PASS"  # usage arithmetic: an invariant of every chat answer
    assert json.dumps(r.vectors[0].result.exchange.to_dict("no"))  # evidence is plain JSON


@pytest.mark.skipif(__import__("shutil").which("node") is None, reason="no node on this machine")
def test_the_html_report_draws_the_load_figures_and_both_plots(tmp_path):
    import subprocess

    from test_conform_user_paths import FAKE_DOM

    from conformance.report import _assets

    svg_dom = FAKE_DOM + ("FakeNode.prototype.setAttribute = function (k, v) { (this.attrs ||= {})[k] = v; };\n"
                          "document.createElementNS = (ns, tag) => new FakeNode(tag);\n")
    timeline = [{"t": t, "requests": 5, "ok": 4, "refused": 1, "errors": t % 2, "latency_p50_ms": 100.0 + t,
                 "latency_p90_ms": 300.0, "latency_max_ms": 400.0} for t in range(5)]
    fig = {"requests": 25, "ok": 20, "refused": 5, "errors": 2, "requests_per_s": 5.0, "output_tokens_per_s": 40.0,
           "latency_ms": {"p50": 100, "p90": 300, "p99": 400}, "ttft_ms": {"p50": 20, "p90": 30, "p99": 40}}
    doc = {"target": "t", "summary": {"PASS": 1}, "rules": [{"id": "load.requests.none-lost", "title": "x",
                                                             "level": "MUST", "outcome": "PASS", "vectors": []}],
           "load": {"users": 8, "ran_seconds": 5.0, "requests": 25, "workers": 2, "disconnects": 2,
                    "plan": {"sent": 4, "requests": 4}, "greedy": {"compared": 10, "diverged": 0},
                    "endpoints": {"chat stream": fig}, "timeline": timeline}}
    show = ("console.log(JSON.stringify([fakeRoot.all((n) => n.tagName === 'TD').map((n) => n.textContent), "
            "fakeRoot.all((n) => n.tagName === 'POLYLINE').length, fakeRoot.all((n) => n.tagName === 'RECT').length, "
            "fakeRoot.all((n) => n.tagName === 'FIGCAPTION').map((n) => n.textContent)]))")
    (tmp_path / "page.js").write_text(svg_dom + _assets()[0] + "\n" + show + "\n")
    cells, lines, bars, captions = json.loads(subprocess.run(
        ["node", str(tmp_path / "page.js")], capture_output=True, text=True, check=True, timeout=60,
        env={"REPORT_DATA": json.dumps([doc]), "PATH": "/usr/bin:/bin"}).stdout)
    assert cells[:10] == ["chat stream", "25", "20", "5", "2", "5", "100 / 300 / 400", "20 / 30 / 40", "·", "40"]
    assert (lines, bars) == (2, 10)  # latency p50 and p90; errors and 429s for each of five seconds
    assert captions[0].startswith("latency over time") and captions[1].startswith("errors over time")


def test_the_matrix_has_an_under_load_column_linking_each_servers_load_page(tmp_path):
    from conformance.compat import Run, headline, load_verdicts

    (tmp_path / "summary.json").write_text(json.dumps({"mockllm": {"runs": {
        "64": {"verdict": "FAIL", "failures": ["load.saturation.no-5xx"]}, "16": {"verdict": "PASS", "failures": []}}}}))
    runs = [Run("mockllm", {"rules": [], "model": "gpt"}, {"version": "0.0.8"}),
            Run("vllm", {"rules": [], "model": "smollm2"}, {"version": "0.32.0"})]
    table = headline(runs, "docs/compat/", {}, {}, load_verdicts(tmp_path))
    assert table[0].endswith("| under load |")
    assert table[2].endswith("| [16 users: PASS; 64 users: FAIL (load.saturation.no-5xx)](docs/compat/load/mockllm.md) |")
    assert table[3].endswith("| — |")


def test_load_command_usage_errors_and_an_unreachable_target_are_named_exit_codes():
    import subprocess
    import sys

    from live_server import free_port

    def run(*args):
        return subprocess.run([sys.executable, "-m", "conformance.cli", "load", *args], capture_output=True,
                              text=True, timeout=120)

    no_url = run("--duration", "5")
    assert (no_url.returncode, "--base-url is required" in no_url.stderr) == (2, True)
    assert run("--base-url", "http://127.0.0.1:1", "--users", "0").returncode == 2
    gone = run("--base-url", f"http://127.0.0.1:{free_port()}", "--duration", "1")
    assert gone.returncode == 3, gone.stderr


def test_every_plan_item_is_sent_whatever_the_plan_length_and_the_disconnect_rate(spec):
    from conformance.load.plan import Plan
    from conformance.load.state import Shared

    items = [item(spec)] * 10
    for n, k in enumerate(items):
        items[n] = Item(f"k{n}", k.rule, k.vector, k.mode, k.greedy)
    sh = Shared(Plan(items), None, "http://x", {}, "m", 60.0, disconnect_every=10)
    picks = [sh.next_item() for _ in range(22)]
    assert sum(p is None for p in picks) == 2 and {p.key for p in picks if p} == {f"k{n}" for n in range(10)}


class _Closer:
    """A raw HTTP server on a loopback port: the first `drop` connections are closed without an
    answer (a kept-alive connection the server closed just as the client reused it), the others
    get the start of an SSE stream."""

    def __init__(self, drop: int):
        import socket
        import threading

        self.drop, self.seen = drop, 0
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.base = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        threading.Thread(target=self._serve, daemon=True).start()

    @staticmethod
    def _read_request(conn) -> None:
        data = b""
        while b"\r\n\r\n" not in data and (chunk := conn.recv(65536)):
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                       if line.lower().startswith(b"content-length:")), 0)
        while len(body) < length and (chunk := conn.recv(65536)):
            body += chunk

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                self._read_request(conn)  # all of it: closing on unread bytes would reset, not close
                self.seen += 1
                if self.seen > self.drop:
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
                                 b'data: {"choices":[{"index":0,"delta":{"content":"1"}}]}\n\n')


def test_load_requests_none_lost_a_disconnecting_client_retries_a_connection_closed_before_any_answer():
    """A server closing a connection just as it is reused lost nothing (HttpTarget.send retries
    that race once on a fresh connection, and so does the disconnecting client); a request that
    gets no answer on the fresh connection either is lost, with the transport error as evidence."""
    from conformance.load.judge import disconnect
    from conformance.targets import HttpTarget

    raced = _Closer(drop=1)
    r = disconnect(HttpTarget(raced.base, {}, timeout=5, model="m"), "m", 5.0)
    assert (r.status, r.lost, r.disconnected, r.evidence, raced.seen) == (200, None, True, {}, 2)
    dead = _Closer(drop=99)
    r = disconnect(HttpTarget(dead.base, {}, timeout=5, model="m"), "m", 5.0)
    assert (r.status, r.lost, r.disconnected, dead.seen) == (0, "reset", False, 2)
    ev = r.evidence["load.requests.none-lost reset"]
    assert ev["request"]["path"] == "/v1/chat/completions" and "Count from 1 to 60" in ev["request"]["body"]
    assert ev["response"]["transport_error"].startswith("RemoteProtocolError")
    dead.sock.close()
    raced.sock.close()


def test_a_reproducing_curl_expands_base_when_pasted_into_a_shell():
    """The curl lines on the load and compat pages name the server as $BASE: it must not sit in
    single quotes, or the pasted line asks for the literal URL '$BASE/v1/...'."""
    import subprocess

    from conformance.compat import curl_for

    ev = {"request": {"method": "POST", "path": "/v1/chat/completions", "headers": {"Content-Type": "application/json"},
                      "body": '{"model": "m", "messages": [{"role": "user", "content": "it\'s"}]}'}}
    line = curl_for(ev)
    argv = subprocess.run(["bash", "-c", f'BASE=http://127.0.0.1:9; printf "%s\\n" {line.removeprefix("curl ")}'],
                          capture_output=True, text=True, check=True).stdout.splitlines()
    assert "http://127.0.0.1:9/v1/chat/completions" in argv and ev["request"]["body"] in argv
