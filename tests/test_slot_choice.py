"""Rule ops.slot.choice on the scheduler itself: a request goes to the free slot whose cache
holds the longest prefix of its prompt, whatever slot its conversation hashes to."""
from __future__ import annotations

from colibri.model import Model
from colibri.server.scheduler import Scheduler, Task


def run(s: Scheduler, prompt: list[int], *, slot: int | None = None, prefer: int | None = None) -> Task:
    task = Task(prompt=prompt, max_new=3, end_tokens=frozenset(), temperature=0.0, slot=slot, prefer=prefer)
    s.admit(task)
    while task.events.get()[0] not in ("done", "error"):
        pass
    return task


def test_ops_slot_choice_longest_cached_prefix_beats_the_hash_slot():
    s = Scheduler(Model().engine(n_slots=3), n_slots=3)
    try:
        first = list(range(20, 60))
        run(s, first, slot=2)  # an earlier turn ran on slot 2 (say its hash slot was busy)
        held = list(s.history[2])
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
