"""What every check is made of: the context it reads, the three ways it ends (CheckFailure,
NotApplicable, Unsupported), and the data events of a response that must be a stream.

A check is a plain function over a `CheckContext`; it raises `CheckFailure` carrying what
was expected and what was seen, or returns."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from ..exchange import Exchange, model_of


class CheckFailure(Exception):
    def __init__(self, check: str, expected: Any, actual: Any):
        self.check, self.expected, self.actual = check, expected, actual
        super().__init__(f"{check}: expected {expected!r}, got {actual!r}")


class NotApplicable(Exception):
    """The check needs something this target or run cannot give (a live socket, say), or the
    model did not produce what a behaviour rule needs."""


class Unsupported(NotApplicable):
    """The target does not serve what the rule is about (no /metrics, say): UNSUPPORTED."""


@dataclass
class CheckContext:
    spec: Any
    vector: Any
    exchange: Exchange
    body: dict[str, Any] | None
    target: Any
    before: dict[str, Any] = field(default_factory=dict)
    expect: dict[str, Any] = field(default_factory=dict)  # the vector's, under the run's contract
    strict: bool = True  # judged by this project's stricter contract, not only the official one

    def __post_init__(self) -> None:
        if not self.expect:
            self.expect = self.vector.expect

    @property
    def endpoint(self) -> str:
        return str(self.vector.endpoint)

    def resend(self, body: dict[str, Any]) -> Exchange:
        ep = self.spec.endpoints[self.endpoint]
        return self.target.send("POST", ep.path, json.dumps(body).encode(), self.vector.headers)


def data_events(ex: Exchange) -> list[dict[str, Any]]:
    return [e.json() for e in ex.events() if e.data != "[DONE]"]


def stream_data(ctx: CheckContext, check: str) -> list[dict[str, Any]]:
    """The data events of a response that must be a stream: a FAIL naming what came instead."""
    ex = ctx.exchange
    if not ex.is_sse:
        raise CheckFailure(check, "text/event-stream (the request asked for a stream)",
                           f"{ex.header('content-type')}: {ex.text(120)}")
    try:
        return data_events(ex)
    except ValueError as e:
        raise CheckFailure(check, "every data payload JSON (or [DONE])", str(e)) from None


def target_model(ctx: CheckContext) -> str:
    return model_of(ctx.target)
