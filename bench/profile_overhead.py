"""What recording the turn profile (GET /profile, rule ops.profile.ring) costs the engine thread.

Two ways, both against schedulers that record (`profile_turns=256`) and that do not (0: the
engine thread reads no clock for profiling), run in turn with the order swapped every round:

1. The cost itself: the benchmark's own thread calls the scheduler's step (sampling, events,
   bookkeeping: all real) over an engine whose forward pass returns at once, so a step is
   nearly all bookkeeping and the difference per step is what recording adds. It is divided
   by the real model's own decode step, timed alone: the overhead as a fraction of decode.
2. End to end on the embedded model (greedy decode, same tasks): the ratio of the two runs
   made back to back. Thread wake-ups make single rounds vary by tens of percent here, so
   this only shows that no large cost hides elsewhere.

The embedded model decodes a token in well under a millisecond, so a fixed cost per step
weighs more here than on any real model: this is the worst case.

Usage: python bench/profile_overhead.py [--rounds 15] [--tokens 128] [--batch 1 4]
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

import numpy as np

from colibri.model import Model
from colibri.server.scheduler import Scheduler
from colibri.server.task import Done, Failed, Task

PROMPT = list(range(40, 104))  # 64 prompt tokens


class InstantEngine:
    """The engine's interface with a forward pass that costs nothing: fixed logits."""

    def __init__(self, vocab: int, n_slots: int):
        self.row = np.random.default_rng(0).standard_normal(vocab).astype(np.float32)
        self.n_slots = n_slots

    def slot_tokens(self, slot: int) -> list[int]:
        return []

    def prefill(self, slot: int, prompt: list[int], **kw: object) -> tuple[int, np.ndarray]:
        return 0, self.row.copy()

    def decode(self, slots: list[int], tokens: list[int]) -> np.ndarray:
        return np.repeat(self.row[None, :], len(slots), axis=0)


def steps_alone(s: Scheduler, batch: int, steps: int) -> float:
    """Median seconds of `steps` calls of the scheduler's step made from this thread (its
    engine thread sleeps: nothing is queued for it) with `batch` tasks decoding."""
    tasks = [Task(prompt=PROMPT, max_new=10**9, end_tokens=frozenset(), temperature=0.0) for _ in range(batch)]
    for slot, t in enumerate(tasks):
        t.assigned, t.logits = slot, s.engine.row.copy()
        s._mark(t)
        s.decoding.append(t)
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        s._step()
        times.append(time.perf_counter() - t0)
    for t in tasks:  # leave as they would: their turns closed, the batch empty
        s._close_turn(t, "completed")
    s.decoding.clear()
    return statistics.median(times)


def decode_step(model: Model, batch: int, repeat: int = 200) -> float:
    """The real engine's median seconds per batched decode step at a 64-token context."""
    eng = model.engine(n_slots=batch)
    for s in range(batch):
        eng.prefill(s, PROMPT)
    times = []
    for i in range(repeat):
        t = time.perf_counter()
        eng.decode(list(range(batch)), [50 + i % 100] * batch)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def run(s: Scheduler, batch: int, tokens: int) -> float:
    """Seconds from admitting `batch` greedy tasks to the last one's end."""
    tasks = [Task(prompt=PROMPT, max_new=tokens, end_tokens=frozenset(), temperature=0.0) for _ in range(batch)]
    t0 = time.perf_counter()
    for t in tasks:
        s.admit(t)
    for t in tasks:
        while not isinstance(t.events.get(timeout=60), Done | Failed):
            pass
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 4])
    args = ap.parse_args()
    model = Model()
    print(f"{time.strftime('%Y-%m-%d')} · {platform.processor() or platform.machine()} · "
          f"{os.cpu_count()} cores · embedded model, {args.tokens} tokens per task, {args.rounds} rounds")
    vocab = model.config.vocab_size
    on = Scheduler(InstantEngine(vocab, 4), n_slots=4, profile_turns=256)
    off = Scheduler(InstantEngine(vocab, 4), n_slots=4, profile_turns=0)
    print("\n1. The cost per step (instant forward pass; real sampler, events and bookkeeping)\n")
    print("| batch | recording: µs/step | not recording: µs/step | added µs/step | real decode step µs | overhead |")
    print("|---|---|---|---|---|---|")
    try:
        for batch in args.batch:
            a, b = [], []
            for i in range(args.rounds * 4):
                pair = (on, off) if i % 2 == 0 else (off, on)
                got = {id(s): steps_alone(s, batch, args.tokens) for s in pair}
                a.append(got[id(on)])
                b.append(got[id(off)])
            added = statistics.median(a) - statistics.median(b)
            real = decode_step(model, batch)
            print(f"| {batch} | {statistics.median(a) * 1e6:.2f} | {statistics.median(b) * 1e6:.2f} | "
                  f"{added * 1e6:.2f} | {real * 1e6:.0f} | {100 * added / real:.2f}% |")
    finally:
        on.close()
        off.close()
    on = Scheduler(model.engine(n_slots=4), n_slots=4, profile_turns=256)
    off = Scheduler(model.engine(n_slots=4), n_slots=4, profile_turns=0)
    print("\n2. End to end on the embedded model\n")
    print("| batch | recording: median s | not recording: median s | ratio (median of rounds) | ratio range |")
    print("|---|---|---|---|---|")
    try:
        for batch in args.batch:
            run(on, batch, 8), run(off, batch, 8)  # warm both
            ratios, a, b = [], [], []
            for i in range(args.rounds):
                pair = (on, off) if i % 2 == 0 else (off, on)
                got = {id(s): run(s, batch, args.tokens) for s in pair}
                a.append(got[id(on)])
                b.append(got[id(off)])
                ratios.append(got[id(on)] / got[id(off)])
            print(f"| {batch} | {statistics.median(a):.4f} | {statistics.median(b):.4f} | "
                  f"{statistics.median(ratios):.4f} | {min(ratios):.3f}-{max(ratios):.3f} |")
    finally:
        on.close()
        off.close()


if __name__ == "__main__":
    main()
