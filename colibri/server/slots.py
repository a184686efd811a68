"""Admission and KV slots: the bounded FIFO an HTTP thread waits in, the choice of a slot, and
what each slot's cache holds.

`Slots.admit` blocks an HTTP thread until its task holds a slot, or raises queue_full /
queue_timeout / scheduler_closed / engine_failed (or ClientGone when the client left while
it waited). Pinned waiters (cache_slot) reserve their slot; an older any-slot waiter goes
before every later one; otherwise the free slot whose cache holds the longest prefix of the
prompt wins (rule ops.slot.choice). The engine thread takes the admitted tasks with
`admitted` and gives a slot back with `release`; one condition variable guards it all.
"""
from __future__ import annotations

import hashlib
import json
import threading
import time
from collections import deque
from typing import Any

import numpy as np

from ..settings import PREFIX_REUSE
from .errors import error
from .metrics import Metrics
from .task import ClientGone, Failed, Task

WAIT_POLL = 0.25  # seconds between two looks at a queued request's client and deadline


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
    return slot_of(conversation_digest(messages), n_slots)


def slot_of(digest: bytes, n_slots: int) -> int:
    """The slot a conversation digest (conversation_digest) prefers among `n_slots`."""
    return 0 if n_slots <= 1 else int.from_bytes(digest[:8], "big") % n_slots


def seed_state(seed: int | None) -> int:
    """A non-zero xorshift state: splitmix64 of the seed, or of fresh entropy."""
    x = (seed if seed is not None else int.from_bytes(np.random.bytes(8), "little")) & (2**64 - 1)
    x = (x + 0x9E3779B97F4A7C15) & (2**64 - 1)
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & (2**64 - 1)
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & (2**64 - 1)
    return (x ^ (x >> 31)) or 1


class Slots:
    def __init__(self, engine: Any, *, n_slots: int, max_queue: int, queue_timeout: float, metrics: Metrics,
                 prefix_reuse: str = "shared", timing: bool = True):
        if prefix_reuse not in PREFIX_REUSE:
            raise ValueError(f"unknown prefix reuse {prefix_reuse!r} (known: {', '.join(PREFIX_REUSE)})")
        self.n_slots, self.max_queue, self.queue_timeout = n_slots, max_queue, queue_timeout
        self.metrics, self.prefix_reuse, self.timing = metrics, prefix_reuse, timing
        metrics["capacity"].set(n_slots)
        metrics["max_queue"].set(max_queue)
        self.lock = threading.Condition()
        self.waiters: deque[Task] = deque()
        self.busy: set[int] = set()
        # What each slot's KV cache holds (prompt and answer of its last request, or what a
        # persisted slot brought back): a free slot whose history starts like a new prompt
        # saves that prefix's prefill. Written by the engine thread at release, under the lock.
        self.history = [np.asarray(engine.slot_tokens(s), np.intc) for s in range(n_slots)]
        # Whose conversation left each slot's cache (None: restored, or a request with no key).
        self.owner: list[bytes | None] = [None] * n_slots
        self.to_prefill: deque[Task] = deque()
        self.closed = False
        self.failed: str | None = None  # why the engine thread stopped, if it did

    # ------------------------------------------------------------------ the choice of a slot

    def free_for(self, task: Task, ahead: list[Task]) -> int | None:
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
        return max(free, key=lambda s: (self.shared_prefix(prompt, s) if self.may_reuse(task, s) else 0,
                                        s == task.prefer, -s))

    def may_reuse(self, task: Task, slot: int) -> bool:
        """Whether `task` may start from what `slot` caches (rule ops.prefix-reuse.scope): any
        slot when reuse is shared; with conversation, only a slot its own conversation left."""
        if self.prefix_reuse == "shared":
            return True
        return self.prefix_reuse == "conversation" and task.reuse_key is not None \
            and self.owner[slot] == task.reuse_key

    def shared_prefix(self, prompt: np.ndarray, slot: int) -> int:
        held = self.history[slot]
        n = min(len(prompt), len(held))
        differ = np.flatnonzero(prompt[:n] != held[:n])
        return int(differ[0]) if differ.size else n

    # ------------------------------------------------------------------ admission (HTTP threads)

    def _refuse_if_closed(self) -> None:
        if self.closed:
            raise error("engine_failed" if self.failed else "scheduler_closed")

    def admit(self, task: Task) -> None:
        """Block until `task` holds a slot; raises the queue's named errors."""
        start = time.monotonic()
        if self.timing:
            task.turn.admitting = time.perf_counter()
        with self.lock:
            self._refuse_if_closed()
            slot = self.free_for(task, list(self.waiters))
            if slot is None:
                if len(self.waiters) >= self.max_queue:
                    self.metrics["rejected"].inc()
                    raise error("queue_full")
                slot = self._wait(task, start + self.queue_timeout)
            task.assigned = slot
            task.queue_wait = time.monotonic() - start
            task.admitted_at = time.monotonic()
            task.rng = seed_state(task.seed)
            if self.timing:
                turn = task.turn
                turn.render = turn.admitting - turn.received if turn.received else 0.0
                turn.queue = time.perf_counter() - turn.admitting
            self.busy.add(slot)
            self.metrics["admitted"].inc()
            self.metrics["active"].set(len(self.busy))
            self.metrics["queue_wait_seconds"].observe(task.queue_wait)
            self.to_prefill.append(task)
            self.lock.notify_all()

    def _wait(self, task: Task, deadline: float) -> int:
        """Queue `task` (the lock held) until a slot is its to take; the queue's errors raise."""
        self.waiters.append(task)
        self.metrics["queued"].set(len(self.waiters))
        try:
            while True:
                self.lock.wait(timeout=min(WAIT_POLL, max(0.0, deadline - time.monotonic())))
                self._refuse_if_closed()
                if task.cancelled or (task.client_gone is not None and task.client_gone()):
                    self.metrics["abandoned"].inc()
                    raise ClientGone()
                if time.monotonic() >= deadline:
                    self.metrics["timed_out"].inc()
                    raise error("queue_timeout")
                ahead = list(self.waiters)[: self.waiters.index(task)]
                slot = self.free_for(task, ahead)
                if slot is not None:
                    return slot
        finally:
            self.waiters.remove(task)
            self.metrics["queued"].set(len(self.waiters))
            self.lock.notify_all()

    def close(self) -> None:
        with self.lock:
            self.closed = True
            self.lock.notify_all()

    def snapshot(self) -> dict[str, Any]:
        with self.lock:
            return {"active": len(self.busy), "queued": len(self.waiters), "capacity": self.n_slots,
                    "max_queue": self.max_queue, "queue_timeout_seconds": self.queue_timeout,
                    **self.metrics.counts()}

    # ------------------------------------------------------------------ the engine thread's side

    def admitted(self, working: bool) -> list[Task] | None:
        """The tasks admitted since the last call. Blocks while there are none and the engine
        has nothing else to do (`working` false); None once closed with nothing left to do."""
        with self.lock:
            while not self.to_prefill and not working and not self.closed:
                self.lock.wait()
            if self.closed and not self.to_prefill and not working:
                return None
            batch = list(self.to_prefill)
            self.to_prefill.clear()
            return batch

    def release(self, task: Task, outcome: str, held: np.ndarray) -> None:
        """Give the task's slot back, `held` being what its cache now holds; count the outcome
        (completed | failed | cancelled)."""
        with self.lock:
            self.history[task.assigned] = held
            self.owner[task.assigned] = task.reuse_key
            self.busy.discard(task.assigned)
            self.metrics[outcome].inc()
            self.metrics["active"].set(len(self.busy))
            self.metrics["slot_duration_seconds"].observe(time.monotonic() - task.admitted_at)
            if task.engine_started:
                self.metrics["engine_call_seconds"].observe(time.monotonic() - task.engine_started)
            self.lock.notify_all()

    def stop_all(self, reason: str, working: list[Task]) -> None:
        """The engine thread has stopped (`reason`): refuse new work, and fail every admitted
        task, those the engine was `working` on and those it had not taken yet, with 503
        engine_failed (rule ops.engine.supervised)."""
        with self.lock:
            self.failed = reason
            self.closed = True
            pending = list(self.to_prefill) + working
            self.to_prefill.clear()
            self.lock.notify_all()
        for task in pending:
            task.events.put(Failed(error("engine_failed")))
            with self.lock:
                self.busy.discard(task.assigned)
                self.metrics["failed"].inc()
                self.metrics["active"].set(len(self.busy))
