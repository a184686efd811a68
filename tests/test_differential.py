"""colibri-conform differential (rules diff.greedy.exact, diff.greedy.rounded): the same model
on two servers, compared token by token through the reference's own log probabilities."""
from __future__ import annotations

import json

import pytest

from colibri.model import Model
from colibri.server.app import create_app
from colibri.server.service import Service, Settings
from conformance.differential import BOUNDS, Reference, answer_text, compare, load_prompts, markdown, run
from conformance.exchange import Exchange, InProcessTarget

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
    assert report["prompt_set_version"] == 1 and report["rule"] == "diff.greedy.exact"


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
    numerics = {"llama-server": {"tolerance": "rounded", "verdict": "PASS", "counts": {"PASS": 8}}}
    table = headline(runs, "docs/compat/", numerics)
    assert table[0].endswith("| numerics (differential) |")
    assert "[PASS](docs/compat/differential/llama-server.md) (rounded; 8 PASS)" in table[2]
    assert table[3].endswith("| — (no shared model) |")


def test_diff_template_agrees_a_server_against_itself(colibri):
    from conformance.differential import templates

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
    from conformance.differential import rendered, templates

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
