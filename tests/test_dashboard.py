"""The dashboard in a real browser (headless Chromium over the DevTools protocol, when the
machine has Chromium): the page loads, asks the question of its ?q= link through the
streaming API, shows the answer, and fills the server panel from /health."""
from __future__ import annotations

import json
import shutil
import time
import urllib.parse
import urllib.request

import pytest
from browser import BROWSER, Page
from live_server import live_server

STATE = """JSON.stringify({
  messages: [...document.querySelectorAll(".msg")].map(e => [e.className.slice(4), e.textContent]),
  cells: [...document.querySelectorAll("aside td")].map(e => e.textContent),
})"""


@pytest.mark.skipif(BROWSER is None, reason="no Chromium on this machine")
def test_dashboard_answers_its_question_and_shows_the_scheduler(tmp_path):
    with live_server() as base:
        page = Page(str(tmp_path))
        try:
            page.call("Page.navigate", url=f"{base}/?q={urllib.parse.quote('Repeat exactly: hello world')}")
            filled = _filled_not_sent(page, base, "Repeat exactly: hello world")
            page.call("Runtime.evaluate", expression="document.querySelector('#ask button[type=submit]').click()")
            deadline = time.monotonic() + 60
            while True:  # until the reply is finished and a later /health refresh counted it
                state = page.value(STATE)
                panel = dict(zip(state["cells"][::2], state["cells"][1::2], strict=False))
                if panel.get("finish reason") and panel.get("completed") == "1" or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
        finally:
            page.close()
        assert page.console == [], page.console
        # The same greedy request, asked directly: the panel must show the server's own count. (Not
        # the tokenizer's encoding of the answer: the model copies a word in the prompt's pieces,
        # "hello world" after "exactly:" as four tokens where encode() gives three.)
        req = urllib.request.Request(f"{base}/v1/chat/completions", method="POST", data=json.dumps({
            "model": "colibri-tiny", "max_tokens": 256, "temperature": 0, "enable_thinking": False,
            "messages": [{"role": "user", "content": "Repeat exactly: hello world"}]}).encode(),
            headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as r:
            direct = json.loads(r.read())
    assert filled == {"prompt": "Repeat exactly: hello world", "messages": 0, "note": True}
    assert direct["choices"][0]["message"]["content"] == "hello world"
    assert state["messages"] == [["user", "Repeat exactly: hello world"], ["assistant", "hello world"]]
    assert panel["active / capacity"] == "0 / 4"
    assert panel["completed"] == "1"
    assert panel["finish reason"] == "stop"
    assert panel["completion tokens"] == str(direct["usage"]["completion_tokens"])


def _filled_not_sent(page, base, question, headers=None):
    """A /?q= link fills the question in and sends nothing until the user presses Send: the page
    holds it, shows no message, and the server has admitted no request for a while."""
    deadline = time.monotonic() + 30
    while True:
        state = page.value("""JSON.stringify({prompt: document.getElementById('prompt').value,
            messages: document.querySelectorAll('.msg').length, note: !document.getElementById('prompt-note').hidden})""")
        if state and state["prompt"] == question or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    time.sleep(1.0)  # time enough for a page that sends at once to have sent
    req = urllib.request.Request(f"{base}/health", headers=headers or {})
    with urllib.request.urlopen(req, timeout=10) as r:
        assert json.loads(r.read())["scheduler"]["admitted"] == 0
    assert page.value("JSON.stringify(document.querySelectorAll('.msg').length)") == 0
    return state


S1_STATE = """JSON.stringify({
  answers: [...document.querySelectorAll(".s1-answer")].map(a => ({
    name: a.querySelector("h3").textContent,
    bars: [...a.querySelectorAll(".s1-bar")].map(b => [b.querySelector("span").textContent, Number(b.dataset.p),
                                                      b.classList.contains("chosen"), b.lastChild.textContent]),
    meta: a.querySelector(".s1-meta").textContent})),
  error: document.getElementById("s1-error").hidden ? null : document.getElementById("s1-error").textContent,
  curl: document.getElementById("s1-curl").textContent,
  chatHidden: document.getElementById("page-chat").hidden,
  loaded: document.readyState === "complete",
  errors: window.colibriErrors || ["no error log"],
})"""


@pytest.mark.skipif(BROWSER is None, reason="no Chromium on this machine")
def test_dashboard_system_one_page_shows_bars_that_sum_to_one_and_errors_in_place(tmp_path):
    def wait(page, done):
        deadline = time.monotonic() + 60
        while True:
            state = page.value(S1_STATE)  # None while the page is still loading
            if state is not None and done(state):
                return state
            if time.monotonic() > deadline:
                raise AssertionError(f"the page never got there: {state}")
            time.sleep(0.2)

    with live_server() as base:
        page = Page(str(tmp_path))
        try:
            page.call("Page.navigate", url=f"{base}/ui/#systemone")
            wait(page, lambda s: s["chatHidden"] and s["loaded"])
            page.call("Runtime.evaluate", expression="document.querySelector('#s1-form button[type=submit]').click()")
            state = wait(page, lambda s: len(s["answers"]) == 3)
            # a score question without levels: the server's 400 shows in place, the page keeps working
            page.call("Runtime.evaluate", expression="""
                document.querySelectorAll('.s1-question')[1].querySelector('textarea').value = '';
                document.querySelector('#s1-form button[type=submit]').click()""")
            failed = wait(page, lambda s: s["error"] is not None)
        finally:
            page.close()
        assert page.console == [], page.console
    assert state["chatHidden"] and state["error"] is None and state["errors"] == []
    assert [a["name"] for a in state["answers"]] == ["problem", "mood", "refund"]
    for a in state["answers"]:
        ps = [p for _, p, _, _ in a["bars"]]
        assert abs(sum(ps) - 1) < 1e-4, a  # the bars of one answer sum to 100%
        chosen = [i for i, (_, _, c, _) in enumerate(a["bars"]) if c]
        assert chosen == [ps.index(max(ps))], a  # exactly one chosen bar: the most probable
        assert "entropy" in a["meta"]
    assert [b[0] for b in state["answers"][0]["bars"]] == ["late delivery", "damage", "billing"]
    assert [b[0] for b in state["answers"][2]["bars"]] == ["true", "false"]
    assert state["curl"].startswith(f"curl {base}/v1/systemone") and '"questions"' in state["curl"]
    assert failed["error"].startswith("400 ") and "mood" in failed["error"]
    assert failed["errors"] == []


@pytest.mark.skipif(BROWSER is None, reason="no Chromium on this machine")
def test_dashboard_chat_shows_a_refusal_in_place_of_the_answer(tmp_path):
    # a server with a key the page was not given: 401 in the answer's place, no page error
    with live_server("--api-key", "k-dash") as base:
        page = Page(str(tmp_path))
        try:
            page.call("Page.navigate", url=f"{base}/?q=hello")
            _filled_not_sent(page, base, "hello", {"Authorization": "Bearer k-dash"})
            page.call("Runtime.evaluate", expression="document.querySelector('#ask button[type=submit]').click()")
            deadline = time.monotonic() + 30
            while True:
                state = page.value("""JSON.stringify({
                    messages: [...document.querySelectorAll('.msg')].map(e => [e.className, e.textContent]),
                    errors: window.colibriErrors, busy: document.querySelector('#ask button').disabled})""") or {}
                if any("error" in c for c, _ in state.get("messages", [])) or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
        finally:
            page.close()
        assert page.console == [], page.console
    assert state["messages"][-1][0] == "msg error", state
    assert state["messages"][-1][1].startswith("401 invalid_api_key: "), state
    assert [c for c, _ in state["messages"]] == ["msg user", "msg error"]  # no empty bubble left behind
    assert state["errors"] == [] and state["busy"] is False


TURN = """JSON.stringify({
  bubbles: [...document.querySelectorAll('#log .msg')].map(e => e.className),
  reasoning: [...document.querySelectorAll('#log details.reasoning')].map(d => [d.open, d.querySelector('div').textContent]),
  calls: [...document.querySelectorAll('#log .tool-call code')].map(c => c.textContent),
  finish: [...document.querySelectorAll('#reply td')].map(e => e.textContent),
  ready: !document.querySelector('#ask button[type=submit]').disabled,
  errors: window.colibriErrors})"""


@pytest.mark.skipif(BROWSER is None, reason="no Chromium on this machine")
def test_dashboard_chat_turn_with_reasoning_and_a_tool_call_then_its_result(tmp_path):
    tools = json.dumps([{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])
    ask = """(text) => { document.getElementById('prompt').value = text;
                         document.querySelector('#ask button[type=submit]').click(); }"""
    with live_server() as base:
        page = Page(str(tmp_path))
        try:
            page.call("Page.navigate", url=f"{base}/ui/")
            deadline = time.monotonic() + 60
            while page.value("JSON.stringify(document.readyState === 'complete')") is not True:
                time.sleep(0.1)  # the modules have run: their listeners are on the form
            page.call("Runtime.evaluate", expression=f"""
                document.getElementById('thinking').checked = true;
                document.getElementById('tools').value = {json.dumps(tools)};
                ({ask})('What is the weather in Paris?')""")
            while not ((state := page.value(TURN))["ready"] and "tool_calls" in state["finish"]):
                if time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            # the call's result goes with the next message, and that turn is answered too
            page.call("Runtime.evaluate", expression=f"""
                document.querySelector('#log .tool-call input').value = '{{"temp_c": 21}}';
                ({ask})('Thanks!')""")
            while len((after := page.value(TURN))["bubbles"]) < 4 or not after["ready"]:
                if time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            sent = page.value("JSON.stringify(null)")  # the page is still alive
        finally:
            page.close()
        assert page.console == [], page.console
    assert state["bubbles"] == ["msg user", "msg assistant"] and state["errors"] == []
    assert state["reasoning"] and state["reasoning"][0][0] is False and state["reasoning"][0][1]  # shown, folded
    assert len(state["calls"]) == 1 and state["calls"][0].startswith("get_weather({")
    assert after["bubbles"] == ["msg user", "msg assistant", "msg user", "msg assistant"], after
    assert after["errors"] == [] and sent is None


def test_spec_json_lists_every_rule_with_each_vectors_whole_request():
    from colibri.server.app import build_app
    from colibri.spec import load_spec
    from conformance.targets import InProcessTarget

    ex = InProcessTarget(build_app(), {"Host": "localhost"}).send("GET", "/spec.json")
    doc = ex.json()
    spec = load_spec()
    assert ex.status == 200 and ex.header("Content-Type").startswith("application/json")
    assert [r["id"] for r in doc["rules"]] == [r.id for r in spec.rules] and doc["model"] == "colibri-tiny"
    rule = next(r for r in doc["rules"] if r["id"] == "req.model.required")
    v = next(v for v in rule["vectors"] if v["name"] == "gen-chat-required-model-null")
    assert v["method"] == "POST" and v["path"] == "/v1/chat/completions" and v["not_here"] is None
    assert "model" not in v["request"] and v["request"]["messages"]  # the endpoint's minimal request, model left out
    assert v["expect"] == {"status": 400, "code": "missing_required_parameter", "param": "model"}
    reasons = {v["not_here"].split(" ")[0] for r in doc["rules"] for v in r["vectors"] if v["not_here"]}
    assert reasons == {"needs", "sends", "judged"}  # settings or placeholders, raw bodies, checks or JSON paths


SPEC_STATE = """JSON.stringify({
  loaded: document.readyState === "complete",
  count: document.getElementById("spec-count").textContent,
  rules: [...document.querySelectorAll(".spec-rule summary code")].map(c => c.textContent),
  verdicts: [...document.querySelectorAll(".spec-out strong")].map(s => s.textContent),
  disabled: [...document.querySelectorAll(".spec-vector button")].filter(b => b.disabled).map(b => b.title),
  errors: window.colibriErrors})"""


@pytest.mark.skipif(BROWSER is None, reason="no Chromium on this machine")
def test_dashboard_spec_page_searches_rules_and_tries_a_vector(tmp_path):
    with live_server() as base:
        page = Page(str(tmp_path))
        try:
            page.call("Page.navigate", url=f"{base}/ui/#spec")
            deadline = time.monotonic() + 60
            while not ((s := page.value(SPEC_STATE)) and s["loaded"] and "rules" in s["count"]):
                assert time.monotonic() < deadline, s
                time.sleep(0.2)
            everything = s["count"]
            page.call("Runtime.evaluate", expression="""
                const q = document.getElementById('spec-q'); q.value = 'req.model.required';
                q.dispatchEvent(new Event('input'));
                document.querySelector('.spec-rule').open = true;""")
            page.call("Runtime.evaluate", expression="""
                [...document.querySelectorAll('.spec-vector button')].find(b => !b.disabled).click()""")
            while not ((s := page.value(SPEC_STATE))["verdicts"]) or s["verdicts"][0] == "sending…":
                assert time.monotonic() < deadline, s
                time.sleep(0.2)
        finally:
            page.close()
        assert page.console == [], page.console
    assert everything.endswith("rules (first 60 shown)") and int(everything.split(" of ")[1].split()[0]) > 200
    assert s["rules"] == ["req.model.required"] and s["count"].startswith("1 of ")
    assert s["verdicts"][0] == "PASS", s  # sent from the page, judged by status, code and param
    assert s["errors"] == []


PROFILE_STATE = """JSON.stringify({
  count: document.getElementById("prof-count").textContent,
  phases: [...document.querySelectorAll("#prof-phases rect")].map(r => [r.dataset.phase, Number(r.getAttribute("width"))]),
  last: Object.fromEntries([...document.querySelectorAll("#prof-last tr")].map(r => [r.cells[0].textContent, r.cells[1].textContent])),
  rate: document.querySelectorAll("#prof-rate circle").length,
  ttft: document.querySelectorAll("#prof-ttft circle").length,
  errors: window.colibriErrors})"""


@pytest.mark.skipif(BROWSER is None, reason="no Chromium on this machine")
def test_dashboard_profiling_page_draws_the_last_turn_and_the_trend_after_three_turns(tmp_path):
    with live_server() as base:
        ids = []
        for words in ("one", "two words", "three more words"):
            req = urllib.request.Request(f"{base}/v1/chat/completions", method="POST", data=json.dumps({
                "model": "colibri-tiny", "max_tokens": 16, "stream": True,
                "messages": [{"role": "user", "content": f"Repeat exactly: {words}"}]}).encode(),
                headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=60) as r:
                r.read()
                ids.append(r.headers["x-request-id"])
        page = Page(str(tmp_path))
        try:
            page.call("Page.navigate", url=f"{base}/ui/#profile")
            deadline = time.monotonic() + 60
            while not ((s := page.value(PROFILE_STATE)) and s["ttft"] == 3):
                assert time.monotonic() < deadline, s
                time.sleep(0.2)
        finally:
            page.close()
        assert page.console == [], page.console
    assert s["count"].startswith("3 turns recorded")
    assert [p for p, _ in s["phases"]] == ["render", "queue", "prefill", "decode", "sample", "logprobs", "text", "write",
                                           "other"]
    assert abs(sum(w for _, w in s["phases"]) - 640) < 0.5  # the bar is the whole turn
    assert s["last"]["request"] == ids[-1] and s["last"]["endpoint"] == "/v1/chat/completions (stream)"
    assert s["rate"] == 3 and s["errors"] == []


def report_doc(target: str, outcome: str) -> dict:
    """A small colibri-conform --json report: one rule passing, one with `outcome` and evidence
    whose body holds markup that must stay text."""
    evidence = {"request": {"method": "POST", "path": "/v1/chat/completions", "headers": {}, "body": "{}"},
                "response": {"status": 200, "headers": {"content-type": "application/json"},
                             "body": '{"note": "</script><b id=injected>x</b>"}', "elapsed": 0.01}}
    return {"schema_version": 1, "tool": "colibri-conform", "target": target, "model": "m", "contract": "openai",
            "started": "2026-12-01T00:00:00Z", "duration_seconds": 1.5,
            "discovery": {"chat": {"state": "served", "status": 200, "detail": "200"}},
            "summary": {"PASS": 1 + (outcome == "PASS"), "FAIL": int(outcome == "FAIL")},
            "rules": [{"id": "req.model.required", "title": "model is required", "level": "MUST", "kind": "wire",
                       "outcome": "PASS", "vectors": [{"name": "missing", "mode": "unary", "outcome": "PASS"}]},
                      {"id": "chat.finish.reason", "title": "a finish reason <i>per</i> choice", "level": "MUST",
                       "kind": "wire", "outcome": outcome,
                       "vectors": [{"name": "basic", "mode": "unary", "outcome": outcome, "check": "json $.x",
                                    "expected": "'stop'", "actual": "None", "evidence": evidence}]}]}


REPORT_STATE = """JSON.stringify({
  heads: [...document.querySelectorAll(".rep-head h2")].map(h => h.textContent),
  columns: [...document.querySelectorAll(".rep-table th")].map(h => h.textContent),
  rows: [...document.querySelectorAll(".rep-rule")].map(r => [...r.cells].map(c => c.textContent)),
  detail: [...document.querySelectorAll(".rep-open pre")].map(p => p.textContent),
  injected: document.getElementById("injected") !== null,
  error: document.getElementById("rep-error") && !document.getElementById("rep-error").hidden
    ? document.getElementById("rep-error").textContent : null,
  errors: window.colibriErrors || []})"""


def wait_for(page, expression, done, seconds=60):
    deadline = time.monotonic() + seconds
    while not ((s := page.value(expression)) and done(s)):
        assert time.monotonic() < deadline, s
        time.sleep(0.2)
    return s


@pytest.mark.skipif(BROWSER is None, reason="no Chromium on this machine")
def test_dashboard_reports_page_opens_reports_from_files_as_one_and_as_a_matrix(tmp_path):
    files = []
    for name, outcome in (("a", "FAIL"), ("b", "PASS")):
        files.append(tmp_path / f"{name}.json")
        files[-1].write_text(json.dumps(report_doc(f"http://{name}.test", outcome)))
    (tmp_path / "junk.json").write_text('{"not": "a report"}')
    with live_server() as base:
        page = Page(str(tmp_path / "profile"))
        try:
            page.call("Page.navigate", url=f"{base}/ui/#reports")
            wait_for(page, "JSON.stringify(document.readyState === 'complete' || null)", bool)
            node = page.call("Runtime.evaluate", expression="document.getElementById('rep-file')")["result"]["objectId"]
            page.call("DOM.enable")
            page.call("DOM.setFileInputFiles", files=[str(files[0])], objectId=node)
            one = wait_for(page, REPORT_STATE, lambda s: s["rows"])
            page.call("Runtime.evaluate", expression="document.querySelector('.rep-rule a').click()")
            opened = wait_for(page, REPORT_STATE, lambda s: s["detail"])
            page.call("DOM.setFileInputFiles", files=[str(files[1])], objectId=node)
            matrix = wait_for(page, REPORT_STATE, lambda s: len(s["heads"]) == 2)
            page.call("DOM.setFileInputFiles", files=[str(tmp_path / "junk.json")], objectId=node)
            junk = wait_for(page, REPORT_STATE, lambda s: s["error"])
        finally:
            page.close()
        assert page.console == [], page.console
    assert one["heads"] == ["colibri-conform: http://a.test"]
    assert one["rows"] == [["chat.finish.reason", "MUST", "FAIL", "a finish reason <i>per</i> choice"]]  # problems first
    assert "check: json $.x\nexpected: 'stop'\nactual: None" in opened["detail"][0]
    assert any("</script><b id=injected>x</b>" in d for d in opened["detail"]) and not opened["injected"]
    assert matrix["columns"] == ["rule", "level", "http://a.test", "http://b.test", "title"]
    assert matrix["rows"] == [["chat.finish.reason", "MUST", "FAIL", "PASS", "a finish reason <i>per</i> choice"]]
    assert junk["error"].startswith("junk.json: no rules array")
    assert one["errors"] == [] and matrix["errors"] == [] and junk["errors"] == []


@pytest.mark.skipif(BROWSER is None, reason="no Chromium on this machine")
def test_static_html_report_draws_with_the_same_renderer_from_disk(tmp_path):
    from conformance.report import write_html

    write_html([report_doc("http://a.test", "FAIL"), report_doc("http://b.test", "PASS")], tmp_path / "html")
    page = Page(str(tmp_path / "profile"))
    try:
        page.call("Page.navigate", url=f"file://{tmp_path}/html/index.html#chat.finish.reason")
        s = wait_for(page, REPORT_STATE, lambda s: s["detail"])
    finally:
        page.close()
    assert page.console == [], page.console
    assert s["heads"] == ["colibri-conform: http://a.test", "colibri-conform: http://b.test"]
    assert s["rows"] == [["chat.finish.reason", "MUST", "FAIL", "PASS", "a finish reason <i>per</i> choice"]]
    assert any("</script><b id=injected>x</b>" in d for d in s["detail"]) and not s["injected"]


@pytest.mark.skipif(BROWSER is None, reason="no Chromium on this machine")
def test_dashboard_spec_page_tries_a_vector_against_another_local_server(tmp_path):
    with live_server() as base, live_server("--cors-origin", base, "--api-key", "k-other") as other:
        page = Page(str(tmp_path))
        try:
            page.call("Page.navigate", url=f"{base}/ui/#spec")
            wait_for(page, SPEC_STATE, lambda s: s["loaded"] and "rules" in s["count"])
            verdicts = []
            for key, rule in (("k-other", "req.model.required"), ("wrong", "req.model.required"),
                              ("k-other", "ops.dashboard.csp")):
                page.call("Runtime.evaluate", expression=f"""{{
                    document.getElementById('spec-target').value = {json.dumps(other)};
                    document.getElementById('spec-key').value = {json.dumps(key)};
                    const q = document.getElementById('spec-q'); q.value = {json.dumps(rule)};
                    q.dispatchEvent(new Event('input'));
                    document.querySelector('.spec-rule').open = true; }}""")
                wait_for(page, "JSON.stringify(document.querySelectorAll('.spec-vector button').length || null)", bool)
                page.call("Runtime.evaluate", expression="""
                    [...document.querySelectorAll('.spec-vector button')].find(b => !b.disabled).click()""")
                s = wait_for(page, SPEC_STATE, lambda s: s["verdicts"] and s["verdicts"][0] != "sending…")
                verdicts.append(s["verdicts"][0])
        finally:
            page.close()
        assert page.console == [], page.console
    assert verdicts[0] == "PASS", verdicts  # the other server's 400 judged like this one's
    assert verdicts[1].startswith("FAIL: status 401"), verdicts  # its key is its own
    assert verdicts[2].startswith("INCONCLUSIVE: another origin's headers Content-Security-Policy"), verdicts
    assert s["errors"] == []


def test_the_chat_page_says_what_temperature_it_sends_and_the_api_default():
    """Issue 50 item 6: the page sends 0 while a request without temperature gets 1; the page
    says both, and the default it names is the one the server applies (read back from the
    Responses object, which echoes the temperature used)."""
    import re
    from html.parser import HTMLParser

    import falcon.testing

    from colibri.paths import data_dir
    from colibri.server.app import create_app
    from colibri.server.service import Service, Settings

    class Fields(HTMLParser):
        def __init__(self) -> None:
            super().__init__()
            self.attrs: dict[str, dict[str, str | None]] = {}
            self.text: dict[str, str] = {}
            self._in: str | None = None

        def handle_starttag(self, tag, attrs):
            a = dict(attrs)
            if a.get("id"):
                self.attrs[str(a["id"])] = a
                self._in = str(a["id"])

        def handle_data(self, data):
            if self._in:
                self.text[self._in] = self.text.get(self._in, "") + data

        def handle_endtag(self, tag):
            self._in = None

    page = Fields()
    page.feed((data_dir("web") / "index.html").read_text())
    sent = float(page.attrs["temperature"]["value"] or "nan")
    note = page.text["temperature-note"]
    default = float(re.fullmatch(r"\(sent; the API's default is ([0-9.]+)\)", note).group(1))
    client = falcon.testing.TestClient(create_app(Service(Settings(kv_slots=1))))
    r = client.simulate_post("/v1/responses", json={"model": "colibri-tiny", "input": "Repeat exactly: hi",
                                                    "max_output_tokens": 4}, headers={"Host": "127.0.0.1"})
    assert r.status_code == 200 and r.json["temperature"] == default == 1
    assert sent == 0


@pytest.mark.skipif(BROWSER is None, reason="no Chromium on this machine")
def test_dashboard_system_one_curl_expands_the_key_variable(tmp_path):
    """The System One page's curl names the key as $COLIBRI_API_KEY inside double quotes, so a
    shell expands it: run as shown, with the variable set, it gets the page's answer."""
    import subprocess

    with live_server("--api-key", "k-s1") as base:
        page = Page(str(tmp_path))
        try:
            page.call("Page.navigate", url=f"{base}/ui/#systemone")
            deadline = time.monotonic() + 60
            while page.value(S1_STATE) is None or not page.value(S1_STATE)["loaded"]:
                assert time.monotonic() < deadline
                time.sleep(0.2)
            page.call("Runtime.evaluate", expression="""document.getElementById('key').value = 'k-s1';
                document.querySelector('#s1-form button[type=submit]').click()""")
            while not (state := page.value(S1_STATE))["answers"]:
                assert time.monotonic() < deadline, state
                time.sleep(0.2)
        finally:
            page.close()
        assert '-H "Authorization: Bearer $COLIBRI_API_KEY"' in state["curl"] and "k-s1" not in state["curl"]
        if shutil.which("curl"):
            out = subprocess.run(["bash", "-c", state["curl"] + " -s -o /dev/null -w '%{http_code}'"],
                                 env={"PATH": "/usr/bin:/bin", "COLIBRI_API_KEY": "k-s1"},
                                 capture_output=True, text=True, timeout=60)
            assert out.stdout == "200", out


@pytest.mark.skipif(not (shutil.which("node") and shutil.which("curl")), reason="needs node and curl")
def test_system_one_curl_as_shown_runs_in_a_shell_with_the_key_variable(tmp_path):
    """The page's curl function (web/systemone.js, run by node without a browser) gives a
    command that a shell runs as shown: $COLIBRI_API_KEY expands, so the right key gets 200
    and another 401."""
    import subprocess
    from pathlib import Path

    src = (Path(__file__).resolve().parents[1] / "web" / "systemone.js").read_text()
    fn = src[src.index("function curl("):src.index("async function decide")]
    script = tmp_path / "curl.mjs"
    script.write_text(f"globalThis.location = {{origin: process.argv[2]}};\n{fn}\nprocess.stdout.write(curl("
                      '{model: "colibri-tiny", state: "It\'s raining.", questions: {rain: {type: "noul"}}}, "k"));\n')
    with live_server("--api-key", "k-s1") as base:
        cmd = subprocess.run(["node", str(script), base], capture_output=True, text=True, timeout=60, check=True).stdout
        codes = [subprocess.run(["bash", "-c", cmd + " -s -o /dev/null -w '%{http_code}'"], capture_output=True, text=True,
                                env={"PATH": "/usr/bin:/bin", "COLIBRI_API_KEY": key}, timeout=60).stdout
                 for key in ("k-s1", "wrong")]
    assert "$COLIBRI_API_KEY" in cmd and "k-s1" not in cmd
    assert codes == ["200", "401"]


def test_dashboard_folder_is_open_on_a_key_protected_server():
    """The dashboard's own files hold no data and carry the key field: behind --api-key, "/ui/"
    (which falcon hands over as "/ui") answers the page like "/ui/index.html", not 401; the API stays closed."""
    import falcon.testing

    from colibri.server.app import create_app
    from colibri.server.service import Service, Settings

    client = falcon.testing.TestClient(create_app(Service(Settings(kv_slots=1, api_key="k"))))
    for path in ("/ui/", "/ui", "/ui/index.html"):
        r = client.simulate_get(path, headers={"Host": "127.0.0.1"})
        assert r.status_code == 200 and "<!doctype html>" in r.text, path
    r = client.simulate_get("/v1/models", headers={"Host": "127.0.0.1"})
    assert r.status_code == 401 and r.json["error"]["code"] == "invalid_api_key"


@pytest.mark.skipif(BROWSER is None, reason="no Chromium on this machine")
def test_dashboard_chat_asks_the_model_id_once_the_key_is_typed(tmp_path):
    """Behind --api-key the page's first /v1/models is refused (no key typed yet); the chat asks
    the served model's id again when it sends, with the key, instead of guessing a name."""
    with live_server("--api-key", "k-late") as base:
        page = Page(str(tmp_path))
        try:
            page.call("Page.navigate", url=f"{base}/?q=Repeat%20exactly%3A%20hello")
            _filled_not_sent(page, base, "Repeat exactly: hello", {"Authorization": "Bearer k-late"})
            page.call("Runtime.evaluate", expression="document.getElementById('key').value = 'k-late';"
                      "document.querySelector('#ask button[type=submit]').click()")
            deadline = time.monotonic() + 60
            while True:
                state = page.value("""JSON.stringify({
                    messages: [...document.querySelectorAll('.msg')].map(e => [e.className, e.textContent]),
                    busy: document.querySelector('#ask button').disabled})""") or {}
                if (len(state.get("messages", [])) >= 2 and not state["busy"]) or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
        finally:
            page.close()
        assert page.console == [], page.console
    assert [c for c, _ in state["messages"]] == ["msg user", "msg assistant"], state
    assert "hello" in state["messages"][-1][1], state
