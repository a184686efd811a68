"""/v1/systemone (spec/85-systemone.yaml) beyond its vectors: the prompt layout (the one
transformers serve uses, so the same weights give the same probabilities: see
bench/peers/systemone_agreement.py), the label choice per model, and the named refusal of a
question the model cannot label."""
from __future__ import annotations

import threading
import time
import urllib.request

import numpy as np
import pytest
from falcon import testing

from colibri.model import Model
from colibri.server.app import create_app
from colibri.server.labels import Labels
from colibri.server.service import Service, Settings
from colibri.server.systemone import Question, answer, prompt_text

HOST = {"Host": "localhost"}


@pytest.fixture(scope="module")
def client():
    svc = Service(Settings(kv_slots=2))
    return svc, testing.TestClient(create_app(svc))


def test_prompt_layout_per_type_transformers():
    """transformers serve's DECISION_PROMPT: instructions, options, closing line."""
    choice = Question("c", "choice", "What is it about?", ["billing", "damage"], [None, "Broken goods"], [])
    assert prompt_text("The box arrived crushed.", choice, ["A", "B"], "transformers") == (
        "The box arrived crushed.\n\nWhat is it about?\nA. billing\nB. damage: Broken goods\n"
        "Answer with the letter of the option that fits best (A to B) only.")
    score = Question("s", "score", None, ["0", "1"], [{"level": "low"}, "high"], [{"level": "low"}, "high"])
    assert prompt_text({"a": 1}, score, ["A", "B"], "transformers") == (
        '{"a": 1}\n\nA. {"level": "low"}\nB. high\nAnswer with the letter of the level that fits best (A to B) only.')
    noul = Question("n", "noul", "Is it paid?", ["true", "false"], ["paid in full", None], [])
    assert prompt_text("x", noul, ["Yes", "No"], "transformers") == (
        "x\n\nIs it paid?\nYes: paid in full\nAnswer Yes or No only.")
    bare = Question("n", "noul", None, ["true", "false"], [None, None], [])
    assert prompt_text("x", bare, ["Yes", "No"], "transformers") == "x\n\n\nAnswer Yes or No only."


def test_prompt_layout_per_type_shared_first():
    """The default: closing line and options (what questions of one type and options share)
    before the question's own instructions."""
    choice = Question("c", "choice", "What is it about?", ["billing", "damage"], [None, "Broken goods"], [])
    assert prompt_text("The box arrived crushed.", choice, ["A", "B"]) == (
        "The box arrived crushed.\n\nAnswer with the letter of the option that fits best (A to B) only.\n"
        "A. billing\nB. damage: Broken goods\nQuestion: What is it about?")
    score = Question("s", "score", None, ["0", "1"], [{"level": "low"}, "high"], [{"level": "low"}, "high"])
    assert prompt_text({"a": 1}, score, ["A", "B"]) == (
        '{"a": 1}\n\nAnswer with the letter of the level that fits best (A to B) only.\nA. {"level": "low"}\nB. high')
    noul = Question("n", "noul", {"ask": "paid?"}, ["true", "false"], ["paid in full", None], [])
    assert prompt_text("x", noul, ["Yes", "No"]) == (
        'x\n\nAnswer Yes or No only.\nYes: paid in full\nQuestion: {"ask": "paid?"}')


def test_answer_formulas_and_ties():
    q = Question("c", "choice", None, ["a", "b", "c"], [None] * 3, [])
    a = answer(q, np.array([0.4, 0.4, 0.2]))
    assert a["choice"] == "a" and a["confidence"] == pytest.approx((0.4 - 1 / 3) / (1 - 1 / 3))
    assert a["entropy_normalized"] == pytest.approx(a["entropy"] / np.log(3))
    s = Question("s", "score", None, ["0", "1", "2"], ["l", "m", "h"], ["l", "m", "h"])
    a = answer(s, np.array([0.1, 0.2, 0.7]))
    assert a["score"] == pytest.approx(1.6) and a["legend"] == {"0": "l", "1": "m", "2": "h"}
    spread = (1 + 0 + 1) / 3
    assert a["confidence"] == pytest.approx(1 - (0.1 * 2 + 0.2 * 1) / spread)
    assert answer(s, np.array([0.2, 0.3, 0.5]))["confidence"] == 0.0  # clipped at 0


def test_s1_labels_single_token_noul_falls_back_when_yes_is_not_one_token():
    """The embedded model's vocabulary splits "Yes": the noul pair falls back in order."""
    model = Model()
    labels = Labels(model)
    assert len(model.encode("Yes")) > 1
    assert labels.noul is not None and labels.noul[0] != ["Yes", "No"]
    assert all(len(model.encode(t)) == 1 for t in labels.noul[0])
    assert labels.report()["choice"]["max_options"] == 26


def test_s1_labels_single_token_question_the_model_cannot_label_is_refused_by_name(client):
    svc, c = client
    saved = svc.systemone_labels.noul
    svc.systemone_labels.noul = None
    try:
        r = c.simulate_post("/v1/systemone", headers=HOST, json={
            "model": "colibri-tiny", "state": "x", "questions": {"n": {"type": "noul"}}})
    finally:
        svc.systemone_labels.noul = saved
    assert r.status_code == 400
    assert r.json["error"]["code"] == "labels_unavailable" and r.json["error"]["param"] == "questions.n.type"
    assert r.json["error"]["type"] == "invalid_request_error"


def test_s1_prefix_reused_across_requests_about_the_same_state(client):
    _, c = client
    body = {"model": "colibri-tiny", "state": "A long state about printers. " * 20,
            "questions": {"q": {"type": "choice", "criteria": {"yes": None, "no": None}}}}
    first = c.simulate_post("/v1/systemone", headers=HOST, json=body).json
    again = c.simulate_post("/v1/systemone", headers=HOST, json=body).json
    assert again["usage"]["input_tokens_details"]["cached_tokens"] >= first["usage"]["input_tokens"] - 1
    assert again["answers"] == first["answers"]  # reuse changes nothing in the numbers


def test_s1_questions_scored_together_equal_each_asked_alone(client):
    """Several questions go through the engine as branches of the shared state in one pass;
    each answer must be what that question gets asked on its own, and the state counts as
    read once per question beyond the first."""
    _, c = client
    state = "The parcel came two weeks late and the box was crushed; the refund was quick. " * 6
    questions = {
        "topic": {"type": "choice", "instructions": "What is it about?",
                  "criteria": {"delivery": "late or damaged parcels", "billing": None, "praise": None}},
        "anger": {"type": "score", "criteria": ["calm", "annoyed", "furious"]},
        "refund": {"type": "noul", "instructions": "Was money returned?"},
        "late": {"type": "noul", "instructions": "Was it late?", "criteria": {"true": "after the promised day"}},
    }
    together = c.simulate_post("/v1/systemone", headers=HOST, json={
        "model": "colibri-tiny", "state": state, "questions": questions}).json
    assert set(together["answers"]) == set(questions), together
    for name, q in questions.items():
        c.simulate_post("/v1/systemone", headers=HOST, json={"model": "colibri-tiny", "state": "x",
                                                             "questions": {name: q}})  # another state in between
        alone = c.simulate_post("/v1/systemone", headers=HOST, json={
            "model": "colibri-tiny", "state": state, "questions": {name: q}}).json["answers"][name]
        got = together["answers"][name]
        for key in ("noul", "score", "confidence", "entropy"):
            if key in alone:
                assert got[key] == pytest.approx(alone[key], abs=1e-5), (name, key)
        for option, p in alone.get("probabilities", {}).items():
            assert got["probabilities"][option] == pytest.approx(p, abs=1e-5), (name, option)


def test_s1_prefix_reused_for_what_questions_of_one_type_share(client):
    """In the shared-first layout the closing line and option lines of questions with the
    same type and options come before their own instructions: the scheduler computes that
    block once, as it does the state, and each answer stays what the question gets alone."""
    from colibri.server.request import ChatInput
    from colibri.server.scoring import common_head
    from colibri.server.systemone import parse_questions, prompt_text

    svc, c = client
    assert svc.settings.systemone_prompt == "shared-first"  # the default
    state = "Ticket 4411: the invoice was charged twice and the support line never answered. " * 4
    criteria = {f"option {k}": f"the customer's problem is mostly about {k}, as the ticket describes it"
                for k in ("billing", "delivery", "damage", "support")}
    asked = ["What is the main problem?", "What should be fixed first?", "What would a manager read first?"]
    questions = {f"q{i}": {"type": "choice", "instructions": text, "criteria": criteria} for i, text in enumerate(asked)}
    questions["other"] = {"type": "noul", "instructions": "Was it charged twice?"}
    body = {"model": "colibri-tiny", "state": state, "questions": questions}
    c.simulate_post("/v1/systemone", headers=HOST, json={**body, "state": "x"})  # the slot holds another state
    together = c.simulate_post("/v1/systemone", headers=HOST, json=body).json

    labels = {"choice": ["A", "B", "C", "D"], "noul": svc.systemone_labels.noul[0]}
    prompts = [svc.render(ChatInput(messages=[{"role": "user", "content": prompt_text(state, q, labels[q.type])}]))[1]
               for q in parse_questions(body)]
    everyone, choices = common_head(prompts), common_head(prompts[:3])
    assert choices - everyone >= 16  # the closing line and four described options
    computed = sum(map(len, prompts)) - together["usage"]["input_tokens_details"]["cached_tokens"]
    # the state once (less what the slot kept: the template's opening), the shared block once, then only tails
    assert computed <= everyone + (choices - everyone) + sum(len(p) - choices for p in prompts[:3]) + len(
        prompts[3]) - everyone
    assert computed < everyone + sum(len(p) - everyone for p in prompts)  # less than sharing the state alone

    for name, q in questions.items():
        alone = c.simulate_post("/v1/systemone", headers=HOST, json={**body, "questions": {name: q}}).json
        got, want = together["answers"][name], alone["answers"][name]
        for key in ("noul", "confidence", "entropy"):
            if key in want:
                assert got[key] == pytest.approx(want[key], abs=1e-5), (name, key)
        for option, p in want.get("probabilities", {}).items():
            assert got["probabilities"][option] == pytest.approx(p, abs=1e-5), (name, option)


def test_prompt_layout_setting_flag_env_and_health(client, monkeypatch):
    """`--systemone-prompt` (or COLI_SYSTEMONE_PROMPT) picks the layout; an unknown one from the
    environment is refused before start, as argparse refuses it on the command line; /health
    says which layout is served."""
    from colibri.serve import build_parser, check_args, settings_from

    assert settings_from(build_parser().parse_args([])).systemone_prompt == "shared-first"
    args = build_parser().parse_args(["--systemone-prompt", "transformers"])
    assert check_args(args) is None and settings_from(args).systemone_prompt == "transformers"
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--systemone-prompt", "vllm"])
    monkeypatch.setenv("COLI_SYSTEMONE_PROMPT", "vllm")
    assert check_args(build_parser().parse_args([])) == (
        "--systemone-prompt must be one of shared-first, transformers, not 'vllm'")
    with pytest.raises(ValueError, match="unknown System One prompt layout 'vllm'"):
        Service(Settings(systemone_prompt="vllm"), model=client[0].model)
    assert client[1].simulate_get("/health", headers=HOST).json["systemone"]["prompt"] == "shared-first"


def test_transformers_layout_is_what_the_server_reads_when_set(client):
    """With `--systemone-prompt transformers` the server reads transformers serve's prompts:
    the usage counts exactly their tokens (bench/peers/systemone_agreement.py compares the
    probabilities with transformers serve itself)."""
    from colibri.server.request import ChatInput
    from colibri.server.systemone import parse_questions, prompt_text

    svc = Service(Settings(kv_slots=1, systemone_prompt="transformers"), model=client[0].model)
    c = testing.TestClient(create_app(svc))
    body = {"model": "colibri-tiny", "state": "The lamp flickers when the fan runs.",
            "questions": {"cause": {"type": "choice", "instructions": "What is the cause?",
                                    "criteria": {"wiring": None, "bulb": "an old bulb"}},
                          "safe": {"type": "noul", "instructions": "Is it safe?"}}}
    got = c.simulate_post("/v1/systemone", headers=HOST, json=body).json
    labels = {"choice": ["A", "B"], "noul": svc.systemone_labels.noul[0]}
    for layout, same in (("transformers", True), ("shared-first", False)):
        n = sum(len(svc.render(ChatInput(messages=[{"role": "user", "content": prompt_text(
            body["state"], q, labels[q.type], layout)}]))[1]) for q in parse_questions(body))
        assert (got["usage"]["input_tokens"] == n) is same, layout


def test_s1_prefix_reused_when_the_branches_fill_the_context_several_times():
    """More question tails than the context holds beside the state go through the engine in
    several passes, at the top of the tree and inside a shared block; every answer is still
    the one its question gets alone."""
    model = Model(n_ctx=256)
    svc = Service(Settings(kv_slots=1), model=model)
    engine, passes = svc.scheduler.engine, []

    class Counting:  # the engine, noting each branch pass's prefix length and branch count
        def __getattr__(self, name):
            return getattr(engine, name)

        def prefill_branches(self, slot, branches):
            passes.append((engine.slot_len(slot), len(branches)))
            return engine.prefill_branches(slot, branches)

    svc.scheduler.engine = Counting()
    c = testing.TestClient(create_app(svc))
    state = "The order came late and the lid was cracked. " * 5
    criteria = {f"reason {k}": f"the order went wrong because of {k} at our end" for k in ("packing", "courier", "stock")}
    questions = {f"c{i}": {"type": "choice", "instructions": f"Which reason fits remark {i}?", "criteria": criteria}
                 for i in range(8)}
    questions |= {f"n{i}": {"type": "noul", "instructions": f"Is remark {i} about the lid?"} for i in range(12)}
    body = {"model": "colibri-tiny", "state": state, "questions": questions}
    together = c.simulate_post("/v1/systemone", headers=HOST, json=body)
    assert together.status_code == 200, together.text
    assert together.json["usage"]["input_tokens"] > 2 * 256  # the prompts together far exceed one context
    heads = sorted({head for head, _ in passes})
    assert len(heads) == 2  # the state (noul tails) and the state with the choices' shared block
    assert all(sum(n for h, n in passes if h == head) > max(n for h, n in passes if h == head) for head in heads)
    assert sum(n for _, n in passes) == len(questions)
    for name, q in questions.items():
        alone = c.simulate_post("/v1/systemone", headers=HOST, json={**body, "questions": {name: q}}).json
        got, want = together.json["answers"][name], alone["answers"][name]
        key = "noul" if q["type"] == "noul" else "confidence"
        assert got[key] == pytest.approx(want[key], abs=1e-5), name
        for option, p in want.get("probabilities", {}).items():
            assert got["probabilities"][option] == pytest.approx(p, abs=1e-5), (name, option)


def _many_questions(n: int = 24, words: int = 8) -> dict:
    """A request whose question tails fill many scoring passes: each question's own words differ."""
    questions = {f"q{i}": {"type": "noul", "instructions": " ".join(f"clause {i} {k}" for k in range(words)) + "?"}
                 for i in range(n)}
    return {"model": "colibri-tiny", "state": "The parcel came late and the lid was cracked.", "questions": questions}


class _Recording:
    """The engine, noting each call (kind, time) and slowing each scoring pass a little."""

    def __init__(self, engine, pass_delay: float = 0.0):
        self.engine, self.pass_delay, self.calls = engine, pass_delay, []

    def __getattr__(self, name):
        return getattr(self.engine, name)

    def prefill_branches(self, slot, branches):
        time.sleep(self.pass_delay)
        self.calls.append(("score", time.monotonic()))
        return self.engine.prefill_branches(slot, branches)

    def decode(self, slots, tokens):
        self.calls.append(("decode", time.monotonic()))
        return self.engine.decode(slots, tokens)


def test_s1_scoring_interleaved_cancellable_a_chat_is_answered_while_questions_are_scored():
    svc = Service(Settings(kv_slots=2, n_threads=1))  # one thread: quick on a busy machine too
    rec = _Recording(svc.scheduler.engine, pass_delay=0.08)
    svc.scheduler.engine = rec
    svc.scheduler.scorer.SCORE_PASS_TOKENS = 64  # many short passes: about one per question
    c = testing.TestClient(create_app(svc))
    done: dict[str, float] = {}

    def score():
        r = c.simulate_post("/v1/systemone", headers=HOST, json=_many_questions())
        assert r.status_code == 200, r.text
        done["score"] = time.monotonic()

    worker = threading.Thread(target=score)
    worker.start()
    try:
        deadline = time.monotonic() + 30
        while not any(k == "score" for k, _ in rec.calls) and time.monotonic() < deadline:
            time.sleep(0.005)
        r = c.simulate_post("/v1/chat/completions", headers=HOST, json={
            "model": "colibri-tiny", "max_tokens": 12, "temperature": 0,
            "messages": [{"role": "user", "content": "Count from 1 to 60."}]})
        assert r.status_code == 200, r.text
        assert r.json["usage"]["completion_tokens"] == 12
        done["chat"] = time.monotonic()
    finally:
        worker.join()
        svc.scheduler.close()
    passes = [t for k, t in rec.calls if k == "score"]
    assert len(passes) > 10
    # The chat got its answer while the questions were still being scored, not after them.
    assert done["chat"] < done["score"]
    assert sum(t > done["chat"] for t in passes) >= 3
    decodes = [t for k, t in rec.calls if k == "decode"]
    assert decodes and passes[0] < decodes[0] < passes[-1]
    # Decode steps get as much engine time as the passes: a pass takes 80 ms here and a step of
    # the tiny model a few, so the chat's 12 tokens come with hardly a pass between them (one
    # pass per step would put 11 there).
    assert sum(decodes[0] < t < decodes[-1] for t in passes) <= 2


def test_s1_scoring_interleaved_cancellable_a_cancelled_request_stops_between_passes():
    from colibri.server.systemone import parse_questions, scoring_prompts
    from colibri.server.task import Task

    svc = Service(Settings(kv_slots=1, n_threads=1))
    rec = _Recording(svc.scheduler.engine, pass_delay=0.02)
    svc.scheduler.engine = rec
    svc.scheduler.scorer.SCORE_PASS_TOKENS = 64
    try:
        body = _many_questions()
        task = Task(prompt=[1], max_new=0, end_tokens=frozenset(),
                    scoring=scoring_prompts(svc, body["state"], parse_questions(body)))
        svc.scheduler.admit(task)
        deadline = time.monotonic() + 30
        while sum(k == "score" for k, _ in rec.calls) < 2 and time.monotonic() < deadline:
            time.sleep(0.005)
        task.cancel()
        at_cancel = sum(k == "score" for k, _ in rec.calls)
        while svc.scheduler.snapshot()["active"] and time.monotonic() < deadline:
            time.sleep(0.005)
        snap = svc.scheduler.snapshot()
        assert snap["active"] == 0 and snap["cancelled"] == 1 and snap["completed"] == 0
        assert sum(k == "score" for k, _ in rec.calls) <= at_cancel + 1  # the pass under way, no more
        assert task.events.empty()  # nothing scored is reported to a client that left
    finally:
        svc.scheduler.close()


def test_s1_scoring_interleaved_cancellable_a_client_that_hangs_up_cancels_its_scoring():
    import json
    import socket

    from live_server import live_server

    body = json.dumps(_many_questions(64, 12)).encode()
    # A 256-token context makes passes of at most ~200 tokens: some twenty of them, 0.1 s apart.
    with live_server("--kv-slots", "1", "--ctx", "256", "--debug-step-delay", "0.1",
                     "--engine-threads", "1") as base:
        host, port = base.split("//")[1].split(":")
        s = socket.create_connection((host, int(port)))
        s.sendall(b"POST /v1/systemone HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                  + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        time.sleep(0.5)
        s.close()
        deadline = time.monotonic() + 10
        while True:
            with urllib.request.urlopen(base + "/health") as r:
                sched = json.loads(r.read())["scheduler"]
            if sched["active"] == 0 or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert (sched["active"], sched["cancelled"], sched["completed"]) == (0, 1, 0)
