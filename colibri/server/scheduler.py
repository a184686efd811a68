"""The one engine thread: prefill admitted tasks between decode steps, advance every decoding
task together in one batched step, and run System One scoring passes in between.

HTTP threads parse, render and tokenize, then hand a `Task` (server/task.py) to
`Scheduler.admit`, which blocks until the task holds a slot (server/slots.py: admission, the
queue's errors, the choice of a slot). This thread then prefills it and steps it with the
others; each task gets exactly the tokens it would get alone. Results flow back as typed
events on the task's queue. A consumer that no longer wants tokens (a stop matched, the
client left) sets a flag this thread reads before the next step. Scoring tasks
(/v1/systemone) are run by server/scoring.py, one engine call per pass; the series this
module and slots.py count are defined by spec/metrics.yaml (server/metrics.py).
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Any

import numpy as np

from .metrics import Metrics
from .profile import Ring
from .scoring import Scorer
from .slots import Slots
from .task import Accepted, Done, Failed, Task, TokenRecord

log = logging.getLogger("colibri.server")


class Scheduler:
    def __init__(self, engine: Any, *, n_slots: int, max_queue: int = 8, queue_timeout: float = 300.0,
                 metrics: Metrics | None = None, step_delay: float = 0.0, on_release: Any = None,
                 profile_turns: int = 256, prefix_reuse: str = "shared"):
        from ..engine_threads import load_engine_module

        _engine = load_engine_module()
        self._sample_rows, self._logprobs = _engine.sample_rows, _engine.logprobs
        self.engine = engine
        self.n_slots = n_slots
        self.metrics = metrics or Metrics()
        self.step_delay = step_delay  # test hook: slows every engine step
        self.on_release = on_release  # called on the engine thread with a slot whose work ended
        self.profiles = Ring(profile_turns)  # the last turns' phase times (rule ops.profile.ring)
        self.timing = profile_turns > 0  # off: the engine thread reads no clock for profiling
        self.slots = Slots(engine, n_slots=n_slots, max_queue=max_queue, queue_timeout=queue_timeout,
                           metrics=self.metrics, prefix_reuse=prefix_reuse, timing=self.timing)
        # Running totals over every step: a decoding task takes part in each step from its
        # prefill to its end, so its share is the difference between its first and last
        # reading; the cost per step does not grow with the batch.
        self.sample_total = self.decode_total = 0.0
        self.steps = self.batch_sum = 0
        self.decoding: list[Task] = []
        self.scorer = Scorer(release=self._release, fail=self._fail)
        self.thread = threading.Thread(target=self._run, name="colibri-engine", daemon=True)
        self.thread.start()

    # ------------------------------------------------------------------ for the HTTP threads

    def admit(self, task: Task) -> None:
        """Block until `task` holds a slot; raises the queue's named errors (see Slots.admit)."""
        self.slots.admit(task)

    def close(self) -> None:
        self.slots.close()

    def snapshot(self) -> dict[str, Any]:
        return self.slots.snapshot()

    @property
    def busy(self) -> set[int]:
        return self.slots.busy

    @property
    def failed(self) -> str | None:
        """Why the engine thread stopped, if it did."""
        return self.slots.failed

    # ------------------------------------------------------------------ the engine thread

    def _release(self, task: Task, outcome: str) -> None:
        """Free the task's slot, whatever else fails: a slot left busy would starve every later
        request for it."""
        if self.on_release is not None:
            try:
                self.on_release(task.assigned)
            except Exception:  # persistence must never fail a request
                log.exception("saving slot %d failed (%s)", task.assigned, task.request_id or "-")
        try:
            held = np.asarray(self.engine.slot_tokens(task.assigned), np.intc)
        except Exception:  # an unreadable slot is treated as empty: no prefix will be reused from it
            log.exception("reading slot %d failed (%s)", task.assigned, task.request_id or "-")
            held = np.zeros(0, np.intc)
        self._close_turn(task, outcome)
        self.slots.release(task, outcome, held)

    def _mark(self, task: Task) -> None:
        """The task joins the decoding batch: read the running totals."""
        if self.timing:
            task.turn.mark = (self.sample_total, self.decode_total, self.steps, self.batch_sum)

    def _close_turn(self, task: Task, outcome: str) -> None:
        """The engine's last word on the turn, written before the event that lets the HTTP
        thread record it: its share of the steps since it joined."""
        turn = task.turn
        turn.outcome = outcome
        turn.completion_tokens = task.generated
        if turn.mark is not None:
            sample, decode, steps, batch_sum = turn.mark
            turn.sample += self.sample_total - sample
            turn.decode += self.decode_total - decode
            turn.steps += self.steps - steps
            turn.batch_sum += self.batch_sum - batch_sum
            turn.mark = None

    def _finish(self, task: Task, reason: str) -> None:
        if task.cancelled:
            self._release(task, "cancelled")
        else:
            # The slot is freed before the answer's last event, so a client that reads /health
            # once it has its answer sees the request settled (rule ops.health.accounting).
            self._release(task, "completed")
            task.events.put(Done(reason))

    def _fail(self, task: Task, exc: BaseException) -> None:
        """Fail this task alone: its own error event, its slot freed, the fault logged."""
        log.error("engine fault for %s in slot %d: %s: %s", task.request_id or "a request", task.assigned,
                  type(exc).__name__, exc, exc_info=exc)
        self._release(task, "cancelled" if task.cancelled else "failed")
        task.events.put(Failed(exc))

    def _record(self, task: Task, logits: Any, token: int) -> TokenRecord:
        if task.top_k_logprobs < 0:
            return TokenRecord(token)
        t0 = time.perf_counter() if self.timing else 0.0
        lp, ids, lps = self._logprobs(logits, token, task.top_k_logprobs)
        if self.timing:
            task.turn.logprobs += time.perf_counter() - t0
        return TokenRecord(token, lp, list(zip(ids, lps, strict=True)))

    def _prefill(self, task: Task) -> None:
        task.engine_started = time.monotonic()
        t0 = time.perf_counter()
        if task.echo:
            task.n_reused, all_logits = self.engine.prefill(task.assigned, task.prompt, reuse=False, all_logits=True)
            echo = [TokenRecord(task.prompt[0])]
            for i in range(1, len(task.prompt)):
                echo.append(self._record(task, all_logits[i - 1], task.prompt[i]))
            task.logits = all_logits[-1]
        else:
            task.n_reused, task.logits = self.engine.prefill(task.assigned, task.prompt)
            echo = []
        task.turn.prefill += time.perf_counter() - t0
        task.turn.prompt_tokens, task.turn.cached_tokens = len(task.prompt), task.n_reused
        self._mark(task)
        task.events.put(Accepted(len(task.prompt), task.n_reused, task.queue_wait, echo))

    def _run(self) -> None:
        """The engine thread, supervised: should its loop itself break (a bug outside any one
        task's work), every admitted and waiting request fails with 503 engine_failed, /health
        says so, and the server refuses new work instead of letting it wait forever."""
        try:
            self._loop()
        except BaseException as exc:  # noqa: BLE001 - the supervisor's whole point
            log.critical("the engine thread stopped: %s: %s", type(exc).__name__, exc, exc_info=exc)
            working = list(self.decoding) + [t for t, _ in self.scorer.running]
            self.decoding.clear()
            self.scorer.running.clear()
            self.slots.stop_all(f"{type(exc).__name__}: {exc}", working)

    def _loop(self) -> None:
        scorer = self.scorer
        while True:
            batch = self.slots.admitted(working=bool(self.decoding or scorer.running))
            if batch is None:
                return
            for task in batch:
                self._start(task)
            # Scoring gets at most half the engine's time while others decode: after a round of
            # passes, decode steps run until they have taken as long (one pass per step would
            # give a chat one token per pass, and it would wait about as long as the scoring).
            if scorer.running and (not self.decoding or scorer.owed <= 0):
                t0 = time.perf_counter()
                scorer.passes()
                scorer.owed += time.perf_counter() - t0
            if self.step_delay:
                time.sleep(self.step_delay)
            t0 = time.perf_counter()
            self._step()
            scorer.owed = scorer.owed - (time.perf_counter() - t0) if self.decoding else 0.0

    def _start(self, task: Task) -> None:
        """An admitted task begins: a generation is prefilled and joins the decoding batch, a
        scoring task joins the scorer's; a cancelled one only frees its slot."""
        try:
            if task.cancelled:
                self._release(task, "cancelled")
                return
            if not self.slots.may_reuse(task, task.assigned):  # another conversation's cache: forget it
                self.engine.slot_truncate(task.assigned, 0)
            if task.scoring is not None:
                self.scorer.add(task, self.engine)
                return
            self._prefill(task)
            self.decoding.append(task)
        except Exception as exc:  # engine faults fail this request only
            self._fail(task, exc)

    def _step(self) -> None:
        """Sample a token for every decoding task (one call for the batch), then advance the ones
        that go on together."""
        live: list[Task] = []
        for task in list(self.decoding):
            if task.cancelled or task.stop_requested:
                self.decoding.remove(task)
                self._finish(task, "stop")
            else:
                live.append(task)
        if not live:
            return
        go: list[Task] = []
        timing = self.timing
        t0 = time.perf_counter() if timing else 0.0
        sampled = self._sample(live)
        if timing:
            self.sample_total += time.perf_counter() - t0
        for task, token, state in sampled:
            if token is None:  # this task's own sampling failed; it has been failed alone
                continue
            task.rng = state
            if task.decoder is not None:
                try:
                    task.decoder.feed(token)
                except Exception as exc:  # a decoder fault fails its own request only
                    self.decoding.remove(task)
                    self._fail(task, exc)
                    continue
            if token in task.end_tokens:
                self.decoding.remove(task)
                self._finish(task, "stop")
                continue
            task.events.put(self._record(task, task.logits, token))
            task.generated += 1
            if not task.first_output:
                task.first_output = True
                self.metrics["first_output_seconds"].observe(time.monotonic() - task.engine_started)
            if task.generated >= task.max_new:
                self.decoding.remove(task)
                self._finish(task, "length")
                continue
            task.next_token = token
            go.append(task)
        if go:
            t0 = time.perf_counter() if timing else 0.0
            self._decode(go)
            if timing:
                self.decode_total += time.perf_counter() - t0
                self.steps += 1
                self.batch_sum += len(go)

    def _rows(self, live: list[Task]) -> list[tuple[Task, Any]]:
        """Each task's logits to sample from. A task inside a tool-name or argument-key slot
        samples only the tokens its decoder allows (rule tools.decode.offered-names); its
        logprobs still read the model's own logits. A decoder that raises fails its task alone."""
        out: list[tuple[Task, Any]] = []
        for task in live:
            row = task.logits
            if task.decoder is not None:
                try:
                    ids = task.decoder.allowed()
                except Exception as exc:
                    self.decoding.remove(task)
                    self._fail(task, exc)
                    continue
                if ids:
                    row = np.full_like(task.logits, -np.inf)
                    row[ids] = task.logits[ids]
            out.append((task, row))
        return out

    def _sample(self, live: list[Task]) -> list[tuple[Task, int | None, int]]:
        """One C call samples the batch; should it raise, each row is sampled alone so that only
        the task whose own settings the sampler refuses fails."""
        rows = self._rows(live)
        if not rows:
            return []
        tasks = [t for t, _ in rows]
        rng = np.array([t.rng for t in tasks], np.uint64)
        try:
            tokens = self._sample_rows(np.stack([r for _, r in rows]),
                                       np.array([t.temperature for t in tasks], np.float32),
                                       np.array([t.top_p for t in tasks], np.float32), rng).tolist()
            return list(zip(tasks, tokens, rng.tolist(), strict=True))
        except Exception:
            out: list[tuple[Task, int | None, int]] = []
            for task, row in rows:
                one = np.array([task.rng], np.uint64)
                try:
                    token = self._sample_rows(row[None, :], np.array([task.temperature], np.float32),
                                              np.array([task.top_p], np.float32), one).tolist()[0]
                    out.append((task, token, int(one[0])))
                except Exception as exc:
                    self.decoding.remove(task)
                    self._fail(task, exc)
                    out.append((task, None, task.rng))
            return out

    def _decode(self, go: list[Task]) -> None:
        """The batched decode step; should it raise, each task steps alone (batched rows are
        bit-identical to single-slot steps), and only a task whose own step fails is failed."""
        try:
            logits = self.engine.decode([t.assigned for t in go], [t.next_token for t in go])
            for t, row in zip(go, logits, strict=True):
                t.logits = row
            return
        except Exception as exc:  # noqa: BLE001 - retried row by row below, where a fault fails its own task
            log.warning("batched decode of %d slots failed (%s: %s); stepping each alone", len(go),
                        type(exc).__name__, exc)
        for t in go:
            try:
                t.logits = self.engine.decode([t.assigned], [t.next_token])[0]
            except Exception as exc:
                self.decoding.remove(t)
                self._fail(t, exc)
