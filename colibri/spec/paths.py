"""Dotted field paths over JSON documents: `messages.*.role`, `messages.-1.content`, `$`;
`questions.{}.type` walks the values of an object (`*` walks arrays only).

A path resolves to the locations that exist in a document; each location knows its
concrete path (`messages.3.role`, the `param` reported in errors) and the object that holds
it (for conditions relative to that object, written `@.role`).
"""
from __future__ import annotations

from typing import Any, NamedTuple

MISSING: Any = type("Missing", (), {"__repr__": lambda self: "MISSING"})()


class Location(NamedTuple):  # a tuple: every request resolves dozens of these
    path: tuple[str | int, ...]
    value: Any
    parent: Any

    @property
    def param(self) -> str:
        return ".".join(str(p) for p in self.path) if self.path else "$"


def parse(path: str) -> tuple[str, ...]:
    return () if path == "$" else tuple(path.split("."))


def _index(seg: str) -> int | None:
    digits = seg[1:] if seg[:1] == "-" else seg
    return int(seg) if digits.isascii() and digits.isdigit() else None


def resolve(doc: Any, segments: tuple[str, ...]) -> list[Location]:
    """Every existing location of the path in `doc` (missing keys and type mismatches drop out)."""
    if len(segments) == 1 and isinstance(doc, dict) and segments[0] != "*":  # a top-level field: most checks
        seg = segments[0]
        return [Location((seg,), doc[seg], doc)] if seg in doc else []
    frontier: list[Location] = [Location((), doc, None)]
    for seg in segments:
        nxt: list[Location] = []
        for loc in frontier:
            v = loc.value
            if seg == "*":
                if isinstance(v, list):
                    nxt += [Location(loc.path + (i,), item, v) for i, item in enumerate(v)]
            elif seg == "{}":  # each value of an object (a map of names), its key in the path
                if isinstance(v, dict):
                    nxt += [Location(loc.path + (k,), item, v) for k, item in v.items()]
            elif (i := _index(seg)) is not None and not isinstance(v, dict):
                if isinstance(v, list) and -len(v) <= i < len(v):
                    j = i % len(v)
                    nxt.append(Location(loc.path + (j,), v[j], v))
            elif isinstance(v, dict) and seg in v:
                nxt.append(Location(loc.path + (seg,), v[seg], v))
        frontier = nxt
    return frontier


def get(doc: Any, path: str, default: Any = MISSING) -> Any:
    """The value at a path without wildcards, or `default`."""
    locs = resolve(doc, parse(path))
    return locs[0].value if locs else default


def set_path(doc: Any, segments: tuple[str, ...], value: Any) -> tuple[str | int, ...] | None:
    """Set a value, reading `*` as index 0 and `{}` as an object's first key; return the concrete
    path, or None if a parent is missing."""
    cur = doc
    concrete: list[str | int] = []
    for n, seg in enumerate(segments):
        last = n == len(segments) - 1
        key: str | int
        if seg == "{}":
            if not isinstance(cur, dict) or not cur:
                return None
            key = next(iter(cur))
        elif seg == "*" or _index(seg) is not None:
            if not isinstance(cur, list) or not cur:
                return None
            key = 0 if seg == "*" else int(seg) % len(cur)
        else:
            if not isinstance(cur, dict):
                return None
            key = seg
            if not last and seg not in cur:
                return None
        concrete.append(key)
        if last:
            cur[key] = value
        else:
            cur = cur[key]
    return tuple(concrete)


def delete_path(doc: Any, segments: tuple[str, ...]) -> tuple[str | int, ...] | None:
    """Delete a key (the last segment must be a name); return its concrete path."""
    parent_path = segments[:-1]
    parents = resolve(doc, parent_path)
    if not parents or not isinstance(parents[0].value, dict):
        return None
    parents[0].value.pop(segments[-1], None)
    return parents[0].path + (segments[-1],)


def json_type(value: Any) -> str:
    """The JSON type name. Unlike JSON Schema, a number written with a decimal point or an
    exponent (1.0, 1e3) is a number, never an integer: an integer field means a count or an
    index, and a server that reads 1.0 as 1 hands a float to code that indexes with it (the
    rule req.integer.literal)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def has_type(value: Any, allowed: list[str]) -> bool:
    t = json_type(value)
    return t in allowed or (t == "integer" and "number" in allowed)


def same(a: Any, b: Any) -> bool:
    """Equality that keeps JSON types apart: true is not 1, "1" is not 1."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if type(a) is not type(b):
        return False
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return bool(a == b)


def truthy(value: Any) -> bool:
    return value is not MISSING and value is not None and value is not False and value != 0 and value != "" \
        and value != [] and value != {}


def text_of(content: Any) -> str | None:
    """The text of a message content: a string, or the text parts of a list of parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content
                       if isinstance(p, dict) and p.get("type") in ("text", "input_text")
                       and isinstance(p.get("text"), str))
    return None
