"""The spec as typed objects: rules, vectors, errors, families, endpoints."""
from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ErrorCode:
    code: str
    status: int
    type: str
    anthropic_type: str
    message: str
    description: str
    headers: dict[str, str] = field(default_factory=dict)


def error_codes(rows: list[dict[str, Any]]) -> dict[str, ErrorCode]:
    """The rows of errors.yaml by code (a row without a message of its own says its description)."""
    return {e["code"]: ErrorCode(code=e["code"], status=e["status"], type=e["type"], anthropic_type=e["anthropic_type"],
                                 message=e.get("message", e["description"]), description=e["description"],
                                 headers=e.get("headers", {}))
            for e in rows}


@dataclass(frozen=True)
class Family:
    id: str
    title: str
    row: dict[str, Any]


@dataclass(frozen=True)
class Endpoint:
    name: str
    method: str
    path: str
    envelope: str
    minimal_request: dict[str, Any] | None
    schema: str | None
    response_schema: str | None
    description: str
    contract: str | None = None  # the profile holding the official contract here (default: by envelope)


@dataclass
class Vector:
    rule_id: str
    name: str
    endpoint: str
    expect: dict[str, Any]
    request: dict[str, Any] | None = None
    method: str = "POST"
    path: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    raw_body: bytes | None = None
    server: dict[str, Any] = field(default_factory=dict)
    invalid: bool = False
    generated: bool = False
    line: int | None = None
    replace: bool = False
    #: None: the rule's official contract and strict alike; "strict": this project's only
    contract: str | None = None

    @property
    def id(self) -> str:
        return f"{self.rule_id}[{self.name}]"

    @property
    def refused(self) -> bool:
        return int(self.expect["status"]) >= 400


@dataclass
class Rule:
    id: str
    title: str
    level: str
    profiles: list[str]
    kind: str
    modes: list[str]
    endpoints: list[str]
    body: str
    source: list[str]
    topic: str
    file: str
    line: int | None
    raw: dict[str, Any]
    families: list[str] | None = None
    trials: int = 1
    checks: list[dict[str, Any]] = field(default_factory=list)
    vectors: list[Vector] = field(default_factory=list)
    #: named check -> endpoints: an invariant of every exchange this rule states (spec field `invariant`)
    invariant: dict[str, list[str]] = field(default_factory=dict)

    @property
    def segments(self) -> list[str]:
        return self.id.split(".")


@dataclass
class Topic:
    name: str
    title: str
    description: str
    file: str
    rules: list[Rule]


def deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """Merge `over` onto a copy of `base`: objects merge, anything else replaces;
    a value `{"$delete": true}` removes the key."""
    out = copy.deepcopy(base)
    for k, v in over.items():
        if isinstance(v, dict) and v.get("$delete") is True:
            out.pop(k, None)
        elif isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = deep_merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out
