"""System One scoring on the engine thread: a /v1/systemone task's prompts walked as a prefix
tree, one engine call per pass, between the decode steps of the other slots.

The HTTP side (prompts, labels, answers) is server/systemone.py; this module only brings a
slot to each prompt and reads the label logits at its last position. Nothing is sampled.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Generator
from typing import Any

import numpy as np

from .task import Scored, Task

Passes = Generator[None, None, None]


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


class Scorer:
    """The scoring tasks in progress, each with the generator of its engine passes.

    `release(task, outcome)`, `finish(task)`, `fail(task, exc)` and `close_turn(task, outcome)`
    are the engine loop's: a scoring task's slot and profile end the way a generation's do."""

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

    def __init__(self, *, release: Callable[[Task, str], None], fail: Callable[[Task, BaseException], None]):
        self.release, self.fail = release, fail
        self.running: list[tuple[Task, Passes]] = []
        self.owed = 0.0  # seconds of scoring passes not yet matched by decode steps

    def add(self, task: Task, engine: Any) -> None:
        self.running.append((task, self._score(task, engine)))

    def passes(self) -> None:
        """One engine call of each scoring task; a cancelled one is dropped and its slot freed."""
        for entry in list(self.running):
            task, passes = entry
            t0 = time.perf_counter()
            try:
                if task.cancelled:
                    passes.close()
                    self.running.remove(entry)
                    self.release(task, "cancelled")
                    continue
                next(passes)
            except StopIteration:
                self.running.remove(entry)
            except Exception as exc:  # engine faults fail this request only
                self.running.remove(entry)
                self.fail(task, exc)
            finally:
                task.turn.prefill += time.perf_counter() - t0

    def _score(self, task: Task, engine: Any) -> Passes:
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
            computed = yield from self._tree(engine, task.assigned, prompts, list(range(len(prompts))), shared, logits)
        else:
            for i, prompt in enumerate(prompts):
                n, row = yield from self._prefill(engine, task.assigned, prompt)
                logits[i] = np.asarray(row).reshape(-1)
                computed += n
                yield
        rows = [logits[i][label_ids] for i, (_, label_ids) in enumerate(scoring)]
        reused = total - computed
        task.turn.prompt_tokens, task.turn.cached_tokens = total, reused
        if task.cancelled:  # gone during the last pass: nothing to report
            self.release(task, "cancelled")
            return
        # The slot is freed (and the turn closed) before the answer goes out, as for a generation:
        # a client that reads /health once it has its scores sees the request settled
        # (rule ops.health.accounting).
        self.release(task, "completed")
        task.events.put(Scored(rows, reused, total))

    def _prefill(self, engine: Any, slot: int, tokens: list[int]) -> Generator[None, None, tuple[int, Any]]:
        """Bring the slot to hold `tokens`, computing at most SCORE_PASS_TOKENS per engine call
        (what the slot already holds is reused); yields between calls. Returns the tokens
        computed and the last position's logits."""
        held = np.asarray(engine.slot_tokens(slot), np.intc)
        want = np.asarray(tokens, np.intc)
        n = min(len(want), len(held))
        differ = np.flatnonzero(want[:n] != held[:n])
        start = int(differ[0]) if differ.size else n
        ends = list(range(start + self.SCORE_PASS_TOKENS, len(tokens), self.SCORE_PASS_TOKENS)) + [len(tokens)]
        computed, row = 0, None
        for k, end in enumerate(ends):
            if k:
                yield
            n_reused, row = engine.prefill(slot, tokens[:end])
            computed += end - n_reused
        return computed, row

    def _tree(self, engine: Any, slot: int, prompts: list[list[int]], which: list[int], head: int,
              logits: dict[int, Any]) -> Generator[None, None, int]:
        """Score prompts[i] for i in `which`, which all begin with the same `head` tokens (each
        has at least one more): bring the slot to that beginning (reusing what it holds), score
        as branches the prompts that share nothing longer worth a pass, then recurse into each
        group that does. Returns the tokens computed; the logits go to `logits[i]`. Yields
        after each engine call."""
        computed, _ = yield from self._prefill(engine, slot, prompts[which[0]][:head])
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
        room = min(engine.n_ctx - head, self.SCORE_PASS_TOKENS)
        batch: list[int] = []
        used = 0  # the batch's tail tokens
        for i in leaves + [-1]:
            size = len(prompts[i]) - head if i >= 0 else 0
            if batch and (i < 0 or used + size > room):
                rows = engine.prefill_branches(slot, [prompts[j][head:] for j in batch])
                logits.update((j, np.asarray(r)) for j, r in zip(batch, rows, strict=True))
                computed += used
                batch, used = [], 0
                yield
            if i >= 0:
                batch.append(i)
                used += size
        for part, deeper in groups:
            computed += yield from self._tree(engine, slot, prompts, part, deeper, logits)
        return computed
