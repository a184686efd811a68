"""What the Locust users of one process share (state.py has no Locust import, so the tests can
build one): the plan and the order it is sent in, the judge, where to send, the records not yet
reported, and whether the load is ending."""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

from .judge import Judge
from .plan import Plan


@dataclass
class Shared:
    """What the users of one process share: the plan, the judge, where to send, the records."""

    plan: Plan
    judge: Judge
    base_url: str
    headers: dict[str, str]
    model: str
    deadline: float
    disconnect_every: int = 10
    records: list[dict[str, Any]] = field(default_factory=list)
    stopping: bool = False
    inflight: int = 0
    sent: int = 0
    counter: Any = field(default_factory=itertools.count)
    items_sent: Any = field(default_factory=itertools.count)

    def next_item(self) -> Any:
        """The next plan item in turn, or None for a disconnecting request. Items have their own
        count, so a plan whose length is a multiple of K still sends every item."""
        if self.disconnect_every and (next(self.counter) + 1) % self.disconnect_every == 0:
            return None
        return self.plan.items[next(self.items_sent) % len(self.plan.items)]

    def drain(self) -> list[dict[str, Any]]:
        out, self.records = self.records, []
        return out

    @property
    def done(self) -> bool:
        return self.stopping and self.inflight == 0
