"""The official `openai` and `anthropic` SDKs against a live `colibri serve` — no shims."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from live_server import live_server

openai = pytest.importorskip("openai")
anthropic = pytest.importorskip("anthropic")

pytestmark = pytest.mark.integration

WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Current weather for a city",
                                            "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                           "required": ["city"]}}}


@pytest.fixture(scope="module")
def base_url():
    with live_server("--kv-slots", "2") as url:
        yield url


@pytest.fixture
def oai(base_url):
    return openai.OpenAI(base_url=base_url + "/v1", api_key="local", max_retries=0)


@pytest.fixture
def claude(base_url):
    return anthropic.Anthropic(base_url=base_url, api_key="local", max_retries=0)


def test_openai_plain(oai):
    r = oai.chat.completions.create(model="colibri-tiny", temperature=0, max_tokens=20,
                                    messages=[{"role": "user", "content": "Repeat exactly: hello world"}])
    assert r.choices[0].message.content == "hello world"
    assert r.choices[0].finish_reason == "stop"
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


def test_openai_stream_reassembles_to_the_unary_answer(oai):
    kw = {"model": "colibri-tiny", "temperature": 0, "max_tokens": 30,
          "messages": [{"role": "user", "content": "Repeat exactly: café 😊 日本語"}]}
    unary = oai.chat.completions.create(**kw).choices[0].message.content
    parts, finish, usage = [], None, None
    for chunk in oai.chat.completions.create(stream=True, stream_options={"include_usage": True}, **kw):
        if chunk.choices:
            parts.append(chunk.choices[0].delta.content or "")
            finish = chunk.choices[0].finish_reason or finish
        usage = chunk.usage or usage
    assert "".join(parts) == unary and finish == "stop" and usage is not None


def test_openai_stream_helper_with_tools(oai):
    with oai.chat.completions.stream(model="colibri-tiny", temperature=0, max_tokens=60, tools=[WEATHER],
                                     messages=[{"role": "user", "content": "What's the weather in Drassa?"}]) as s:
        for _ in s:
            pass
        final = s.get_final_completion()
    call = final.choices[0].message.tool_calls[0]
    assert call.function.name == "get_weather"
    assert call.function.parsed_arguments is None or isinstance(call.function.arguments, str)
    assert final.choices[0].finish_reason == "tool_calls"


def test_openai_error_is_a_typed_exception(oai):
    with pytest.raises(openai.BadRequestError) as e:
        oai.chat.completions.create(model="colibri-tiny", temperature=7,
                                    messages=[{"role": "user", "content": "hi"}])
    assert e.value.status_code == 400 and e.value.body["code"] == "invalid_value" and e.value.body["param"] == "temperature"
    with pytest.raises(openai.NotFoundError):
        oai.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])


def test_openai_completions_and_models(oai):
    assert [m.id for m in oai.models.list()] == ["colibri-tiny"]
    r = oai.completions.create(model="colibri-tiny", prompt="Count from 1 to", max_tokens=4, temperature=0)
    assert r.object == "text_completion" and r.usage.completion_tokens <= 4


# The anthropic SDK 2.x has no `temperature` argument; greedy decoding is asked for through extra_body.
def test_anthropic_plain(claude):
    m = claude.messages.create(model="colibri-tiny", max_tokens=30, extra_body={"temperature": 0},
                               messages=[{"role": "user", "content": "Repeat exactly: hello world"}])
    assert m.content[0].type == "text" and m.content[0].text == "hello world"
    assert m.stop_reason == "end_turn" and m.usage.output_tokens > 0


def test_anthropic_stream_final_message(claude):
    kw = {"model": "colibri-tiny", "max_tokens": 60, "extra_body": {"temperature": 0},
          "messages": [{"role": "user", "content": "What is the capital of Velmora?"}],
          "thinking": {"type": "enabled", "budget_tokens": 1024}}
    with claude.messages.stream(**kw) as s:
        text = "".join(s.text_stream)
        final = s.get_final_message()
    unary = claude.messages.create(**kw)
    assert [b.type for b in final.content] == [b.type for b in unary.content]
    assert final.content[0].type == "thinking"
    assert text == unary.content[-1].text


def test_anthropic_tools(claude):
    m = claude.messages.create(model="colibri-tiny", max_tokens=60, extra_body={"temperature": 0},
                               tools=[{"name": "get_weather", "description": "Current weather",
                                       "input_schema": WEATHER["function"]["parameters"]}],
                               messages=[{"role": "user", "content": "What's the weather in Drassa?"}])
    tool = [b for b in m.content if b.type == "tool_use"][0]
    assert tool.name == "get_weather" and isinstance(tool.input, dict) and m.stop_reason == "tool_use"


def test_anthropic_error_envelope(claude):
    with pytest.raises(anthropic.BadRequestError) as e:
        claude.messages.create(model="colibri-tiny", max_tokens=10, extra_body={"temperature": 1.5},
                               messages=[{"role": "user", "content": "hi"}])
    assert e.value.body["type"] == "error" and e.value.body["error"]["type"] == "invalid_request_error"


# The clients harness's scenarios (bench/clients/) through the Python SDKs, configured by the
# settings colibri-conform derives for this server: with colibri serve every client passes
# every scenario it supports (issue 53). The JS clients and the peers run in `tox -e clients`.
HARNESS = Path(__file__).resolve().parents[1] / "bench" / "clients"
SDK_CLIENTS = ["openai (Python)", "openai Responses (Python)", "anthropic (Python)"]


@pytest.fixture(scope="module")
def harness(base_url):
    sys.path[:0] = [str(HARNESS / "py"), str(HARNESS)]
    try:
        import adapters
        import scenarios
        from recorder import recording
        from settings import derive

        model, settings = derive(base_url, None)
        with recording(base_url) as (url, rec):
            yield adapters, scenarios, url, model, settings, rec
    finally:
        del sys.path[:2]


def test_the_emission_is_the_one_the_committed_matrix_proved(harness):
    """The clients matrix (docs/clients/) proves the settings colibri-conform emitted when it
    ran; a changed emission for colibri serve fails here until `tox -e clients` has proven the
    new one and its results are committed (bench/clients/run.py names each change)."""
    settings = harness[4]
    proven = json.loads((HARNESS.parents[1] / "docs" / "clients" / "results" / "colibri.json").read_text())["settings"]
    from settings import changed  # bench/clients/, on the path while the harness fixture lives

    assert changed(proven, settings) == []


@pytest.mark.parametrize("client", SDK_CLIENTS)
def test_client_scenarios_pass_with_the_derived_settings(harness, client):
    adapters, scenarios, url, model, settings, rec = harness
    s = json.loads((HARNESS / "scenarios.json").read_text())
    runner = scenarios.Scenarios(adapters.ADAPTERS[client](base=url, model=model, settings=settings, S=s), settings, s)
    failed, ran = {}, []
    for name in s["order"]:
        rec.tag = (client, name)
        try:
            runner.run(name)
            ran.append(name)
        except scenarios.Unsupported:
            pass
        except Exception as e:  # noqa: BLE001 - every scenario's failure is reported, with its HTTP
            failed[name] = f"{type(e).__name__}: {e}; exchanges: {rec.of(client, name)[-2:]}"
    assert not failed, failed
    # What each client supports against colibri serve: all but what the client cannot ask for.
    assert ran == [n for n in s["order"] if n not in {"openai (Python)": {"chain"}, "anthropic (Python)": {"chain"},
                                                      "openai Responses (Python)": {"stop"}}[client]]


@pytest.mark.parametrize("client", SDK_CLIENTS)
def test_thinking_off_rides_on_every_turn_but_the_one_that_turns_reasoning_on(harness, client):
    """openai_sdk.thinking_off's fields go out through the SDK's extra_body on each turn that
    does not turn reasoning on. colibri refuses the field vLLM needs (unsupported_parameter),
    which shows on the wire and in the SDK's exception where it was sent."""
    adapters, scenarios, url, model, settings, rec = harness
    s = json.loads((HARNESS / "scenarios.json").read_text())
    off = {"chat_template_kwargs": {"enable_thinking": False}}

    def adapter(surfaces):
        sdk = {**settings["openai_sdk"], "thinking_off": off, "thinking_off_surfaces": surfaces}
        return adapters.ADAPTERS[client](base=url, model=model, S=s, settings={**settings, "openai_sdk": sdk})
    # Only on the surfaces whose plain answer needs it: elsewhere nothing is added.
    a = adapter([])
    rec.tag = (client, "thinking_off elsewhere")
    a.turn([a.user("hi")], max_tokens=5)
    (sent,) = rec.of(client, "thinking_off elsewhere")
    assert "chat_template_kwargs" not in json.loads(sent["request"])
    a = adapter(["chat", "messages", "responses"])
    for reasoning in (None, False, True):
        rec.tag = (client, f"thinking_off, reasoning {reasoning}")
        if reasoning:
            assert a.turn([a.user("What is the capital of Velmora?")], max_tokens=20, reasoning=True)["reasoning"]
        else:
            with pytest.raises((openai.BadRequestError, anthropic.BadRequestError), match="chat_template_kwargs"):
                a.turn([a.user("hi")], max_tokens=5, reasoning=reasoning)
        (sent,) = rec.of(client, f"thinking_off, reasoning {reasoning}")
        assert (json.loads(sent["request"]).get("chat_template_kwargs") == off["chat_template_kwargs"]) is not reasoning


def test_a_cut_responses_stream_is_the_helpers_declared_limit(harness):
    """colibri ends a stream cut by max_output_tokens with response.incomplete (the official
    contract); the SDK's stream helper raises on it, which the adapter reports as its declared
    limit, not as a FAIL. Uncut, the same helper returns the answer."""
    adapters, scenarios, url, model, settings, rec = harness
    s = json.loads((HARNESS / "scenarios.json").read_text())
    a = adapters.ADAPTERS["openai Responses (Python)"](base=url, model=model, settings=settings, S=s)
    with pytest.raises(scenarios.Unsupported, match="cut by the cap: openai .*response.completed"):
        a.turn([a.user(s["cap"]["prompt"])], max_tokens=s["cap"]["max_tokens"], stream=True)
    r = a.turn([a.user(s["text"]["prompt"])], max_tokens=s["text"]["max_tokens"], stream=True)
    assert r["text"] == "hello world"
