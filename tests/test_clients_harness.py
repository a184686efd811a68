"""The clients harness's own logic (bench/clients/), without clients or servers: how install.py
reads a requirement and decides to reinstall, and how matrix.py shows a FAIL and a client's
declared limit met on the wire."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

HARNESS = Path(__file__).resolve().parents[1] / "bench" / "clients"


@pytest.fixture(scope="module")
def mods():
    sys.path.insert(0, str(HARNESS))
    try:
        import install
        import matrix
        yield install, matrix
    finally:
        sys.path.remove(str(HARNESS))


@pytest.mark.parametrize("spec,name", [("openai", "openai"), ("pydantic-ai-slim[openai]", "pydantic-ai-slim"),
                                       ("llm==0.36", "llm"), ("@ai-sdk/anthropic@3.0.140", "@ai-sdk/anthropic"),
                                       ("@mariozechner/pi-ai", "@mariozechner/pi-ai")])
def test_package_named_by_a_requirement(mods, spec, name):
    assert mods[0].package(spec) == name


def test_a_changed_client_list_installs_again(mods, tmp_path):
    install = mods[0]
    assert not install.installed(tmp_path, ["openai"])
    (tmp_path / install.STAMP).write_text("openai\n")
    assert install.installed(tmp_path, ["openai"])
    assert not install.installed(tmp_path, ["openai", "llm==0.36"])


def doc(outcome: str, exchanges: list[dict[str, object]]) -> dict[str, object]:
    ex = {"method": "POST", "path": "/v1/responses", "status": 200, "request": "{}", "response": "response.incomplete"}
    return {"server": "s", "model": "m", "date": "d", "wall_seconds": 1, "settings": {},
            "clients": {"pi-ai responses": {"scenarios": {
                "text": {"outcome": "PASS", "detail": "ok"},
                "cap": {"outcome": outcome, "detail": "the turn was cut by the cap: why",
                        **({"exchanges": [ex]} if exchanges else {})},
                "stop": {"outcome": "UNSUPPORTED", "detail": "the client has no stop option"}}}}}


def test_a_declared_limit_met_on_the_wire_is_shown_with_its_reason(mods):
    matrix = mods[1]
    d = doc("UNSUPPORTED", [{}])
    assert matrix.cell(d, "pi-ai responses", "text") == "PASS 1/3"
    page = matrix.server_page(d, {"*/pi-ai responses/cap": "pi reads usage only from response.completed"})
    assert "## pi-ai responses cap (client limit)" in page
    assert "**Why:** pi reads usage only from response.completed" in page and "response.incomplete" in page
    assert "No FAIL" in page and "pi-ai responses stop (client limit)" not in page  # no requests made


def test_a_fail_links_to_its_section_and_says_whose_fault(mods):
    matrix = mods[1]
    d = doc("FAIL", [{}])
    assert matrix.cell(d, "pi-ai responses", "text") == "[FAIL 1/2](s.md#pi-ai-responses-cap)"
    page = matrix.server_page(d, {"s/pi-ai responses/cap": "**server.** because"})
    assert "## pi-ai responses cap\n\n**Fault:** **server.** because" in page
    assert "not reviewed yet" in matrix.server_page(d, {})


def test_a_run_against_one_server_keeps_the_committed_columns(mods, tmp_path):
    """`tox -e clients` on a clean clone has one fresh result (colibri's) in its cache: the
    matrix it rewrites keeps every other server's committed column and replaces colibri's."""
    import json

    matrix = mods[1]
    docs, fresh = tmp_path / "docs", tmp_path / "fresh"
    (docs / "results").mkdir(parents=True), fresh.mkdir()
    for server, date in (("colibri", "old"), ("vllm", "old")):
        (docs / "results" / f"{server}.json").write_text(json.dumps({**doc("PASS", []), "server": server, "date": date}))
    (fresh / "colibri.json").write_text(json.dumps({**doc("FAIL", [{}]), "server": "colibri", "date": "new"}))
    matrix.write(fresh, docs)
    readme = (docs / "README.md").read_text()
    assert "[colibri](colibri.md) | [vllm](vllm.md)" in readme
    assert "[FAIL 1/2](colibri.md#pi-ai-responses-cap)" in readme
    assert json.loads((docs / "results" / "colibri.json").read_text())["date"] == "new"
    assert json.loads((docs / "results" / "vllm.json").read_text())["date"] == "old"


def test_a_changed_emission_is_named_setting_by_setting(mods):
    import settings

    old = {"pi_compat": {"maxTokensField": "max_tokens", "supportsStore": True}, "served": {"tools": True}}
    new = {"pi_compat": {"maxTokensField": "max_completion_tokens", "supportsStore": True}, "served": {"tools": True,
                                                                                                       "reasoning": False}}
    assert settings.changed(old, old) == []
    assert settings.changed({**old, "why_not": {"stop": "id 1"}}, {**old, "why_not": {"stop": "id 2"}}) == []
    assert settings.changed(old, new) == ['pi_compat.maxTokensField: "max_tokens" -> "max_completion_tokens"',
                                          "served.reasoning: null -> false"]
    page = mods[1].server_page({**doc("PASS", []), "settings_changed": settings.changed(old, new)}, {})
    assert '- `pi_compat.maxTokensField: "max_tokens" -> "max_completion_tokens"`' in page


def test_a_feature_taken_and_not_delivered_is_off_in_the_settings_with_its_reason(mods):
    """transformers serve as discovery found it (issue 53): stop and tools taken, neither
    delivered; the settings turn both off, say why, and the page shows it."""
    import settings

    served = {"state": "served", "status": 200, "detail": "200"}
    found = {name: served for name in ("chat", "streaming", "chat_text", "tools", "tool_result", "tool_call_stream")}
    found["stop_list"] = {"state": "ignored", "status": 200, "detail": "stop 'world' came back: content 'hello world'"}
    found["tool_call"] = {"state": "ignored", "status": 200, "detail": "200 without a call"}
    s = settings.settings_from(found)
    assert s["served"]["stop"] is False and s["served"]["tools"] is False and s["openai_sdk"]["tools"] is False
    assert s["served"]["chat_text"] is True and s["served"]["messages"] is None  # never probed: unknown, not off
    assert s["why_not"] == {"stop": "stop_list: stop 'world' came back: content 'hello world'",
                            "tools": "tool_call: 200 without a call", "reasoning": "no switch the settings can carry"}
    page = mods[1].server_page({**doc("PASS", []), "settings": s}, {})
    assert "- `tools`: tool_call: 200 without a call" in page


# --- The scenarios' needs (py/scenarios.py; js/driver.mjs reads the same table) -------------

class FakeClient:
    """A client that does what it is asked, on the wire of no server: what the scenarios do is
    decided by the settings alone."""

    surface = "chat"

    def __init__(self, **attrs):
        self.can, self.limits, self.turns = {"stop": True, "reasoning": True}, {}, []
        self.__dict__.update(attrs)

    def user(self, text):
        return {"role": "user", "content": text}

    assistant = user

    def tool_result(self, c, text):
        return {"role": "tool", "content": text}

    def turn(self, h, max_tokens, tools=False, stream=False, stop=None, reasoning=None):
        self.turns.append({"stream": stream, "reasoning": reasoning})
        usage = {"input": 5, "output": 3}
        if tools and h[-1]["role"] == "user":
            return {"text": "", "reasoning": "", "calls": [{"id": "c1", "name": "get_weather", "args": {"city": "D"}}],
                    "usage": usage, "history": []}
        text = h[-1]["content"].split(": ", 1)[-1]  # "Repeat exactly: X" -> X
        text = text.split(stop[0])[0].strip() if stop else text
        return {"text": text, "reasoning": "thought" if reasoning else "", "calls": [], "usage": usage, "history": []}

    def chain(self):
        return "chained"


@pytest.fixture(scope="module")
def scenarios():
    sys.path[:0] = [str(HARNESS / "py")]
    try:
        import scenarios
        yield scenarios
    finally:
        sys.path.remove(str(HARNESS / "py"))


def outcomes(scenarios, served=None, thinking_off=None, **client):
    import json

    s = json.loads((HARNESS / "scenarios.json").read_text())
    settings = {"served": served or {}, "openai_sdk": {"thinking_off": thinking_off}}
    runner = scenarios.Scenarios(FakeClient(**client), settings, s)
    out = {}
    for name in s["order"]:
        try:
            runner.run(name)
            out[name] = "PASS"
        except scenarios.Unsupported as e:
            out[name] = f"UNSUPPORTED {e}"
    return out


def unsupported(out):
    return {name: o.removeprefix("UNSUPPORTED ") for name, o in out.items() if o != "PASS"}


def test_unknown_served_keys_count_as_served(scenarios):
    assert unsupported(outcomes(scenarios)) == {}
    assert unsupported(outcomes(scenarios, {k: None for k in ("chat_text", "stop", "tools", "tools_stream")})) == {}


@pytest.mark.parametrize("surface", ["chat", "messages", "responses"])
def test_an_answer_that_does_not_follow_the_prompt_is_still_judged(scenarios, surface):
    # No setting makes a model answer as asked: the text scenarios run and FAIL on the answer
    # (the compat profile's chat_text says why), rather than being called unsupported.
    assert unsupported(outcomes(scenarios, {f"{surface}_text": False}, surface=surface)) == {}


def test_a_client_that_sends_block_content_needs_the_server_to_take_it(scenarios):
    why = "the server refuses Anthropic content given as a list of blocks, which this client always sends (discovery)"
    assert unsupported(outcomes(scenarios, {"messages_blocks": False}, surface="messages")) == {}  # strings as given
    out = unsupported(outcomes(scenarios, {"messages_blocks": False}, surface="messages", sends_blocks=True))
    assert out == {name: why for name in out} and len(out) == 10


@pytest.mark.parametrize("surface,key", [("chat", "streaming"), ("messages", "messages_stream"),
                                         ("responses", "responses_stream")])
def test_streams_are_judged_on_the_clients_surface(scenarios, surface, key):
    why = f"the server's streams on {surface} are not well formed for an SDK (discovery)"
    assert unsupported(outcomes(scenarios, {key: False}, surface=surface)) == {"stream": why, "tools_stream": why}
    # A client that always streams (pi) needs them for every scenario.
    out = unsupported(outcomes(scenarios, {key: False}, surface=surface, always_streams=True))
    assert out == {name: why for name in out} and len(out) == 10


def test_stop_tools_and_streamed_tools_each_need_their_own_key(scenarios):
    assert unsupported(outcomes(scenarios, {"stop": False})) == {
        "stop": "the server does not honour stop sequences (discovery)"}
    tools = "the server returns no tool call, or does not answer a tool result (discovery)"
    assert unsupported(outcomes(scenarios, {"tools": False})) == {"tools": tools, "tools_stream": tools}
    streamed = "a streamed tool call does not assemble, or its stream ends with no finish_reason (discovery)"
    assert unsupported(outcomes(scenarios, {"tools_stream": False})) == {"tools_stream": streamed}
    # pi streams even its unary tool turn.
    assert unsupported(outcomes(scenarios, {"tools_stream": False}, always_streams=True)) == {
        "tools": streamed, "tools_stream": streamed}
    history = "the server refuses a Responses history of message items without `type`, which this client sends (discovery)"
    assert unsupported(outcomes(scenarios, {"responses_history": False}, untyped_history=True)) == {"multi": history}
    assert unsupported(outcomes(scenarios, {"responses_history": False})) == {}  # typed items (pi): not needed
    assert unsupported(outcomes(scenarios, {"responses_chaining": False})) == {
        "chain": "the server does not answer a response chained onto one it just stored (discovery)"}


def test_thinking_off_makes_a_client_that_cannot_send_it_unsupported_everywhere(scenarios):
    off = {"chat_template_kwargs": {"enable_thinking": False}}
    limits = {"extra_body": "it has no extra-body option (src/x.py)"}
    out = unsupported(outcomes(scenarios, thinking_off=off, limits=limits))
    assert out == {name: "client limit: it has no extra-body option (src/x.py)" for name in out} and len(out) == 10
    assert unsupported(outcomes(scenarios, thinking_off=None, limits=limits)) == {}
    assert unsupported(outcomes(scenarios, thinking_off=off)) == {}  # a client that sends it runs them all


def test_the_two_drivers_name_the_same_needs_and_every_need_has_its_reason():
    """Both drivers take the reasons from scenarios.json; what each scenario needs is written in
    both, so the names each uses must be the same and all in the table."""
    import json
    import re

    table = set(json.loads((HARNESS / "scenarios.json").read_text())["needs"]) - {"_comment"}

    def used(text):
        return {n for args in re.findall(r"needs\(([^)]*)\)", text) for n in re.findall(r'"(\w+)"', args)}

    py, js = used((HARNESS / "py" / "scenarios.py").read_text()), used((HARNESS / "js" / "driver.mjs").read_text())
    assert py == js == table, (py ^ table, js ^ table)
