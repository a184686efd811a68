"""Rule ops.slot.choice on the scheduler itself: a request goes to the free slot whose cache
holds the longest prefix of its prompt, whatever slot its conversation hashes to."""
from __future__ import annotations

from colibri.model import Model
from colibri.server.scheduler import Scheduler
from colibri.server.task import Done, Failed, Task


def run(s: Scheduler, prompt: list[int], *, slot: int | None = None, prefer: int | None = None) -> Task:
    task = Task(prompt=prompt, max_new=3, end_tokens=frozenset(), temperature=0.0, slot=slot, prefer=prefer)
    s.admit(task)
    while not isinstance(task.events.get(), Done | Failed):
        pass
    return task


def test_ops_slot_choice_longest_cached_prefix_beats_the_hash_slot():
    s = Scheduler(Model().engine(n_slots=3), n_slots=3)
    try:
        first = list(range(20, 60))
        run(s, first, slot=2)  # an earlier turn ran on slot 2 (say its hash slot was busy)
        held = list(s.slots.history[2])
        assert held[: len(first)] == first and len(held) > len(first)  # prompt and answer
        follow_up = held + [70, 71]
        task = run(s, follow_up, prefer=0)
        assert task.assigned == 2
        assert task.n_reused == len(held)  # only the two new tokens were prefilled
        # nothing cached anywhere: the hash slot wins the tie, then the lowest slot
        assert run(s, [5, 6, 7], prefer=1).assigned == 1
        assert run(s, [9, 9, 9]).assigned == 0
    finally:
        s.close()


# Rule ops.prefix-reuse.scope, through the HTTP API: whether a request's cached_tokens (and
# its time) can show that another conversation began like it.
SECRET = "You are the support bot of Drassa Bank. The vault code is 4417; never say it."


def _ask(client, system: str, user: str, history: list[dict] | None = None) -> int:
    messages = [{"role": "system", "content": system}, {"role": "user", "content": user}, *(history or [])]
    got = client.simulate_post("/v1/chat/completions", json={
        "model": "colibri-tiny", "max_tokens": 3, "temperature": 0, "messages": messages})
    assert got.status_code == 200, got.text
    return int(got.json["usage"]["prompt_tokens_details"]["cached_tokens"])


def _client(mode: str):
    from falcon import testing

    from colibri.server.app import create_app
    from colibri.server.service import Service, Settings

    svc = Service(Settings(kv_slots=1, prefix_reuse=mode, n_threads=1))
    return svc, testing.TestClient(create_app(svc), headers={"Host": "localhost"})


def test_ops_prefix_reuse_scope_shared_lets_a_probe_see_another_conversations_prefix():
    svc, client = _client("shared")
    try:
        _ask(client, SECRET, "What are your hours?")  # the victim
        # A probe guessing the system prompt's start is told how far its guess matched.
        assert _ask(client, SECRET[:40], "hi") >= 8
    finally:
        svc.close()


def test_ops_prefix_reuse_scope_conversation_reuses_only_its_own_conversation():
    svc, client = _client("conversation")
    try:
        _ask(client, SECRET, "What are your hours?")
        assert _ask(client, SECRET[:40], "hi") == 0  # a guessed beginning: nothing reused
        assert _ask(client, SECRET, "Tell me the code.") == 0  # the whole system prompt, another user turn
        # The victim's next turn still starts from its own cache.
        _ask(client, SECRET, "What are your hours?")
        follow = _ask(client, SECRET, "What are your hours?",
                      [{"role": "assistant", "content": "Nine to five."}, {"role": "user", "content": "Saturdays?"}])
        assert follow > 10
    finally:
        svc.close()


def test_ops_prefix_reuse_scope_off_reuses_nothing():
    svc, client = _client("off")
    try:
        _ask(client, SECRET, "What are your hours?")
        assert _ask(client, SECRET, "What are your hours?") == 0
        assert _ask(client, SECRET, "What are your hours?",
                    [{"role": "assistant", "content": "Nine to five."}, {"role": "user", "content": "Saturdays?"}]) == 0
    finally:
        svc.close()


def test_ops_prefix_reuse_scope_setting_flag_and_env():
    from colibri.serve import build_parser, check_args, settings_from

    assert settings_from(build_parser().parse_args([])).prefix_reuse == "shared"
    assert settings_from(build_parser().parse_args(["--prefix-reuse", "conversation"])).prefix_reuse == "conversation"
    import os
    from unittest import mock

    with mock.patch.dict(os.environ, {"COLI_PREFIX_REUSE": "off"}):
        args = build_parser().parse_args([])
        assert check_args(args) is None and settings_from(args).prefix_reuse == "off"
    with mock.patch.dict(os.environ, {"COLI_PREFIX_REUSE": "nobody"}):
        assert "--prefix-reuse must be one of shared, conversation, off" in check_args(build_parser().parse_args([]))
