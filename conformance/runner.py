"""Turning a spec vector into an exchange with a target, and judging it.

Nothing a target sends, and nothing a check does with it, can stop a run: a broken transfer
or an exception in the harness becomes the vector's ERROR with what was exchanged as
evidence; a body that should be JSON and is not is the server's FAIL."""
from __future__ import annotations

import json
import traceback
from dataclasses import dataclass, field
from typing import Any

from colibri.paths import EMBEDDED_MODEL_ID
from colibri.spec.model import Vector, deep_merge
from colibri.spec.vectors import LONG_PROMPT_PLACEHOLDER, MODEL, expand_model, request_for

from .checks import (
    LIVE_ONLY,
    CheckContext,
    CheckFailure,
    NotApplicable,
    Unsupported,
    evaluate,
    invariants,
    live_only_reason,
)
from .checks.operations import counters
from .exchange import BodyNotJson, Exchange, TransportError, model_of

#: Placeholders vectors use for inputs too large to write in YAML.
LONG_PROMPT = "Repeat exactly: " + "lorem ipsum dolor " * 1200
RAW_BODIES = {
    b"@oversize": b'{"model": "@model", "prompt": "' + b"x" * (4 * 1024 * 1024) + b'"}',
    b"@deep-array": b"[" * 3000 + b"]" * 3000,
    # a valid request whose metadata nests 100 objects deep
    b"@deep-object": (b'{"model": "@model", "messages": [{"role": "user", "content": "hi"}], "metadata": '
                      + b'{"a": ' * 100 + b"1" + b"}" * 100 + b"}"),
}


def _expand(value: Any) -> Any:
    if value == LONG_PROMPT_PLACEHOLDER:
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


def prepare(spec: Any, vector: Vector, model: str | None = None) -> Prepared:
    model = model or EMBEDDED_MODEL_ID
    ep = spec.endpoints[vector.endpoint]
    method = vector.method
    path = expand_model(vector.path or ep.path, model)
    body = request_for(spec, vector, model)
    if body is not None:
        body = _expand(body)
    raw: bytes | None
    if vector.raw_body is not None:
        raw = RAW_BODIES.get(vector.raw_body, vector.raw_body)
        raw = raw.replace(MODEL.encode(), json.dumps(model)[1:-1].encode())
    elif body is not None:
        raw = json.dumps(body, ensure_ascii=False).encode()
    elif method == "POST":
        raw = json.dumps(vector.request or {}).encode()
    else:
        raw = None
    return Prepared(method, path, dict(vector.headers), raw, body)


def effective_expect(spec: Any, vector: Vector, strict: bool, model: str) -> dict[str, Any]:
    """The expectations a vector holds under the run's contract.

    Under the official contracts (profiles openai/anthropic without strict) a refusal is judged
    by its status and envelope: the OpenAI API's own `code` strings and `param` conventions
    differ from this project's table, and a server need not copy ours. Anthropic's error
    `type` is part of its contract (one type per status) and stays. `strict:` blocks apply
    only under the strict contract."""
    e = {k: v for k, v in vector.expect.items() if k != "strict"}
    if strict:
        e = deep_merge(e, {k: v for k, v in (vector.expect.get("strict") or {}).items() if k != "checks"})
        e["checks"] = list(e.get("checks", [])) + list((vector.expect.get("strict") or {}).get("checks", []))
    else:
        e.pop("code", None)
        e.pop("param", None)
        if spec.endpoints[vector.endpoint].envelope != "anthropic":
            e.pop("type", None)
    return expand_model(e, model)


@dataclass
class Result:
    outcome: str  # PASS | FAIL | NON-STRICT | INCONCLUSIVE | SKIPPED | ERROR
    exchange: Exchange | None
    failure: CheckFailure | None = None
    reason: str = ""
    #: failures of the always-on invariants, each owed to the rule that states it
    invariant_failures: list[tuple[str, CheckFailure]] = field(default_factory=list)


def _harness_error(e: BaseException) -> str:
    frame = traceback.extract_tb(e.__traceback__)[-1] if e.__traceback__ else None
    where = f" (at {frame.name}, {frame.filename.rsplit('/', 1)[-1]}:{frame.lineno})" if frame else ""
    return f"{type(e).__name__}: {e}{where}"


#: The official profile whose contract covers an endpoint's envelope.
OFFICIAL_FOR_ENVELOPE = {"openai": "openai", "anthropic": "anthropic"}


def official_profile(endpoint: Any) -> str | None:
    """The profile holding the official contract on an endpoint: its own (System One's), else
    the one of its error envelope."""
    return endpoint.contract or OFFICIAL_FOR_ENVELOPE.get(endpoint.envelope)


def official_skip(spec: Any, rule: Any, vector: Vector, profiles: Any) -> str | None:
    """Why a vector does not run under the official contracts (a non-strict run), or None.

    A rule may be official for one API and this project's own for another: `[strict,
    anthropic]` over chat and messages holds Anthropic's contract on /v1/messages only."""
    if vector.contract == "strict":
        return "holds this project's stricter contract only (run with --profile strict)"
    official = official_profile(spec.endpoints[vector.endpoint])
    if official not in rule.profiles:
        return f"on {spec.endpoints[vector.endpoint].path} this rule is this project's contract only (--profile strict)"
    if profiles is not None and official not in profiles:
        return f"the {official} profile is not selected"
    return None


def run_vector(spec: Any, rule: Any, vector: Vector, target: Any, strict: bool = True,
               profiles: Any = None) -> Result:
    if not strict:
        why = official_skip(spec, rule, vector, profiles)
        if why:
            return Result("SKIPPED", None, reason=why)
    live = set(vector.expect.get("checks", [])) & LIVE_ONLY
    if live and not getattr(target, "live", False):
        return Result("SKIPPED", None, reason=live_only_reason(live))
    model = model_of(target)
    try:
        p = prepare(spec, vector, model)
        expect = effective_expect(spec, vector, strict, model)
    except Exception as e:  # noqa: BLE001 - a harness bug is reported on its vector, never fatal
        return Result("ERROR", None, reason="harness: " + _harness_error(e))
    before: dict[str, Any] = {}
    key = getattr(target, "api_key", None)
    auth_vector = "api_key" in vector.server and key
    if auth_vector:  # the target's own key stands in for the vector's; its default auth is left out
        p.headers = {k: v.replace(vector.server["api_key"], str(key)) for k, v in p.headers.items()}
    try:
        if "metrics_unchanged" in expect.get("checks", []):
            before["counters"] = counters(target, spec.metrics)
        ex = target.send(p.method, p.path, p.raw, p.headers, **({"default_auth": False} if auth_vector else {}))
    except TransportError as e:
        return Result("ERROR", e.exchange, reason=f"transport: {e}")
    except Exception as e:  # noqa: BLE001
        return Result("ERROR", None, reason="transport: " + _harness_error(e))
    ctx = CheckContext(spec, vector, ex, p.body, target, before, expect=expect, strict=strict)
    res = _judge(rule, ctx)
    try:
        res.invariant_failures = invariants(ctx)
    except Exception as e:  # noqa: BLE001 - a harness bug is reported on its vector, never fatal
        return Result("ERROR", ex, reason="harness (invariants): " + _harness_error(e))
    return res


def _judge(rule: Any, ctx: CheckContext) -> Result:
    ex = ctx.exchange
    try:
        evaluate(ctx)
    except Unsupported as e:  # the target does not serve what the check needs (a parser, /metrics)
        return Result("UNSUPPORTED", ex, reason=str(e))
    except NotApplicable as e:
        return Result("INCONCLUSIVE" if rule.kind == "behaviour" else "SKIPPED", ex, reason=str(e))
    except CheckFailure as f:
        return Result("NON-STRICT" if rule.level == "SHOULD" else "FAIL", ex, f)
    except BodyNotJson as e:
        return Result("NON-STRICT" if rule.level == "SHOULD" else "FAIL", ex,
                      CheckFailure("json body", "a JSON body", str(e)))
    except TransportError as e:  # a check's own follow-up request broke off
        return Result("ERROR", e.exchange, reason=f"transport (follow-up request): {e}")
    except Exception as e:  # noqa: BLE001
        return Result("ERROR", ex, reason="harness: " + _harness_error(e))
    return Result("PASS", ex)
