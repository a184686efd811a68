"""Turning a spec vector into an exchange with a target, and judging it."""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from colibri.spec.vectors import request_for

from .checks import LIVE_ONLY, CheckContext, CheckFailure, NotApplicable, counters, evaluate
from .exchange import Exchange

#: Placeholders vectors use for inputs too large to write in YAML.
LONG_PROMPT = "Repeat exactly: " + "lorem ipsum dolor " * 1200
OVERSIZE = b'{"model": "colibri-tiny", "prompt": "' + b"x" * (4 * 1024 * 1024) + b'"}'


def _expand(value: Any) -> Any:
    if value == "@long-prompt":
        return LONG_PROMPT
    if isinstance(value, list):
        return [_expand(v) for v in value]
    if isinstance(value, dict):
        return {k: _expand(v) for k, v in value.items()}
    return value


@dataclass
class Prepared:
    method: str
    path: str
    headers: dict[str, str]
    raw: bytes | None
    body: dict[str, Any] | None


def prepare(spec: Any, vector: Any) -> Prepared:
    ep = spec.endpoints[vector.endpoint]
    method = vector.method
    path = vector.path or ep.path
    body = request_for(spec, vector)
    if body is not None:
        body = _expand(body)
    raw: bytes | None
    if vector.raw_body is not None:
        raw = OVERSIZE if vector.raw_body == b"@oversize" else vector.raw_body
    elif body is not None:
        raw = json.dumps(body, ensure_ascii=False).encode()
    elif method == "POST":
        raw = json.dumps(vector.request or {}).encode()
    else:
        raw = None
    return Prepared(method, path, dict(vector.headers), raw, body)


@dataclass
class Result:
    outcome: str  # PASS | FAIL | NON-STRICT | INCONCLUSIVE | SKIPPED | ERROR
    exchange: Exchange | None
    failure: CheckFailure | None = None
    reason: str = ""


def run_vector(spec: Any, rule: Any, vector: Any, target: Any) -> Result:
    live = set(vector.expect.get("checks", [])) & LIVE_ONLY
    if live and not getattr(target, "live", False):
        return Result("SKIPPED", None, reason=f"needs a live server process: {', '.join(sorted(live))}")
    p = prepare(spec, vector)
    before: dict[str, Any] = {}
    if "metrics_unchanged" in vector.expect.get("checks", []):
        before["counters"] = counters(target)
    try:
        ex = target.send(p.method, p.path, p.raw, p.headers)
    except Exception as e:  # transport faults are the harness's, not the server's
        return Result("ERROR", None, reason=f"{type(e).__name__}: {e}")
    ctx = CheckContext(spec, vector, ex, p.body, target, before)
    try:
        evaluate(ctx)
    except NotApplicable as e:
        return Result("INCONCLUSIVE" if rule.kind == "behaviour" else "SKIPPED", ex, reason=str(e))
    except CheckFailure as f:
        if rule.level == "SHOULD":
            return Result("NON-STRICT", ex, f)
        return Result("FAIL", ex, f)
    return Result("PASS", ex)
