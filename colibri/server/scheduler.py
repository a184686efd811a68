"""Admission queue, KV slots and the one engine thread.

HTTP threads parse, render and tokenize, then hand a `Task` to `Scheduler.admit`, which
blocks until the task holds a slot (or raises queue_full / queue_timeout /
scheduler_closed). The engine thread prefills admitted tasks between decode steps and
advances every decoding task together in one batched step; each task gets exactly the
tokens it would get alone. Results flow back through the task's event queue. A consumer
that no longer wants tokens (a stop matched, the client left) sets a flag the engine thread
reads before the next step.
"""
from __future__ import annotations

import hashlib
import json
import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..settings import PREFIX_REUSE
from .errors import error
from .profile import Ring, Turn

BUCKETS = (0.001, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300)
log = logging.getLogger("colibri.server")


def conversation_digest(messages: list[dict[str, Any]]) -> bytes:
    """SHA-1 of the messages up to and including the first user message (JSON, sorted keys):
    what every turn of one conversation begins with."""
    head = []
    for m in messages:
        head.append(m)
        if m.get("role") == "user":
            break
    return hashlib.sha1(json.dumps(head, sort_keys=True, ensure_ascii=False).encode()).digest()


def conversation_slot(messages: list[dict[str, Any]], n_slots: int) -> int:
    """A conversation's own slot: hash of the messages up to the first user message. It breaks
    ties between free slots that hold equally much of a prompt (a tie-break, not a pin: see
    the rule ops.slot.choice)."""
    if n_slots <= 1:
        return 0
    return int.from_bytes(conversation_digest(messages)[:8], "big") % n_slots


def _seed_state(seed: int | None) -> int:
    """A non-zero xorshift state: splitmix64 of the seed, or of fresh entropy."""
    x = (seed if seed is not None else int.from_bytes(np.random.bytes(8), "little")) & (2**64 - 1)
    x = (x + 0x9E3779B97F4A7C15) & (2**64 - 1)
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & (2**64 - 1)
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & (2**64 - 1)
    return (x ^ (x >> 31)) or 1


def common_head(prompts: list[list[int]]) -> int:
    """Tokens every prompt begins with, leaving each at least one of its own (its last position
    must be computed to be scored)."""
    first, n = prompts[0], min(len(p) for p in prompts) - 1
    for p in prompts[1:]:
        k = 0
        while k < n and p[k] == first[k]:
            k += 1
        n = k
    return max(n, 0)


@dataclass(slots=True)
class TokenRecord:
    token: int
    logprob: float | None = None
    top: list[tuple[int, float]] = field(default_factory=list)


@dataclass
class Task:
    prompt: list[int]
    max_new: int
    end_tokens: frozenset[int]
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None
    top_k_logprobs: int = -1  # -1: no logprobs; k >= 0: chosen token's logprob plus k alternatives
    echo: bool = False  # prompt logprobs (prefill without reuse, every position)
    slot: int | None = None  # pinned slot (cache_slot), or None for any free slot
    prefer: int | None = None  # among equally good free slots, take this one (the conversation's hash slot)
    events: queue.SimpleQueue = field(default_factory=queue.SimpleQueue)  # the C queue: cheap per token
    stop_requested: bool = False
    cancelled: bool = False
    client_gone: Any = None  # callable polled while the task waits for a slot
    request_id: str = ""  # for the log: which request an engine fault belongs to
    # a scoring task (/v1/systemone): (prompt, label ids) pairs prefilled in turn into the slot,
    # the label logits of each last position reported in one "scored" event; nothing is sampled
    scoring: list[tuple[list[int], list[int]]] | None = None
    # which conversation the prompt belongs to (conversation_digest; the state's for a scoring
    # task): with --prefix-reuse conversation, only a slot last used by the same one is reused
    reuse_key: bytes | None = None
    # a ToolDecoder (colibri/tool_decoding.py) when the request offers tools and the server keeps
    # tool names to the offered ones (rule tools.decode.offered-names); None: sampling is free
    decoder: Any = None
    # filled by the scheduler
    assigned: int = -1
    n_reused: int = 0
    generated: int = 0
    queue_wait: float = 0.0
    rng: int = 0
    logits: Any = None
    next_token: int = -1
    admitted_at: float = 0.0
    engine_started: float = 0.0  # when the engine began this task's prefill
    first_output: bool = False
    turn: Turn = field(default_factory=Turn)  # where this request's time went (GET /profile)

    def stop(self) -> None:
        self.stop_requested = True

    def cancel(self) -> None:
        self.cancelled = True


class Metrics:
    """The colibri_scheduler_* series; a registry is injected so tests read their own."""

    def __init__(self, registry: Any = None):
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics

        disable_created_metrics()  # the spec names exactly the series it wants; no *_created

        self.registry = registry or CollectorRegistry()
        r = self.registry
        p = "colibri_scheduler_"
        self.active = Gauge(p + "active", "Requests holding a KV slot", registry=r)
        self.queued = Gauge(p + "queued", "Requests waiting for admission", registry=r)
        self.capacity = Gauge(p + "capacity", "KV slot capacity", registry=r)
        self.max_queue = Gauge(p + "max_queue", "Admission queue limit", registry=r)
        self.admitted = Counter(p + "admitted", "Requests admitted to a KV slot", registry=r)
        self.completed = Counter(p + "completed", "Admitted requests that returned normally", registry=r)
        self.failed = Counter(p + "failed", "Admitted requests that raised an error", registry=r)
        self.rejected = Counter(p + "rejected", "Queue-full refusals", registry=r)
        self.timed_out = Counter(p + "timed_out", "Queue timeouts", registry=r)
        self.cancelled = Counter(p + "cancelled", "Admitted requests cancelled by their client", registry=r)
        # A client that leaves while its request waits for a slot was never admitted: counted apart,
        # so that admitted = completed + failed + cancelled holds (rule ops.health.accounting).
        self.abandoned = Counter(p + "abandoned", "Requests whose client left while they waited for a slot",
                                 registry=r)
        self.queue_wait = Histogram(p + "queue_wait_seconds", "Wait until admission (admitted requests)",
                                    buckets=BUCKETS, registry=r)
        self.slot_duration = Histogram(p + "slot_duration_seconds", "Slot occupancy until release",
                                       buckets=BUCKETS, registry=r)
        self.first_output = Histogram(p + "first_output_seconds", "Engine-call start to first token",
                                      buckets=BUCKETS, registry=r)
        self.engine_call = Histogram(p + "engine_call_seconds", "Duration of each finished engine call",
                                     buckets=BUCKETS, registry=r)


class Scheduler:
    def __init__(self, engine: Any, *, n_slots: int, max_queue: int = 8, queue_timeout: float = 300.0,
                 metrics: Metrics | None = None, step_delay: float = 0.0, on_release: Any = None,
                 profile_turns: int = 256, prefix_reuse: str = "shared"):
        from .. import _engine

        self._sample_rows, self._logprobs = _engine.sample_rows, _engine.logprobs
        self.engine = engine
        self.n_slots = n_slots
        self.max_queue = max_queue
        self.queue_timeout = queue_timeout
        self.metrics = metrics or Metrics()
        self.metrics.capacity.set(n_slots)
        self.metrics.max_queue.set(max_queue)
        self.step_delay = step_delay  # test hook: slows every engine step
        self.on_release = on_release  # called on the engine thread with a slot whose work ended
        self.profiles = Ring(profile_turns)  # the last turns' phase times (rule ops.profile.ring)
        self.timing = profile_turns > 0  # off: the engine thread reads no clock for profiling
        # Running totals over every step: a decoding task takes part in each step from its
        # prefill to its end, so its share is the difference between its first and last
        # reading; the cost per step does not grow with the batch.
        self.sample_total = self.decode_total = 0.0
        self.steps = self.batch_sum = 0
        self.lock = threading.Condition()
        self.waiters: deque[Task] = deque()
        self.busy: set[int] = set()
        # What each slot's KV cache holds (prompt and answer of its last request, or what a
        # persisted slot brought back): a free slot whose history starts like a new prompt
        # saves that prefix's prefill. Written by the engine thread at release, under the lock.
        self.history = [np.asarray(engine.slot_tokens(s), np.intc) for s in range(n_slots)]
        # Whose conversation left each slot's cache (None: restored, or a request with no key).
        if prefix_reuse not in PREFIX_REUSE:
            raise ValueError(f"unknown prefix reuse {prefix_reuse!r} (known: {', '.join(PREFIX_REUSE)})")
        self.prefix_reuse = prefix_reuse
        self.owner: list[bytes | None] = [None] * n_slots
        self.to_prefill: deque[Task] = deque()
        self.decoding: list[Task] = []
        # scoring tasks (/v1/systemone) in progress, each with the generator of its engine passes
        self.scoring: list[tuple[Task, Generator[None, None, None]]] = []
        self.scoring_owed = 0.0  # seconds of scoring passes not yet matched by decode steps
        self.closed = False
        self.failed: str | None = None  # why the engine thread stopped, if it did
        self.thread = threading.Thread(target=self._run, name="colibri-engine", daemon=True)
        self.thread.start()

    # ------------------------------------------------------------------ admission (HTTP threads)

    def _free_for(self, task: Task, ahead: list[Task]) -> int | None:
        """A slot `task` may take now without jumping an older waiter's reservation."""
        reserved: set[int] = set()
        for w in ahead:
            if w.slot is None:
                return None  # an older any-slot waiter has priority over every free slot
            reserved.add(w.slot)
        free = [s for s in range(self.n_slots) if s not in self.busy and s not in reserved]
        if task.slot is not None:
            return task.slot if task.slot in free else None
        if not free:
            return None
        # The free slot whose cache shares the longest prefix with the prompt; ties go to the
        # preferred (hash) slot, then to the lowest.
        prompt = np.asarray(task.prompt, np.intc)
        return max(free, key=lambda s: (self._shared_prefix(prompt, s) if self._may_reuse(task, s) else 0,
                                        s == task.prefer, -s))

    def _may_reuse(self, task: Task, slot: int) -> bool:
        """Whether `task` may start from what `slot` caches (rule ops.prefix-reuse.scope): any
        slot when reuse is shared; with conversation, only a slot its own conversation left."""
        if self.prefix_reuse == "shared":
            return True
        return self.prefix_reuse == "conversation" and task.reuse_key is not None \
            and self.owner[slot] == task.reuse_key

    def _shared_prefix(self, prompt: np.ndarray, slot: int) -> int:
        held = self.history[slot]
        n = min(len(prompt), len(held))
        differ = np.flatnonzero(prompt[:n] != held[:n])
        return int(differ[0]) if differ.size else n

    def admit(self, task: Task) -> None:
        """Block until `task` holds a slot; raises the queue's named errors."""
        start = time.monotonic()
        if self.timing:
            task.turn.admitting = time.perf_counter()
        with self.lock:
            if self.closed:
                raise error("engine_failed" if self.failed else "scheduler_closed")
            slot = self._free_for(task, list(self.waiters))
            if slot is None:
                if len(self.waiters) >= self.max_queue:
                    self.metrics.rejected.inc()
                    raise error("queue_full")
                self.waiters.append(task)
                self.metrics.queued.set(len(self.waiters))
                deadline = start + self.queue_timeout
                try:
                    while True:
                        self.lock.wait(timeout=min(0.25, max(0.0, deadline - time.monotonic())))
                        if self.closed:
                            raise error("engine_failed" if self.failed else "scheduler_closed")
                        if task.cancelled or (task.client_gone is not None and task.client_gone()):
                            self.metrics.abandoned.inc()
                            raise ClientGone()
                        if time.monotonic() >= deadline:
                            self.metrics.timed_out.inc()
                            raise error("queue_timeout")
                        ahead = list(self.waiters)[: self.waiters.index(task)]
                        slot = self._free_for(task, ahead)
                        if slot is not None:
                            break
                finally:
                    self.waiters.remove(task)
                    self.metrics.queued.set(len(self.waiters))
                    self.lock.notify_all()
            task.assigned = slot
            task.queue_wait = time.monotonic() - start
            task.admitted_at = time.monotonic()
            task.rng = _seed_state(task.seed)
            if self.timing:
                turn = task.turn
                turn.render = turn.admitting - turn.received if turn.received else 0.0
                turn.queue = time.perf_counter() - turn.admitting
            self.busy.add(slot)
            self.metrics.admitted.inc()
            self.metrics.active.set(len(self.busy))
            self.metrics.queue_wait.observe(task.queue_wait)
            self.to_prefill.append(task)
            self.lock.notify_all()

    def close(self) -> None:
        with self.lock:
            self.closed = True
            self.lock.notify_all()

    def snapshot(self) -> dict[str, Any]:
        with self.lock:
            return {"active": len(self.busy), "queued": len(self.waiters), "capacity": self.n_slots,
                    "max_queue": self.max_queue, "queue_timeout_seconds": self.queue_timeout,
                    **{k: int(self.metrics.registry.get_sample_value(f"colibri_scheduler_{k}_total") or 0)
                       for k in ("admitted", "completed", "failed", "rejected", "timed_out", "cancelled",
                                                                          "abandoned")}}

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
        with self.lock:
            self.history[task.assigned] = held
            self.owner[task.assigned] = task.reuse_key
            self.busy.discard(task.assigned)
            getattr(self.metrics, outcome).inc()
            self.metrics.active.set(len(self.busy))
            self.metrics.slot_duration.observe(time.monotonic() - task.admitted_at)
            if task.engine_started:
                self.metrics.engine_call.observe(time.monotonic() - task.engine_started)
            self.lock.notify_all()

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
            self._close_turn(task, "completed")
            task.events.put(("done", reason))
            self._release(task, "completed")

    def _fail(self, task: Task, exc: BaseException) -> None:
        """Fail this task alone: its own error event, its slot freed, the fault logged."""
        log.error("engine fault for %s in slot %d: %s: %s", task.request_id or "a request", task.assigned,
                  type(exc).__name__, exc, exc_info=exc)
        self._close_turn(task, "cancelled" if task.cancelled else "failed")
        task.events.put(("error", exc))
        self._release(task, "cancelled" if task.cancelled else "failed")

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
        task.events.put(("accepted", {"prompt_tokens": len(task.prompt), "reused": task.n_reused,
                                      "queue_wait": task.queue_wait, "echo": echo}))

    def _score(self, task: Task) -> Generator[None, None, None]:
        """Score each prompt's label logits at its last position, nothing sampled. The prompts
        are walked as a prefix tree: what they all begin with (the state) is prefilled once
        into the task's slot, and so is every longer beginning that enough of them share (a
        closing line and option lines, in the shared-first layout); the rest of each prompt
        goes through the engine as a branch of the beginning it shares, seeing that beginning
        and itself only, as many branches per pass as a pass holds.

        A generator that yields after each engine call: the engine thread runs one pass of it
        between two decode steps of the other slots, and drops it when the task is cancelled
        (rule s1.scoring.interleaved-cancellable)."""
        task.engine_started = time.monotonic()
        scoring = task.scoring or []
        prompts = [p for p, _ in scoring]
        total = sum(len(p) for p in prompts)
        logits: dict[int, Any] = {}
        computed = 0
        shared = common_head(prompts) if len(prompts) > 1 else 0
        if shared:
            computed = yield from self._score_tree(task.assigned, prompts, list(range(len(prompts))), shared, logits)
        else:
            for i, prompt in enumerate(prompts):
                n, row = yield from self._prefill_passes(task.assigned, prompt)
                logits[i] = np.asarray(row).reshape(-1)
                computed += n
                yield
        rows = [logits[i][label_ids] for i, (_, label_ids) in enumerate(scoring)]
        reused = total - computed
        task.turn.prompt_tokens, task.turn.cached_tokens = total, reused
        if task.cancelled:  # gone during the last pass: nothing to report
            self._release(task, "cancelled")
            return
        self._close_turn(task, "completed")
        task.events.put(("scored", {"rows": rows, "reused": reused, "prompt_tokens": total}))
        self._finish(task, "stop")

    # A beginning shared by some of the prompts gets its own prefill when that spares at least
    # this many tokens: it costs two more passes (its prefill and its branches'), and each pass
    # reads all the weights once more, which on SmolLM2-135M in float32 costs about as much as
    # computing ten tokens.
    SHARED_MIN_SAVING = 32
    # Tokens one scoring pass computes at most (a single branch longer than this goes alone):
    # the other slots' decode steps run between two passes, so this bounds how long a chat
    # waits for its next token while a large /v1/systemone request is scored. At about ten
    # tokens' worth of weight reading per pass (SHARED_MIN_SAVING's figure), a pass of 256
    # costs some 4% more than one holding the whole context (bench/systemone_interleave.py).
    SCORE_PASS_TOKENS = 256

    def _prefill_passes(self, slot: int, tokens: list[int]) -> Generator[None, None, tuple[int, Any]]:
        """Bring the slot to hold `tokens`, computing at most SCORE_PASS_TOKENS per engine call
        (what the slot already holds is reused); yields between calls. Returns the tokens
        computed and the last position's logits."""
        held = np.asarray(self.engine.slot_tokens(slot), np.intc)
        want = np.asarray(tokens, np.intc)
        n = min(len(want), len(held))
        differ = np.flatnonzero(want[:n] != held[:n])
        start = int(differ[0]) if differ.size else n
        ends = list(range(start + self.SCORE_PASS_TOKENS, len(tokens), self.SCORE_PASS_TOKENS)) + [len(tokens)]
        computed, row = 0, None
        for k, end in enumerate(ends):
            if k:
                yield
            n_reused, row = self.engine.prefill(slot, tokens[:end])
            computed += end - n_reused
        return computed, row

    def _score_tree(self, slot: int, prompts: list[list[int]], which: list[int], head: int,
                    logits: dict[int, Any]) -> Generator[None, None, int]:
        """Score prompts[i] for i in `which`, which all begin with the same `head` tokens (each
        has at least one more): bring the slot to that beginning (reusing what it holds), score
        as branches the prompts that share nothing longer worth a pass, then recurse into each
        group that does. Returns the tokens computed; the logits go to `logits[i]`. Yields
        after each engine call."""
        computed, _ = yield from self._prefill_passes(slot, prompts[which[0]][:head])
        yield
        by_next: dict[int, list[int]] = {}
        for i in which:
            by_next.setdefault(prompts[i][head], []).append(i)
        leaves: list[int] = []
        groups: list[tuple[list[int], int]] = []
        for part in by_next.values():
            deeper = common_head([prompts[i] for i in part]) if len(part) > 1 else head
            if (len(part) - 1) * (deeper - head) >= self.SHARED_MIN_SAVING:
                groups.append((part, deeper))
            else:
                leaves.extend(part)
        room = min(self.engine.n_ctx - head, self.SCORE_PASS_TOKENS)
        batch: list[int] = []
        used = 0  # the batch's tail tokens
        for i in leaves + [-1]:
            size = len(prompts[i]) - head if i >= 0 else 0
            if batch and (i < 0 or used + size > room):
                rows = self.engine.prefill_branches(slot, [prompts[j][head:] for j in batch])
                logits.update((j, np.asarray(r)) for j, r in zip(batch, rows, strict=True))
                computed += used
                batch, used = [], 0
                yield
            if i >= 0:
                batch.append(i)
                used += size
        for part, deeper in groups:
            computed += yield from self._score_tree(slot, prompts, part, deeper, logits)
        return computed

    def _score_passes(self) -> None:
        """One engine call of each scoring task; a cancelled one is dropped and its slot freed."""
        for entry in list(self.scoring):
            task, passes = entry
            t0 = time.perf_counter()
            try:
                if task.cancelled:
                    passes.close()
                    self.scoring.remove(entry)
                    self._release(task, "cancelled")
                    continue
                next(passes)
            except StopIteration:
                self.scoring.remove(entry)
            except Exception as exc:  # engine faults fail this request only
                self.scoring.remove(entry)
                self._fail(task, exc)
            finally:
                task.turn.prefill += time.perf_counter() - t0

    def _run(self) -> None:
        """The engine thread, supervised: should its loop itself break (a bug outside any one
        task's work), every admitted and waiting request fails with 503 engine_failed, /health
        says so, and the server refuses new work instead of letting it wait forever."""
        try:
            self._loop()
        except BaseException as exc:  # noqa: BLE001 - the supervisor's whole point
            log.critical("the engine thread stopped: %s: %s", type(exc).__name__, exc, exc_info=exc)
            with self.lock:
                self.failed = f"{type(exc).__name__}: {exc}"
                self.closed = True
                pending = list(self.to_prefill) + list(self.decoding) + [t for t, _ in self.scoring]
                self.to_prefill.clear()
                self.decoding.clear()
                self.scoring.clear()
                self.lock.notify_all()
            for task in pending:
                task.events.put(("error", error("engine_failed")))
                with self.lock:
                    self.busy.discard(task.assigned)
                    self.metrics.failed.inc()
                    self.metrics.active.set(len(self.busy))

    def _loop(self) -> None:
        while True:
            with self.lock:
                while not self.to_prefill and not self.decoding and not self.scoring and not self.closed:
                    self.lock.wait()
                if self.closed and not self.to_prefill and not self.decoding and not self.scoring:
                    return
                batch = list(self.to_prefill)
                self.to_prefill.clear()
            for task in batch:
                try:
                    if task.cancelled:
                        self._release(task, "cancelled")
                        continue
                    if not self._may_reuse(task, task.assigned):  # another conversation's cache: forget it
                        self.engine.slot_truncate(task.assigned, 0)
                    if task.scoring is not None:
                        self.scoring.append((task, self._score(task)))
                        continue
                    self._prefill(task)
                    self.decoding.append(task)
                except Exception as exc:  # engine faults fail this request only
                    self._fail(task, exc)
            # Scoring gets at most half the engine's time while others decode: after a round of
            # passes, decode steps run until they have taken as long (one pass per step would
            # give a chat one token per pass, and it would wait about as long as the scoring).
            if self.scoring and (not self.decoding or self.scoring_owed <= 0):
                t0 = time.perf_counter()
                self._score_passes()
                self.scoring_owed += time.perf_counter() - t0
            if self.step_delay:
                time.sleep(self.step_delay)
            t0 = time.perf_counter()
            self._step()
            self.scoring_owed = self.scoring_owed - (time.perf_counter() - t0) if self.decoding else 0.0

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
            task.events.put(("token", self._record(task, task.logits, token)))
            task.generated += 1
            if not task.first_output:
                task.first_output = True
                self.metrics.first_output.observe(time.monotonic() - task.engine_started)
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
        except Exception:
            pass
        for t in go:
            try:
                t.logits = self.engine.decode([t.assigned], [t.next_token])[0]
            except Exception as exc:
                self.decoding.remove(t)
                self._fail(t, exc)


class ClientGone(Exception):
    """The client went away while its request was queued or generating."""
