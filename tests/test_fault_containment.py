"""A fault in one request's engine work fails that request alone (rule ops.engine.supervised):
its batch-mates get exactly the tokens they get alone, its slot is freed, the fault is logged
with its request id. These tasks bypass validation on purpose: the sampler's own refusal of a
setting stands in for any engine fault a request could cause."""
from __future__ import annotations

import logging

from colibri.model import Model
from colibri.server.scheduler import Scheduler
from colibri.server.task import Accepted, Done, Failed, Task, TokenRecord

PROMPT = list(range(30, 50))


def collect(task: Task) -> tuple[list[int], str]:
    tokens = []
    while True:
        event = task.events.get(timeout=30)
        if isinstance(event, TokenRecord):
            tokens.append(event.token)
        elif isinstance(event, Failed):
            return tokens, "error"
        elif isinstance(event, Done):
            return tokens, event.reason


def test_a_task_the_sampler_refuses_fails_alone_and_its_batch_mate_is_unchanged(caplog):
    s = Scheduler(Model().engine(n_slots=2), n_slots=2, step_delay=0.002)
    try:
        alone = Task(prompt=PROMPT, max_new=24, end_tokens=frozenset(), temperature=0.0)
        s.admit(alone)
        want = collect(alone)

        good = Task(prompt=PROMPT, max_new=24, end_tokens=frozenset(), temperature=0.0)
        bad = Task(prompt=[7, 8, 9], max_new=24, end_tokens=frozenset(), temperature=1.0, top_p=0.0,
                   request_id="req_bad")  # top_p 0: the C sampler refuses it
        with caplog.at_level(logging.ERROR, logger="colibri.server"):
            s.admit(good)
            s.admit(bad)
            got_bad = collect(bad)
            got_good = collect(good)
        assert got_bad[1] == "error"
        assert got_good == want  # same tokens, same finish, as alone
        assert any("req_bad" in r.getMessage() for r in caplog.records)
        snap = s.snapshot()
        assert snap["active"] == 0 and snap["failed"] == 1 and snap["completed"] == 2
        assert s.thread.is_alive()
    finally:
        s.close()


def test_a_broken_engine_loop_fails_pending_work_with_engine_failed_and_refuses_new_work():
    s = Scheduler(Model().engine(n_slots=1), n_slots=1)

    def boom() -> None:
        raise RuntimeError("loop bug")

    s._step = boom  # type: ignore[method-assign]
    try:
        t = Task(prompt=PROMPT, max_new=4, end_tokens=frozenset(), temperature=0.0)
        s.admit(t)
        event = t.events.get(timeout=10)
        while isinstance(event, Accepted):
            event = t.events.get(timeout=10)
        assert isinstance(event, Failed) and getattr(event.error, "code", None) == "engine_failed"
        s.thread.join(timeout=10)
        assert not s.thread.is_alive() and s.failed == "RuntimeError: loop bug"
        try:
            s.admit(Task(prompt=PROMPT, max_new=4, end_tokens=frozenset()))
        except Exception as e:  # noqa: BLE001
            assert getattr(e, "code", None) == "engine_failed" and getattr(e, "status", None) == 503
        else:
            raise AssertionError("admitted after the engine thread stopped")
        assert s.snapshot()["active"] == 0
    finally:
        s.close()


def test_ops_health_accounting_a_client_gone_while_queued_is_abandoned_not_cancelled():
    """A request whose client leaves while it waits for the only slot was never admitted: it is
    counted abandoned, so admitted = completed + failed + cancelled still holds once idle (the
    soak with bench/attack.py's abandoned scoring requests found it counted cancelled)."""
    import pytest

    from colibri.server.task import ClientGone

    s = Scheduler(Model().engine(n_slots=1), n_slots=1, step_delay=0.01)
    try:
        holder = Task(prompt=PROMPT, max_new=40, end_tokens=frozenset(), temperature=0.0)
        s.admit(holder)
        gone = Task(prompt=PROMPT, max_new=4, end_tokens=frozenset(), temperature=0.0, client_gone=lambda: True)
        with pytest.raises(ClientGone):
            s.admit(gone)
        collect(holder)
        snap = s.snapshot()
        assert (snap["abandoned"], snap["cancelled"]) == (1, 0)
        assert snap["active"] == 0 and snap["admitted"] == snap["completed"] + snap["failed"] + snap["cancelled"] == 1
    finally:
        s.close()


def test_ops_health_accounting_the_slot_is_free_when_the_answer_ends():
    """A client that has its whole answer and reads /health sees its request settled: the slot is
    freed before the last event, not after (found as an in-process conformance failure of
    ops.health.accounting[idle] under load: active 1, admitted = completed + 1). A slow release
    hook widens the window the old order left open."""
    import time

    def slow_release(slot: int) -> None:
        time.sleep(0.3)

    s = Scheduler(Model().engine(n_slots=1), n_slots=1, on_release=slow_release)
    try:
        for outcome_task in (Task(prompt=PROMPT, max_new=4, end_tokens=frozenset(), temperature=0.0),
                             Task(prompt=[7, 8, 9], max_new=4, end_tokens=frozenset(), temperature=1.0,
                                  top_p=0.0)):  # completed, then failed (the sampler refuses top_p 0)
            s.admit(outcome_task)
            collect(outcome_task)
            snap = s.snapshot()
            assert snap["active"] == 0
            assert snap["admitted"] == snap["completed"] + snap["failed"] + snap["cancelled"]
        assert (snap["completed"], snap["failed"]) == (1, 1)
    finally:
        s.close()
