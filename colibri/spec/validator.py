"""Request validation compiled from the rule tables, once per (endpoint, family, settings)."""
from __future__ import annotations

from typing import Any

from .checks import CompiledCheck, Context, Failure
from .paths import Location, resolve


class RequestValidator:
    """Runs an endpoint's compiled checks in spec order; the first failure is the answer."""

    def __init__(self, spec: Any, endpoint: str, family: str, settings: dict[str, Any]):
        fam = spec.families[family]
        self.endpoint = endpoint
        self.context = Context(family=fam.row, settings=dict(settings, family=family))
        self.checks: list[CompiledCheck] = spec.checks_for(endpoint)
        self.messages = {code: e.message for code, e in spec.errors.items()}
        # A check on a path under a top-level field finds nothing to test when the body lacks
        # that field (only a top-level `required` check fires on absence), so it can be
        # skipped without running it: most of an endpoint's checks concern optional fields
        # a given request does not send.
        self._plan = [(c, c.segments[0] if c.segments and c.segments[0] != "*"
                       and not (c.kind == "required" and len(c.segments) == 1) else None) for c in self.checks]

    def first_failure(self, body: dict[str, Any]) -> Failure | None:
        is_object = isinstance(body, dict)
        seen: dict[tuple[str, ...], list[Location]] = {}

        def find(doc: Any, segments: tuple[str, ...]) -> list[Location]:
            found = seen.get(segments)
            if found is None:
                found = seen[segments] = resolve(doc, segments)
            return found

        for check, top in self._plan:
            if top is not None and is_object and top not in body:
                continue
            failure = check.run(body, self.context, self.messages, find)
            if failure is not None:
                return failure
        return None
