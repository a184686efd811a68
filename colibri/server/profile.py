"""Where each turn's time goes: one `Turn` per admitted request, filled by the HTTP thread
(render, text pipeline, writes) and the engine thread (queue, prefill, decode steps, sampling,
logprob read-out), kept in a bounded ring the dashboard's Profiling page reads from
`GET /profile` (rule ops.profile.ring).

The engine thread only adds to floats of its own tasks' turns and the HTTP thread only to
its own fields, so no lock guards a turn; the ring takes one lock per finished turn. Decode
and sampling run batched: each task in a step is charged the step's whole time, which is the
wait it saw (the sum over concurrent turns can exceed the wall time). The engine thread keeps
running totals per step and each turn takes the difference between joining and leaving, so
recording costs the same per step whatever the batch.
"""
from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

#: The phases in the order a turn passes them (the page draws them so).
PHASES = ("render", "queue", "prefill", "decode", "sample", "logprobs", "text", "write")


@dataclass(slots=True)
class Turn:
    request_id: str = ""
    endpoint: str = ""
    stream: bool = False
    received: float = 0.0  # time.perf_counter() when the request arrived (0: unknown)
    started_at: float = 0.0  # wall clock (unix seconds) when it arrived
    admitting: float = 0.0  # when it asked for a slot: render ends, queue begins
    first_token: float = 0.0  # when its first token reached the HTTP thread
    ended: float = 0.0  # when the response's last byte was handed to the server
    render: float = 0.0
    queue: float = 0.0
    prefill: float = 0.0
    decode: float = 0.0
    sample: float = 0.0
    logprobs: float = 0.0
    text: float = 0.0
    write: float = 0.0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    steps: int = 0  # decode steps this turn took part in
    batch_sum: int = 0  # turns decoded together, summed over those steps
    outcome: str = ""  # completed | failed | cancelled; "" while the engine has not let go of it
    mark: tuple[float, float, int, int] | None = None  # the engine's running totals when it joined

    def doc(self) -> dict[str, Any]:
        """The JSON form (schemas/profile.response.json): seconds per phase, time to first
        token from arrival, and the decode rate: generated tokens over the time of the steps
        that made them (decode and sampling; another request's prefill between two steps is
        not counted)."""
        seconds = {p: round(getattr(self, p), 6) for p in PHASES}
        seconds["total"] = round(max(0.0, self.ended - self.received), 6) if self.received else None
        ttft = self.first_token - self.received if self.first_token and self.received else None
        busy = self.decode + self.sample
        rate = self.completion_tokens / busy if self.completion_tokens and busy > 0 else None
        return {"request_id": self.request_id, "endpoint": self.endpoint, "stream": self.stream,
                "outcome": self.outcome or "ending", "started_at": round(self.started_at, 3), "seconds": seconds,
                "ttft_seconds": None if ttft is None else round(ttft, 6),
                "tokens_per_second": None if rate is None else round(rate, 2),
                "tokens": {"prompt": self.prompt_tokens, "cached": self.cached_tokens,
                           "completion": self.completion_tokens},
                "decode_steps": self.steps,
                "mean_batch": round(self.batch_sum / self.steps, 3) if self.steps else None}


def arrived(request_id: str = "", endpoint: str = "") -> Turn:
    return Turn(request_id=request_id, endpoint=endpoint, received=time.perf_counter(), started_at=time.time())


class Ring:
    """The last `capacity` finished turns, oldest first; capacity 0 records nothing."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self.turns: deque[Turn] = deque(maxlen=max(capacity, 1))
        self.recorded = 0
        self.lock = threading.Lock()

    def add(self, turn: Turn) -> None:
        """The turn is over (its last byte handed to the server): keep it, once."""
        if turn.ended:
            return
        turn.ended = time.perf_counter()
        if self.capacity <= 0:
            return
        with self.lock:
            self.turns.append(turn)
            self.recorded += 1

    def doc(self) -> dict[str, Any]:
        with self.lock:
            turns = list(self.turns) if self.capacity > 0 else []
            recorded = self.recorded
        return {"capacity": self.capacity, "recorded": recorded, "phases": list(PHASES),
                "turns": [t.doc() for t in turns]}
