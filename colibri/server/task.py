"""What an HTTP thread hands the engine thread (`Task`) and what comes back on the task's
queue: typed events, one class per kind, so a reader matches on the type and never on a
string with a dict beside it.

The engine thread puts, in order: `Accepted` (the prompt is in the slot) or `Failed`; then
for a generation any number of `TokenRecord`s and one `Done` or `Failed`; for a scoring task
(/v1/systemone) one `Scored` or `Failed`. A task whose client left gets nothing more.
"""
from __future__ import annotations

import queue
from dataclasses import dataclass, field
from typing import Any

from .profile import Turn


@dataclass(slots=True)
class TokenRecord:
    """One generated (or, for echo, prompt) token, with its logprob and top alternatives
    when the request asked for them: the event a generation sends per token."""

    token: int
    logprob: float | None = None
    top: list[tuple[int, float]] = field(default_factory=list)


@dataclass(slots=True)
class Accepted:
    """The engine has prefilled the prompt: the response can be committed."""

    prompt_tokens: int
    reused: int  # prompt tokens the slot's KV cache already held
    queue_wait: float
    echo: list[TokenRecord]  # the prompt's own records (completions echo with logprobs), else empty


@dataclass(slots=True)
class Done:
    """The generation ended: `reason` is stop (an end token, or the consumer stopped it) or length."""

    reason: str


@dataclass(slots=True)
class Failed:
    """The engine could not go on with this task (an ApiError, or an engine fault)."""

    error: BaseException


@dataclass(slots=True)
class Scored:
    """A scoring task's label logits, one row per question, in request order."""

    rows: list[Any]
    reused: int
    prompt_tokens: int


Event = Accepted | TokenRecord | Done | Failed | Scored


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
    events: queue.SimpleQueue[Event] = field(default_factory=queue.SimpleQueue)  # the C queue: cheap per token
    stop_requested: bool = False
    cancelled: bool = False
    client_gone: Any = None  # callable polled while the task waits for a slot
    request_id: str = ""  # for the log: which request an engine fault belongs to
    # a scoring task (/v1/systemone): (prompt, label ids) pairs prefilled in turn into the slot,
    # the label logits of each last position reported in one Scored event; nothing is sampled
    scoring: list[tuple[list[int], list[int]]] | None = None
    # which conversation the prompt belongs to (slots.conversation_digest; the state's for a
    # scoring task): with --prefix-reuse conversation, only a slot last used by the same one is reused
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


class ClientGone(Exception):
    """The client went away while its request was queued or generating."""
