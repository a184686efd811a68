"""colibri-conform differential (rules diff.greedy.exact, diff.greedy.rounded,
diff.logprobs.close, diff.template.agrees): the same model on two servers, compared token by
token through the reference's own log probabilities, and call by call on the tool prompts."""
from __future__ import annotations

import json

import pytest

from colibri.model import Model
from colibri.server.app import create_app
from colibri.server.service import Service, Settings
from conformance.differential import (
    BOUNDS,
    LOGPROB_BOUNDS,
    Reference,
    answer_text,
    compare,
    compare_calls,
    compare_reasoning,
    judge_logprobs,
    load_prompts,
    markdown,
    run,
    templates,
)
from conformance.exchange import Exchange
from conformance.targets import InProcessTarget

HOST = {"Host": "localhost"}


@pytest.fixture(scope="module")
def colibri():
    return InProcessTarget(create_app(Service(Settings(kv_slots=1), model=Model())), HOST)


class Canned:
    """A target that answers every prompt with the same text in the right shape."""

    def __init__(self, text: str):
        self.text = text

    def send(self, method, path, body=None, headers=None):
        if path.endswith("/messages"):
            doc = {"content": [{"type": "text", "text": self.text}]}
        elif path.endswith("/completions") and "chat" not in path:
            doc = {"choices": [{"text": self.text}]}
        else:
            doc = {"choices": [{"message": {"role": "assistant", "content": self.text}}]}
        return Exchange(method, path, headers or {}, body, 200, {"content-type": "application/json"},
                        json.dumps(doc).encode(), 0.0)


REF = Reference("The capital is Paris.", ["The", " capital", " is", " Paris", "."], [-0.1, -0.2, -0.05, -0.3, -0.01],
                [[("The", -0.1), ("L", -0.15)], [(" capital", -0.2), (" city", -2.5)], [(" is", -0.05)],
                 [(" Paris", -0.3), (" Lyon", -4.0)], [(".", -0.01)]])


def test_diff_greedy_exact_identical_text_passes():
    assert compare(REF, "The capital is Paris.", BOUNDS["exact"])["outcome"] == "PASS"


def test_diff_greedy_rounded_divergence_at_a_near_tie_passes_with_its_margin():
    got = compare(REF, "L'Étoile, la Marseillaise", BOUNDS["rounded"])
    assert got["outcome"] == "PASS" and got["token_index"] == 0 and got["target_token"] == "L"
    assert got["margin"] == pytest.approx(0.05)
    assert compare(REF, "L'Étoile, la Marseillaise", BOUNDS["exact"])["outcome"] == "FAIL"  # 0.05 > 0.01


def test_diff_greedy_rounded_confident_divergence_fails_with_both_texts():
    got = compare(REF, "The capital is Lyon, of course.", BOUNDS["rounded"])
    assert got["outcome"] == "FAIL" and got["token_index"] == 3 and got["char_index"] == len("The capital is")
    assert got["reference_continues"].startswith(" Paris") and got["target_continues"].startswith(" Lyon")
    assert got["margin"] == pytest.approx(3.7)


def test_diff_greedy_exact_continuation_outside_the_top_tokens_fails():
    got = compare(REF, "The capital is Berlin.", BOUNDS["rounded"])
    assert got["outcome"] == "FAIL" and "none of the reference's top" in got["why"]


def test_diff_greedy_exact_a_server_against_itself_passes_every_prompt(colibri):
    report = run(colibri, "colibri-tiny", [("self", colibri, "colibri-tiny")], "exact")
    t = report["targets"]["self"]
    assert t["verdict"] == "PASS" and t["counts"] == {"PASS": len(load_prompts()["prompts"])}
    assert report["prompt_set_version"] == 3 and report["rule"] == "diff.greedy.exact"
    # the embedded model's template renders tools, so the tool prompts ran and agree call for call
    calls = [r for r in t["prompts"] if r["prompt"] == "tool-call"]
    assert calls and calls[0]["why"].startswith("the same call: get_weather(")
    # and every prompt served log probabilities equal to its own: the logprob rule passes
    assert t["logprobs"] == "PASS" and report["logprob_rule"] == "diff.logprobs.close"


def test_diff_greedy_rounded_a_server_writing_something_else_fails_with_evidence(colibri):
    report = run(colibri, "colibri-tiny", [("broken", Canned("zzzz qqqq"), "m")], "rounded")
    t = report["targets"]["broken"]
    assert t["verdict"] == "FAIL" and t["counts"].get("FAIL", 0) >= 1
    failed = next(r for r in t["prompts"] if r["outcome"] == "FAIL")
    assert failed["target_continues"].startswith("zzzz") and failed["reference"]
    assert "broken: FAIL" in markdown(report)


def test_answer_text_per_endpoint():
    assert answer_text("messages", {"content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}) == "ab"
    assert answer_text("completions", {"choices": [{"text": "x"}]}) == "x"
    assert answer_text("chat", {"choices": [{"message": {"content": None}}]}) == ""


def test_the_matrix_shows_the_numerics_column_for_every_server():
    from conformance.compat import Run, headline

    runs = [Run("llama-server", {"rules": [], "model": "smollm2"}, {"version": "b1"}),
            Run("mockllm", {"rules": [], "model": "gpt"}, {"version": "0.0.8"})]
    numerics = {"llama-server": {"tolerance": "rounded", "verdict": "PASS", "counts": {"PASS": 8}, "logprobs": "PASS"}}
    table = headline(runs, "docs/compat/", numerics)
    assert table[0].endswith("| numerics (differential) | under load |")
    assert "[PASS](docs/compat/differential/llama-server.md) (rounded; 8 PASS; logprobs PASS)" in table[2]
    assert table[3].endswith("| — (no shared model) | — |")
    from colibri.spec import load_spec
    from conformance.compat import matrix_html

    page = matrix_html(runs, load_spec(), numerics)  # the HTML matrix carries the same row
    assert "<td>numerics (differential)</td><td></td><td><a href='../differential/llama-server.md'>PASS</a>" in page
    assert "<td>— <small>(no shared model)</small></td></tr>" in page


def test_diff_template_agrees_a_server_against_itself(colibri):

    report = templates(colibri, "colibri-tiny", [("self", colibri, "colibri-tiny")])
    t = report["targets"]["self"]
    chats = [p for p in load_prompts()["prompts"] if p["endpoint"] != "completions"]
    assert t["verdict"] == "PASS" and t["counts"] == {"PASS": len(chats)}
    assert all(r["endpoint"] == "/v1/render" and r["compared"] == "text" for r in t["prompts"])


class Renders:
    """A target showing a rendering through llama-server's /apply-template."""

    def __init__(self, prompt_of):
        self.prompt_of = prompt_of

    def send(self, method, path, body=None, headers=None):
        if path != "/apply-template":
            return Exchange(method, path, headers or {}, body, 404, {}, b"{}", 0.0)
        msgs = json.loads(body)["messages"]
        return Exchange(method, path, headers or {}, body, 200, {"content-type": "application/json"},
                        json.dumps({"prompt": self.prompt_of(msgs)}).encode(), 0.0)


def test_diff_template_agrees_a_dropped_system_turn_fails_with_both_renderings(colibri):
    from conformance.differential import rendered

    def without_system(msgs):  # the reference's own text, its system turn cut out
        _, text, _ = rendered(colibri, "colibri-tiny", [m for m in msgs if m["role"] != "system"])
        return text

    report = templates(colibri, "colibri-tiny", [("renders", Renders(without_system), "m")])
    t = report["targets"]["renders"]
    assert t["verdict"] == "FAIL" and t["counts"].get("PASS", 0) >= 1  # prompts without a system turn agree
    bad = next(r for r in t["prompts"] if r["prompt"] == "system-prompt")
    assert bad["outcome"] == "FAIL" and bad["endpoint"] == "/apply-template" and "char_index" in bad
    assert bad["reference_around"] != bad["target_around"]
    silent = templates(colibri, "colibri-tiny", [("none", Canned("x"), "m")])["targets"]["none"]
    assert silent["verdict"] == "UNSUPPORTED"


def test_logprob_differences_along_the_shared_tokens_are_reported():
    from conformance.differential import logprob_differences

    doc = {"choices": [{"logprobs": {"content": [{"token": "The", "logprob": -0.11},
                                                 {"token": " capital", "logprob": -0.25},
                                                 {"token": " city", "logprob": -1.0}]}}]}
    d = logprob_differences(REF, "chat", doc)["logprob_diff"]
    assert d["tokens"] == 2 and d["mean_abs"] == pytest.approx(0.03) and d["max_abs"] == pytest.approx(0.05)
    assert logprob_differences(REF, "messages", {"content": []}) == {}


def test_diff_logprobs_close_judges_the_mean_along_the_shared_tokens():
    row = {"logprob_diff": {"tokens": 12, "mean_abs": 0.05, "max_abs": 0.3}}
    assert judge_logprobs(row, "rounded")["logprobs"]["outcome"] == "PASS"  # a 4-bit file's size of error
    assert judge_logprobs(row, "exact")["logprobs"]["outcome"] == "FAIL"  # far beyond float32 noise
    assert "0.0500 nats over 12 shared tokens > 0.001" in judge_logprobs(row, "exact")["logprobs"]["why"]
    far = {"logprob_diff": {"tokens": 12, "mean_abs": LOGPROB_BOUNDS["rounded"] + 0.01, "max_abs": 1.0}}
    assert judge_logprobs(far, "rounded")["logprobs"]["outcome"] == "FAIL"
    few = {"logprob_diff": {"tokens": 3, "mean_abs": 5.0, "max_abs": 5.0}}
    assert judge_logprobs(few, "rounded")["logprobs"]["outcome"] == "INCONCLUSIVE"
    assert judge_logprobs({}, "exact") == {}  # nothing served, nothing judged


class ShiftedLogprobs:
    """colibri answering as itself, with every chat log probability lowered by 0.3 nats (as
    log probabilities taken after a penalty or another temperature would be)."""

    def __init__(self, inner):
        self.inner = inner

    def send(self, method, path, body=None, headers=None):
        ex = self.inner.send(method, path, body, headers)
        if path == "/v1/chat/completions" and ex.status == 200:
            doc = ex.json()
            for e in ((doc["choices"][0].get("logprobs") or {}).get("content") or []):
                e["logprob"] -= 0.3
            ex = Exchange(method, path, headers or {}, body, 200, {"content-type": "application/json"},
                          json.dumps(doc).encode(), 0.0)
        return ex


def test_diff_logprobs_close_a_server_with_shifted_numbers_fails_while_its_text_passes(colibri):
    report = run(colibri, "colibri-tiny", [("shifted", ShiftedLogprobs(colibri), "colibri-tiny")], "rounded")
    t = report["targets"]["shifted"]
    assert t["verdict"] == "PASS" and t["logprobs"] == "FAIL"  # same text, other numbers
    bad = [r for r in t["prompts"] if r.get("logprobs", {}).get("outcome") == "FAIL"]
    assert bad and all(r["logprob_diff"]["mean_abs"] == pytest.approx(0.3, abs=1e-6) for r in bad)
    assert "Log probabilities (diff.logprobs.close" in markdown(report)


CALL = [{"name": "get_weather", "arguments": {"city": "Paris"}}]


def test_diff_greedy_exact_tool_prompts_compare_calls_not_json_spacing():
    ref = Reference("", calls=CALL)
    assert compare_calls(ref, "", [{"name": "get_weather", "arguments": {"city": "Paris"}}], "exact")["outcome"] == "PASS"
    other = compare_calls(ref, "", [{"name": "get_weather", "arguments": {"city": "Lyon"}}], "exact")
    assert other["outcome"] == "FAIL" and other["target_calls"][0]["arguments"] == {"city": "Lyon"}
    assert 'the reference called get_weather({"city": "Paris"})' in other["why"]
    # rounded: no log probabilities over a call, so no margin to weigh the difference by
    assert compare_calls(ref, "", other["target_calls"], "rounded")["outcome"] == "INCONCLUSIVE"
    # the call written as text: a missing tool-call parser, not arithmetic
    text = compare_calls(ref, '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>', [],
                         "exact")
    assert text["outcome"] == "INCONCLUSIVE" and "as text" in text["why"]


class ToolBlind:
    """colibri whose /v1/render ignores the tools it is offered (a template without tools)."""

    def __init__(self, inner):
        self.inner = inner

    def send(self, method, path, body=None, headers=None):
        if path == "/v1/render" and body:
            doc = json.loads(body)
            doc.pop("tools", None)
            body = json.dumps(doc).encode()
        return self.inner.send(method, path, body, headers)


def test_diff_greedy_rounded_tool_prompts_are_skipped_where_the_template_ignores_tools(colibri):
    blind = ToolBlind(colibri)
    tool_ids = {p["id"] for p in load_prompts()["prompts"] if p.get("tools")}
    for report in (run(blind, "colibri-tiny", [("t", colibri, "colibri-tiny")], "rounded"),
                   templates(blind, "colibri-tiny", [("t", colibri, "colibri-tiny")])):
        rows = {r["prompt"]: r for r in report["targets"]["t"]["prompts"]}
        assert {k for k, r in rows.items() if r["outcome"] == "SKIPPED"} == tool_ids
        assert "does not render tools" in rows["tool-call"]["why"]
    # a family without tools (SmolLM2's): the reference refuses them, so they are skipped too
    plain = InProcessTarget(create_app(Service(Settings(kv_slots=1, family="chatml-text"), model=Model())), HOST)
    rows = {r["prompt"]: r for r in run(plain, "colibri-tiny", [("t", plain, "colibri-tiny")], "exact")
            ["targets"]["t"]["prompts"]}
    thinking = {p["id"] for p in load_prompts()["prompts"] if p.get("reasoning")}
    assert {k for k, r in rows.items() if r["outcome"] == "SKIPPED"} == tool_ids | thinking
    assert "refuses tools" in rows["tool-call"]["why"] and "refuses reasoning" in rows["reasoning-on"]["why"]
    assert all(r["outcome"] == "PASS" for k, r in rows.items() if k not in tool_ids | thinking)


def test_diff_greedy_exact_reasoning_prompts_compare_the_split():
    ref = Reference("The capital of Sárkány is Tűzvár.", reasoning="Sárkány is a country. Its capital is Tűzvár.")
    same = compare_reasoning(ref, "\n\nThe capital of Sárkány is Tűzvár.", "Sárkány is a country. Its capital is Tűzvár.\n",
                             "exact")
    assert same["outcome"] == "PASS"  # the blank lines vLLM keeps after </think> are no difference
    # vLLM's glm45/qwen3 reasoning parsers with thinking off: the whole answer filed as reasoning
    off = Reference("marble.")
    moved = compare_reasoning(off, "", "marble.", "exact")
    assert moved["outcome"] == "FAIL" and "split otherwise" in moved["why"]
    assert moved["target_split"] == {"reasoning": "marble.", "content": ""}
    other = compare_reasoning(ref, "The capital is Castelune.", "", "rounded")
    assert other["outcome"] == "INCONCLUSIVE" and other["reference_split"]["reasoning"].startswith("Sárkány")


class FilesAnswerAsReasoning:
    """colibri behind a parser that files every chat reply under `reasoning` (what vLLM's qwen3
    reasoning parser did to the embedded model's replies with thinking off)."""

    def __init__(self, inner):
        self.inner = inner

    def send(self, method, path, body=None, headers=None):
        ex = self.inner.send(method, path, body, headers)
        if path != "/v1/chat/completions" or ex.status != 200:
            return ex
        doc = json.loads(ex.body)
        msg = doc["choices"][0]["message"]
        if not msg.get("tool_calls"):
            msg["reasoning"] = (msg.pop("reasoning_content", None) or "") + (msg.get("content") or "")
            msg["content"] = None
        return Exchange(method, path, headers or {}, body, 200, {"content-type": "application/json"},
                        json.dumps(doc).encode(), 0.0)


def test_diff_greedy_exact_a_parser_disagreement_shows_both_parses_and_the_raw_text(colibri):
    report = run(colibri, "colibri-tiny", [("t", FilesAnswerAsReasoning(colibri), "colibri-tiny")], "exact")
    rows = {r["prompt"]: r for r in report["targets"]["t"]["prompts"]}
    off = rows["reasoning-default-off"]
    assert off["outcome"] == "FAIL" and "split otherwise" in off["why"]
    assert off["target_parse"]["content"] == "" and off["target_parse"]["reasoning"] == off["reference_parse"]["content"]
    # the same weights wrote the same text on both sides: the difference is the parser's
    assert off["reference_raw"] == off["target_raw"] and off["same_raw_text"] is True
    assert rows["tool-call"]["outcome"] == "PASS"  # calls are untouched by that parser
    assert "target raw text" in markdown(report)
