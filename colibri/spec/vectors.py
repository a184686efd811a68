"""Test vectors: the explicit ones of each rule, and boundary vectors generated from its
checks. A generated refusal expects the first check of its rule that the value fails, so
an earlier rule catching it instead shows up as a failing vector (an ordering bug)."""
from __future__ import annotations

import copy
from typing import Any

from ..settings import VECTOR_SETTINGS, Settings
from .checks import KINDS, CompiledCheck, Context, condition_holds
from .model import Vector, deep_merge
from .paths import Location, delete_path, json_type, resolve, set_path

#: Test knobs a vector's `server` block may set besides the settings: busy slots, a closing
#: scheduler, an injected fault, a slowed engine (conformance/inprocess.py applies them).
TEST_KNOBS = frozenset({"busy", "busy_slots", "closing", "fault", "engine_delay"})
#: What a vector's `server` block may set: the settings marked `vector` in colibri/settings.py,
#: and the test knobs.
SERVER_KEYS = VECTOR_SETTINGS | TEST_KNOBS
#: Settings every vector assumes unless its `server` block says otherwise: the defaults of those
#: the rule tables' checks consult.
DEFAULT_SETTINGS: dict[str, Any] = Settings().validator_settings()


#: Stands for the served model's id in vectors: the target's model when the suite runs against
#: a server, the default setting elsewhere (validators, docs, diff).
MODEL = "@model"
#: Stands for a prompt too long to write in YAML; the suite's runner expands it.
LONG_PROMPT_PLACEHOLDER = "@long-prompt"


def expand_model(value: Any, model: str) -> Any:
    """`value` with every "@model" (whole strings, and inside paths) replaced by `model`."""
    if isinstance(value, str):
        return value.replace(MODEL, model) if MODEL in value else value
    if isinstance(value, list):
        return [expand_model(v, model) for v in value]
    if isinstance(value, dict):
        return {k: expand_model(v, model) for k, v in value.items()}
    return value


def request_for(spec: Any, vector: Vector, model: str | None = None) -> dict[str, Any] | None:
    """The body a vector sends: its request merged over the endpoint's minimal request, with
    the served model's id in place of "@model"."""
    if vector.raw_body is not None or vector.method != "POST":
        return None
    ep = spec.endpoints.get(vector.endpoint)
    base = (ep.minimal_request if ep and ep.minimal_request else {})
    if vector.request is None:
        body = copy.deepcopy(base)
    elif vector.replace:
        body = copy.deepcopy(vector.request)
    else:
        body = deep_merge(base, vector.request)
    return expand_model(body, model or DEFAULT_SETTINGS["model_id"])


def context_for(spec: Any, server: dict[str, Any] | None = None) -> Context:
    settings = dict(DEFAULT_SETTINGS, **(server or {}))
    fam = spec.families.get(settings["family"])
    return Context(family=fam.row if fam else {}, settings=settings)


def _first_failure(checks: list[CompiledCheck], body: dict[str, Any], ctx: Context) -> CompiledCheck | None:
    for c in checks:
        if c.run(body, ctx, {}) is not None:
            return c
    return None


def _generate(spec: Any, rule: Any, problems: list[tuple[Any, str]]) -> list[Vector]:
    """The boundary vectors of a rule's checks. A sample the check's own predicate judges
    otherwise than its sampler promised is a spec bug, reported in `problems`, never dropped."""
    out: list[Vector] = []
    seen: set[str] = set()
    rule_checks = [c for c in spec.compiled if c.rule_id == rule.id]
    ctx = context_for(spec)
    for chk in rule_checks:
        for endpoint in chk.endpoints:
            ep = spec.endpoints.get(endpoint)
            if not ep or not ep.minimal_request:
                continue
            same_rule = [c for c in rule_checks if c.applies_to(endpoint)]
            endpoint_checks = spec.checks_for(endpoint)
            for value, passes in _samples(chk, same_rule):
                body = expand_model(ep.minimal_request, DEFAULT_SETTINGS["model_id"])
                if chk.kind == "required":
                    concrete = delete_path(body, chk.segments)
                elif chk.kind == "keys":
                    concrete = ("x_unknown_field",) if chk.field == "$" else None
                    if concrete:
                        body["x_unknown_field"] = 1
                else:
                    concrete = set_path(body, chk.segments, value)
                if concrete is None:
                    continue
                if chk.when:
                    parents = resolve(body, chk.segments[:-1]) if chk.segments else [Location((), body, None)]
                    holder = parents[0].value if parents else None
                    if not condition_holds(chk.when, body, holder, ctx):
                        continue
                if (chk.run(body, ctx, {}) is None) != passes:
                    problems.append((rule, f"the {chk.kind} check on {chk.field} ({endpoint}): its boundary sampler "
                                           f"calls {value!r} {'valid' if passes else 'refused'}, its predicate "
                                           f"{'refuses' if passes else 'accepts'} it"))
                    continue
                failing = _first_failure(same_rule, body, ctx)
                contract = None
                if failing is None:
                    if _first_failure(endpoint_checks, body, ctx) is not None:
                        continue  # valid for this rule, but another rule needs more than the minimal request
                    expect: dict[str, Any] = {"status": 200}
                else:  # the rule refuses: the first of its checks the value fails says how
                    contract = failing.raw.get("contract")
                    if chk.kind == "type" and isinstance(value, float) and value.is_integer():
                        contract = "strict"  # whether 1.0 is an integer is this project's call
                    failure = failing.run(body, ctx, {})
                    assert failure is not None
                    err = spec.errors.get(failing.error)
                    expect = {"status": err.status if err else 400, "code": failing.error, "param": failure.param}
                name = f"gen-{endpoint}-{chk.kind}-{_slug(value, concrete)}"
                if name in seen:
                    continue
                seen.add(name)
                if body.get("model") == DEFAULT_SETTINGS["model_id"] and ep.minimal_request.get("model") == MODEL:
                    body["model"] = MODEL  # the served model, whichever the target serves
                out.append(Vector(rule_id=rule.id, name=name, endpoint=endpoint, expect=expect, request=body,
                                  generated=True, invalid=not passes, replace=True, contract=contract))
    return out


def _samples(chk: CompiledCheck, same_rule: list[CompiledCheck]):
    if chk.kind in ("required", "keys"):
        return [(None, False)]
    meta = dict(chk.raw)
    earlier = same_rule[: same_rule.index(chk)] if chk in same_rule else []
    if chk.kind == "enum":
        meta["_earlier_values"] = [v for c in earlier if c.field == chk.field and c.kind == "enum"
                                   for v in c.arg if not any(v == a for a in chk.arg)]
    if chk.kind == "length":
        types = [t for c in earlier if c.field == chk.field and c.kind == "type" for t in c.arg]
        meta["_is_array"] = "array" in types or not types
        if "string" in types and "array" in types:
            meta["_is_array"] = True
    return list(KINDS[chk.kind][1](chk.arg, meta))


def _slug(value: Any, concrete: tuple) -> str:
    where = ".".join(str(p) for p in concrete).replace("_", "-").lower()
    t = json_type(value)
    if t in ("integer", "number"):
        v = str(value).replace("-", "m").replace(".", "p")
    elif t == "string":
        v = "str" + str(len(value))
    elif t == "array":
        v = f"arr{len(value)}"
    else:
        v = t
    return f"{where}-{v}".strip("-")


def attach_generated(spec: Any, schemas_root: Any = None) -> list[tuple[Any, str]]:
    """Add the generated boundary vectors; each is marked invalid exactly when its body breaks
    the endpoint's request schema."""
    from ..schemas import all_schemas, validator

    problems: list[tuple[Any, str]] = []
    available = all_schemas(schemas_root)
    validators: dict[str, Any] = {}
    for rule in spec.rules:
        for v in _generate(spec, rule, problems):
            ep = spec.endpoints.get(v.endpoint)
            if ep and ep.schema and ep.schema in available:
                if ep.schema not in validators:
                    validators[ep.schema] = validator(ep.schema, schemas_root)
                val = validators[ep.schema]
                v.invalid = not val.is_valid(v.request)
            rule.vectors.append(v)
    return problems


__all__ = ["DEFAULT_SETTINGS", "MODEL", "SERVER_KEYS", "TEST_KNOBS", "attach_generated", "context_for", "expand_model",
           "request_for"]
