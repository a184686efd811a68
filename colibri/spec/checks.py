"""Field checks compiled from the rule tables: a table of small check kinds, like
jsonschema's keyword table. Each kind is a predicate over one located value plus a
generator of boundary values; an unknown kind is a load-time error.
"""
from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from dataclasses import field as dc_field
from typing import Any

from .paths import MISSING, Location, get, has_type, json_type, parse, resolve, same, text_of, truthy

MODIFIERS = {"field", "endpoints", "error", "param", "null", "when", "message", "contract"}


class SpecError(Exception):
    """A spec table that cannot be compiled (unknown kind, bad argument)."""


@dataclass
class Context:
    """What a check may consult besides the body: the served family's row and server settings."""

    family: dict[str, Any]
    settings: dict[str, Any]

    def setting(self, name: str) -> Any:
        return self.settings.get(name)


@dataclass
class Failure:
    rule_id: str
    code: str
    param: str | None
    message: str
    value: Any = None


def has_capability(family: dict[str, Any], name: str) -> bool:
    """A family capability is on when its value is truthy and not the word "none"."""
    v = family.get(name)
    return bool(v) and v != "none"


def is_continuation(body: Any, ctx: Context) -> bool:
    msgs = body.get("messages") if isinstance(body, dict) else None
    return (isinstance(msgs, list) and bool(msgs) and isinstance(msgs[-1], dict)
            and msgs[-1].get("role") == "assistant" and bool(ctx.setting("continue_assistant"))
            and has_capability(ctx.family, "continuation"))


def condition_holds(cond: dict[str, Any], body: Any, parent: Any, ctx: Context) -> bool:
    """Every key of the condition must hold (see `condition` in schemas/spec.schema.json)."""
    value: Any = MISSING
    if "field" in cond:
        f = cond["field"]
        value = get(parent, f[2:]) if f.startswith("@.") else get(body, f)
    if "equals" in cond and not (value is not MISSING and same(value, cond["equals"])):
        return False
    if "not_equals" in cond and value is not MISSING and same(value, cond["not_equals"]):
        return False
    if "in" in cond and not any(value is not MISSING and same(value, x) for x in cond["in"]):
        return False
    if "not_in" in cond and any(value is not MISSING and same(value, x) for x in cond["not_in"]):
        return False
    if "present" in cond and (value is not MISSING and value is not None) != cond["present"]:
        return False
    if "truthy" in cond and truthy(value) != cond["truthy"]:
        return False
    if "type_is" in cond and (value is MISSING or json_type(value) != cond["type_is"]
                              and not (cond["type_is"] == "number" and json_type(value) == "integer")):
        return False
    if "capability" in cond and has_capability(ctx.family, cond["capability"]) != cond.get("is", True):
        return False
    if "server" in cond and not ctx.setting(cond["server"]):
        return False
    if "continuation" in cond and is_continuation(body, ctx) != cond["continuation"]:
        return False
    if set(cond) == {"field"}:
        return value is not MISSING and value is not None
    return True


# ------------------------------------------------------------------ the kind table
# Each kind: predicate(arg, value, loc, body, ctx) -> bool (True = passes), and
# samples(arg, check) -> candidate values for boundary vectors (value, passes-this-check).

Predicate = Callable[[Any, Any, Location, Any, Context], bool]
Sampler = Callable[[Any, dict[str, Any]], Iterable[tuple[Any, bool]]]

_WRONG_TYPE = [("string", "x"), ("boolean", True), ("object", {}), ("array", []), ("number", 0.5), ("integer", 7)]


def _type_ok(arg, v, loc, body, ctx):
    return has_type(v, arg)


def _type_samples(arg, chk):
    for _t, v in _WRONG_TYPE:
        if not has_type(v, arg):
            yield v, False
            break
    if "integer" in arg and "number" not in arg:
        yield 1.0, False  # an integral value written as a number: not an integer (req.integer.literal)


def _num(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _range_ok(arg, v, loc, body, ctx):
    if not _num(v):
        return True  # the type check owns non-numbers
    if "min" in arg and v < arg["min"]:
        return False
    if "max" in arg and v > arg["max"]:
        return False
    if "exclusive_min" in arg and v <= arg["exclusive_min"]:
        return False
    if "exclusive_max" in arg and v >= arg["exclusive_max"]:
        return False
    limit = arg.get("exclusive_max_setting")
    return not (limit and ctx.setting(limit) is not None and v >= ctx.setting(limit))


def _range_samples(arg, chk):
    step = chk.get("_step", 0.01)
    for k, inside, outside in (("min", 0, -step), ("max", 0, step)):
        if k in arg:
            yield arg[k] + inside, True
            yield arg[k] + outside, False
    if "exclusive_min" in arg:
        yield arg["exclusive_min"], False
        yield arg["exclusive_min"] + step, True
    if "exclusive_max" in arg:
        yield arg["exclusive_max"], False
        yield arg["exclusive_max"] - step, True


def _float32_ok(arg, v, loc, body, ctx):
    """The value means the same to the engine, which samples with 32-bit floats: a non-zero
    value does not round to zero (1e-46) and a finite one does not overflow (1e39)."""
    if not _num(v) or v == 0:
        return True
    return 1.1754943508222875e-38 <= abs(v) <= 3.4028234663852886e38


def _enum_ok(arg, v, loc, body, ctx):
    return any(same(v, a) for a in arg)


def _enum_samples(arg, chk):
    for v in chk.get("_earlier_values", []):
        yield v, False
    yield "zz-not-a-value", False
    yield arg[-1], True  # inclusive: the last allowed value (the first is often the default)


def _length_ok(arg, v, loc, body, ctx):
    if not isinstance(v, (list, str)):
        return True
    return arg.get("min", 0) <= len(v) <= arg.get("max", math.inf)


def _length_samples(arg, chk):
    item = chk.get("_item", "x")

    def of(n: int) -> Any:
        return [item] * n if chk.get("_is_array") else "x" * n

    if arg.get("min", 0) > 0:
        yield of(arg["min"] - 1), False
    if "max" in arg and arg["max"] < 100:
        yield of(arg["max"] + 1), False
        yield of(arg["max"]), True  # inclusive


def _entries_ok(arg, v, loc, body, ctx):
    """How many entries an object has (a map of names: /v1/systemone's questions)."""
    if not isinstance(v, dict):
        return True
    return arg.get("min", 0) <= len(v) <= arg.get("max", math.inf)


def _refuse_ok(arg, v, loc, body, ctx):
    return any(same(v, a) for a in arg.get("allow", []))


def _refuse_samples(arg, chk):
    for v in (2, "x", {"a": 1}, [1], True, 0.5):
        if not any(same(v, a) for a in arg.get("allow", [])):
            yield v, False


def _requires_ok(arg, v, loc, body, ctx):
    return not truthy(v) or condition_holds(arg, body, loc.parent, ctx)


def _conflicts_ok(arg, v, loc, body, ctx):
    return not truthy(v) or not condition_holds(arg, body, loc.parent, ctx)


def _member_ok(arg, v, loc, body, ctx):
    if not isinstance(v, str):
        return True
    return any(loc2.value == v for loc2 in resolve(body, parse(arg)))


def _nonblank_ok(arg, v, loc, body, ctx):
    t = text_of(v)
    return t is None or bool(t.strip())


def _no_trailing_ok(arg, v, loc, body, ctx):
    t = text_of(v)
    return t is None or t == t.rstrip()


def _no_nul_ok(arg, v, loc, body, ctx):
    t = text_of(v)
    return t is None or "\x00" not in t


def _json_text_ok(arg, v, loc, body, ctx):
    if not isinstance(v, str):
        return True
    try:
        json.loads(v)
    except ValueError:
        return False
    return True


def _pattern_ok(arg, v, loc, body, ctx):
    return not isinstance(v, str) or re.fullmatch(arg, v) is not None


def _capability_ok(arg, v, loc, body, ctx):
    return not truthy(v) or has_capability(ctx.family, arg)


def _keys_ok(arg, v, loc, body, ctx):
    return not isinstance(v, dict) or all(k in arg for k in v)


def _equals_setting_ok(arg, v, loc, body, ctx):
    return not isinstance(v, str) or v == ctx.setting(arg)


def _family_enum_ok(arg, v, loc, body, ctx):
    return not isinstance(v, str) or v in (ctx.family.get(arg) or [])


def _forbidden_ok(arg, v, loc, body, ctx):
    return False  # reached only when the field is present


def _none(arg, chk):
    return ()


KINDS: dict[str, tuple[Predicate, Sampler]] = {
    "type": (_type_ok, _type_samples),
    "range": (_range_ok, _range_samples),
    "enum": (_enum_ok, _enum_samples),
    "float32": (_float32_ok, lambda a, c: [(1e-46, False), (1.2e-38, True)]),
    "length": (_length_ok, _length_samples),
    "entries": (_entries_ok, _none),
    "refuse": (_refuse_ok, _refuse_samples),
    "requires": (_requires_ok, _none),
    "conflicts": (_conflicts_ok, _none),
    "member_of": (_member_ok, _none),
    "nonblank": (_nonblank_ok, lambda a, c: [("   ", False)]),
    "no_trailing_space": (_no_trailing_ok, lambda a, c: [("text ", False)]),
    "no_nul": (_no_nul_ok, lambda a, c: [("a\x00b", False)]),
    "json_text": (_json_text_ok, lambda a, c: [("{not json", False)]),
    "pattern": (_pattern_ok, lambda a, c: [("has space!", False)]),
    "capability": (_capability_ok, _none),
    "keys": (_keys_ok, _none),
    "equals_setting": (_equals_setting_ok, lambda a, c: [("not-a-served-model", False)]),
    "family_enum": (_family_enum_ok, _none),
    "forbidden": (_forbidden_ok, lambda a, c: [("x", False)]),
    "required": (lambda *a: True, _none),  # handled on absence, see CompiledCheck.run
}


@dataclass
class CompiledCheck:
    rule_id: str
    kind: str
    arg: Any
    field: str
    segments: tuple[str, ...]
    error: str
    endpoints: list[str]
    param: str | None = None
    null: str = "absent"
    when: dict[str, Any] | None = None
    message: str | None = None
    raw: dict[str, Any] = dc_field(default_factory=dict)

    def applies_to(self, endpoint: str) -> bool:
        return endpoint in self.endpoints

    def _describe(self, param: str | None, value: Any) -> str | None:
        """A message that says what was wanted, for the kinds whose argument says it."""
        shown = json.dumps(value, ensure_ascii=False)
        shown = shown if len(shown) <= 60 else shown[:57] + "..."
        if self.kind == "type":
            article = {"integer": "an integer", "array": "an array", "object": "an object"}
            wanted = " or ".join(article.get(a, f"a {a}") for a in self.arg)
            return f"'{param}' must be {wanted}, not {article.get(json_type(value), 'a ' + json_type(value))}."
        if self.kind == "float32":
            return f"'{param}' must be 0 or a magnitude between 1.2e-38 and 3.4e38 (a 32-bit float), not {shown}."
        if self.kind == "range":
            lo = (f">= {self.arg['min']}" if "min" in self.arg else
                  f"> {self.arg['exclusive_min']}" if "exclusive_min" in self.arg else None)
            hi = (f"<= {self.arg['max']}" if "max" in self.arg else
                  f"< {self.arg['exclusive_max']}" if "exclusive_max" in self.arg else
                  f"below the server's {self.arg['exclusive_max_setting']}" if "exclusive_max_setting" in self.arg
                  else None)
            return f"'{param}' must be {' and '.join(x for x in (lo, hi) if x)} (got {shown})."
        if self.kind == "enum":
            return f"'{param}' must be one of {', '.join(json.dumps(a) for a in self.arg)} (got {shown})."
        if self.kind == "length":
            unit = "characters" if isinstance(value, str) else "items"
            got = len(value) if isinstance(value, (list, str)) else shown
            lo, hi = self.arg.get("min", 0), self.arg.get("max")
            bounds = f"between {lo} and {hi}" if hi is not None else f"at least {lo}"
            return f"'{param}' must hold {bounds} {unit} (got {got})."
        if self.kind == "required":
            return f"Missing required parameter '{param}'."
        return None

    def _fail(self, loc_path: tuple, value: Any, messages: dict[str, str]) -> Failure:
        param = self.param or (".".join(str(p) for p in loc_path) if loc_path else None)
        if not self.message and (described := self._describe(param, value)):
            return Failure(self.rule_id, self.error, param, described, value)
        template = self.message or messages.get(self.error, "Invalid request.")
        fmt = {"param": param, "value": value, "expected": " or ".join(self.arg) if self.kind == "type" else ""}
        try:
            msg = template.format(**fmt)
        except (KeyError, IndexError, ValueError):
            msg = template
        return Failure(self.rule_id, self.error, param, msg, value)

    def predicate(self, value: Any, loc: Location, body: Any, ctx: Context) -> bool:
        return KINDS[self.kind][0](self.arg, value, loc, body, ctx)

    def run(self, body: Any, ctx: Context, messages: dict[str, str],
            find: Callable[[Any, tuple[str, ...]], list[Location]] = resolve) -> Failure | None:
        """The failure this check finds in `body`, or None. `find` resolves paths in the body (a
        validator passes one that remembers, as many checks share a path)."""
        if self.kind == "required":
            for parent in find(body, self.segments[:-1]):
                if not isinstance(parent.value, dict):
                    continue
                if self.when and not condition_holds(self.when, body, parent.value, ctx):
                    continue
                if parent.value.get(self.segments[-1]) is None:
                    return self._fail(parent.path + (self.segments[-1],), None, messages)
            return None
        for loc in find(body, self.segments):
            if loc.value is None and self.null == "absent":
                continue
            if self.when and not condition_holds(self.when, body, loc.parent, ctx):
                continue
            if loc.value is None and self.null == "refuse" and self.kind == "type":
                return self._fail(loc.path, None, messages)
            if not self.predicate(loc.value, loc, body, ctx):
                if self.kind == "keys":  # report the offending key itself, as OpenAI does
                    extra = next(k for k in loc.value if k not in self.arg)
                    return self._fail(loc.path + (extra,), extra, messages)
                return self._fail(loc.path, loc.value, messages)
        return None


def compile_check(rule_id: str, raw: dict[str, Any], rule_endpoints: list[str]) -> CompiledCheck:
    kinds = [k for k in raw if k not in MODIFIERS]
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        raise SpecError(f"{rule_id}: unknown check kind {unknown[0]!r} (known: {', '.join(sorted(KINDS))})")
    if len(kinds) != 1:
        raise SpecError(f"{rule_id}: a check needs exactly one kind, got {kinds or 'none'} on field {raw.get('field')!r}")
    kind = kinds[0]
    if kind == "type" and not isinstance(raw[kind], list):
        raise SpecError(f"{rule_id}: 'type' takes a list of JSON types")
    if kind == "pattern":
        try:
            re.compile(raw[kind])
        except re.error as e:
            raise SpecError(f"{rule_id}: bad pattern {raw[kind]!r}: {e}") from e
    endpoints = raw.get("endpoints") or rule_endpoints
    stray = [e for e in endpoints if e not in rule_endpoints]
    if stray:
        raise SpecError(f"{rule_id}: check on {raw['field']!r} names endpoint {stray[0]!r}, which the rule does not list")
    return CompiledCheck(
        rule_id=rule_id, kind=kind, arg=raw[kind], field=raw["field"], segments=parse(raw["field"]),
        error=raw["error"], endpoints=list(endpoints), param=raw.get("param"), null=raw.get("null", "absent"),
        when=raw.get("when"), message=raw.get("message"), raw=raw,
    )
