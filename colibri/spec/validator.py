"""Request validation compiled from the rule tables, once per (endpoint, family, settings)."""
from __future__ import annotations

from typing import Any

from .checks import CompiledCheck, Context, Failure


class RequestValidator:
    """Runs an endpoint's compiled checks in spec order; the first failure is the answer."""

    def __init__(self, spec: Any, endpoint: str, family: str, settings: dict[str, Any]):
        fam = spec.families[family]
        self.endpoint = endpoint
        self.context = Context(family=fam.row, settings=dict(settings, family=family))
        self.checks: list[CompiledCheck] = spec.checks_for(endpoint)
        self.messages = {code: e.message for code, e in spec.errors.items()}

    def first_failure(self, body: dict[str, Any]) -> Failure | None:
        for check in self.checks:
            failure = check.run(body, self.context, self.messages)
            if failure is not None:
                return failure
        return None
