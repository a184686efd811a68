"""Reading a request body: size limit, UTF-8, JSON (no NaN/Infinity), no lone surrogates,
object-ness. Each failure is a named error from the table (spec topic `transport`)."""
from __future__ import annotations

import json
import math
import re
from typing import Any

from .errors import error

MAX_BODY = 4 * 1024 * 1024
MAX_DEPTH = 64  # rule body.json.limits
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if value in (math.inf, -math.inf):
        raise ValueError(f"{text} is beyond the range of a 64-bit float")
    return value


def _too_deep(doc: Any) -> bool:
    """Whether arrays/objects nest deeper than MAX_DEPTH (an explicit stack: no recursion)."""
    stack = [(doc, 1)]
    while stack:
        value, depth = stack.pop()
        children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else None
        if children is None:
            continue
        if depth > MAX_DEPTH:
            return True
        stack.extend((c, depth + 1) for c in children if isinstance(c, (dict, list)))
    return False


def _has_lone_surrogate(value: Any) -> bool:
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return True
        return False
    if isinstance(value, list):
        return any(_has_lone_surrogate(v) for v in value)
    if isinstance(value, dict):
        return any(_has_lone_surrogate(k) or _has_lone_surrogate(v) for k, v in value.items())
    return False


def parse_body(raw: bytes) -> dict[str, Any]:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise error("invalid_encoding") from None
    try:
        doc = json.loads(text, parse_constant=_reject_constant, parse_float=_finite_float)
    except ValueError:
        raise error("invalid_json") from None
    except RecursionError:  # deeper than the parser's own stack: certainly beyond MAX_DEPTH
        raise error("invalid_json", message=f"The request body nests deeper than {MAX_DEPTH} levels.") from None
    if isinstance(doc, (dict, list)) and _too_deep(doc):
        raise error("invalid_json", message=f"The request body nests deeper than {MAX_DEPTH} levels.")
    # Valid UTF-8 cannot carry a surrogate, so only a \uD800-\uDFFF escape can make one: bodies
    # without such an escape (nearly all) skip the walk over every string.
    if _SURROGATE_ESCAPE.search(text) and _has_lone_surrogate(doc):
        raise error("invalid_encoding")
    if not isinstance(doc, dict):
        raise error("body_not_object")
    return doc


def _read_chunked(stream: Any) -> bytes:
    parts, size = [], 0
    while size <= MAX_BODY:
        part = stream.read(min(65536, MAX_BODY + 1 - size))
        if not part:
            break
        parts.append(part)
        size += len(part)
    return b"".join(parts)


def read_body(req: Any) -> dict[str, Any]:
    """Read and parse a Falcon request's body, refusing oversize bodies before reading them."""
    length = req.content_length
    if length is not None and length > MAX_BODY:
        raise error("request_too_large")
    if length is None and "chunked" in (req.get_header("Transfer-Encoding") or "").lower():
        # Falcon's bounded stream reads nothing without a Content-Length; the WSGI server's
        # input de-chunks, so read it to its end (or just past the limit).
        raw = _read_chunked(req.stream)
    else:
        raw = req.bounded_stream.read(MAX_BODY + 1)
    if len(raw) > MAX_BODY:
        raise error("request_too_large")
    return parse_body(raw)
