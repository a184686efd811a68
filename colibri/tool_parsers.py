"""Native tool-call syntaxes → calls. One parser per `tool_format` of spec/families.yaml.

Each parser takes the generated text (after reasoning was split off) and the declared tools,
and returns the text outside calls plus the calls, each `{"name", "arguments": dict}`. A
block that cannot be read is reported in `problems` and left in the text, never guessed.
In formats that carry values as text, declared non-string parameters are parsed as JSON
(and kept as text when they do not parse); declared strings stay verbatim.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

OPEN, CLOSE = "<tool_call>", "</tool_call>"


@dataclass
class Parsed:
    content: str
    calls: list[dict[str, Any]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def _param_types(tools: list[dict[str, Any]] | None) -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    for t in tools or []:
        fn = t.get("function", t)
        props = ((fn.get("parameters") or fn.get("input_schema") or {}).get("properties") or {})
        out[fn.get("name", "")] = {k: (v.get("type") if isinstance(v, dict) else None) or "string"
                                   for k, v in props.items()}
    return out


def _typed(value: str, ptype: str | None) -> Any:
    if ptype in (None, "string"):
        return value
    try:
        return json.loads(value)
    except ValueError:
        return value


def _blocks(text: str) -> list[tuple[int, int, str]]:
    """(start, end, inner) of each complete <tool_call>...</tool_call> block."""
    out = []
    pos = 0
    while (s := text.find(OPEN, pos)) != -1:
        e = text.find(CLOSE, s)
        if e == -1:
            break
        out.append((s, e + len(CLOSE), text[s + len(OPEN):e]))
        pos = e + len(CLOSE)
    return out


_GLM_ARG = re.compile(r"<arg_key>(.*?)</arg_key>\s*<arg_value>(.*?)</arg_value>", re.S)


def _glm(inner: str, types: dict[str, dict[str, str]]) -> dict[str, Any] | None:
    name, _, rest = inner.partition("\n") if "<arg_key>" in inner else (inner, "", "")
    name = name.strip()
    if not name or "<" in name:
        return None
    leftover = _GLM_ARG.sub("", rest).strip()
    if leftover:
        return None
    ptypes = types.get(name, {})
    args = {k.strip(): _typed(v, ptypes.get(k.strip())) for k, v in _GLM_ARG.findall(rest)}
    return {"name": name, "arguments": args}


def _json_tags(inner: str, types: dict[str, dict[str, str]]) -> dict[str, Any] | None:
    try:
        obj = json.loads(inner)
    except ValueError:
        return None
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return None
    args = obj.get("arguments", {})
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except ValueError:
            return None
    if not isinstance(args, dict):
        return None
    return {"name": obj["name"], "arguments": args}


_QWEN_FN = re.compile(r"^\s*<function=([^>\s]+)>(.*)</function>\s*$", re.S)
_QWEN_PARAM = re.compile(r"<parameter=([^>\s]+)>\n?(.*?)\n?</parameter>", re.S)


def _qwen_xml(inner: str, types: dict[str, dict[str, str]]) -> dict[str, Any] | None:
    m = _QWEN_FN.match(inner)
    if not m:
        return None
    name, body = m.group(1), m.group(2)
    if _QWEN_PARAM.sub("", body).strip():
        return None
    ptypes = types.get(name, {})
    return {"name": name, "arguments": {k: _typed(v, ptypes.get(k)) for k, v in _QWEN_PARAM.findall(body)}}


PARSERS = {"glm-xml": _glm, "json-tags": _json_tags, "qwen-xml": _qwen_xml}


def parse(fmt: str, text: str, tools: list[dict[str, Any]] | None) -> Parsed:
    """Split `text` into content and calls in the family's native format."""
    if fmt not in PARSERS:
        return Parsed(text)
    types = _param_types(tools)
    parser = PARSERS[fmt]
    kept: list[str] = []
    calls, problems = [], []
    pos = 0
    for s, e, inner in _blocks(text):
        call = parser(inner, types)
        if call is None:
            problems.append(f"unreadable tool call block at {s}")
            continue
        kept.append(text[pos:s])
        calls.append(call)
        pos = e
    kept.append(text[pos:])
    tail = text[pos:]
    if OPEN in tail:
        problems.append("unterminated tool call block")
    return Parsed("".join(kept).strip() if calls else text, calls, problems)


def declared(tools: list[dict[str, Any]] | None) -> dict[str, dict[str, Any]]:
    """The offered tools by name (OpenAI's {type, function} or Anthropic's flat form)."""
    return {(t.get("function", t)).get("name"): t.get("function", t) for t in tools or []}


def validate_call(call: dict[str, Any], tools: list[dict[str, Any]] | None) -> list[str]:
    """Why a parsed call does not fit the declared tools (empty when it does)."""
    decl = declared(tools)
    fn = decl.get(call["name"])
    if fn is None:
        return [f"undeclared tool {call['name']!r}"]
    schema = fn.get("parameters") or fn.get("input_schema") or {}
    props = schema.get("properties") or {}
    out = [f"missing required argument {k!r}" for k in schema.get("required", []) if k not in call["arguments"]]
    checks = {"string": lambda v: isinstance(v, str), "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
              "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
              "boolean": lambda v: isinstance(v, bool), "object": lambda v: isinstance(v, dict),
              "array": lambda v: isinstance(v, list)}
    for k, v in call["arguments"].items():
        if k not in props:
            out.append(f"undeclared argument {k!r}")
            continue
        t = props[k].get("type") if isinstance(props[k], dict) else None
        if t in checks and not checks[t](v):
            out.append(f"argument {k!r} is not a {t}")
    return out
