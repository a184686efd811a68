"""Before any rule runs against a URL: is something listening, does it want a key the user did
not give, is it an LLM API at all, and which model to name. Each of these ends the run with one
line saying what is wrong and what to do, instead of a report that blames the server for the
user's missing key or a page of transport ERRORs."""
from __future__ import annotations

import html
import json
import re
from typing import Any

from colibri.exit_codes import EXIT_UNTESTED, EXIT_USAGE

from .exchange import Exchange, TransportError

KEY_HOW = "give it with --api-key KEY or the COLI_CONFORM_API_KEY environment variable"
#: Requests that any OpenAI- or Anthropic-compatible server answers with JSON (an answer or an
#: error envelope), tried when GET /v1/models gives no model list.
API_PROBES = (("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}),
              ("/v1/messages", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}))


class Stop(Exception):
    """The run cannot start: `message` is the one line to print, `code` the exit code."""

    def __init__(self, message: str, code: int):
        super().__init__(message)
        self.message, self.code = message, code


_TITLE = re.compile(rb"<title>(.*?)</title>", re.I | re.S)


def what_came_back(ex: Exchange) -> str:
    """A response in a few words: an HTML page by its title, else the start of the body as text."""
    ctype = (ex.header("content-type") or "").split(";")[0].strip()
    if ctype == "text/html" or ex.body.lstrip()[:14].lower().startswith((b"<!doctype html", b"<html")):
        m = _TITLE.search(ex.body)
        title = " ".join(html.unescape(m.group(1).decode("utf-8", "replace")).split()) if m else ""
        return f'an HTML page titled "{title}"' if title else "an HTML page"
    text = " ".join(ex.body.decode("utf-8", "replace").split())
    if not text:
        return f"an empty {ctype} body" if ctype else "an empty body"
    return (ctype + ": " if ctype else "") + (text if len(text) <= 80 else text[:79] + "…")


def _json_object(ex: Exchange) -> dict[str, Any] | None:
    try:
        doc = json.loads(ex.body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def _error_code(ex: Exchange) -> str:
    err = (_json_object(ex) or {}).get("error")
    code = err.get("code") or err.get("type") if isinstance(err, dict) else None
    return f" {code}" if isinstance(code, str) and code else ""


def _listed_models(ex: Exchange) -> list[str] | None:
    doc = _json_object(ex) if ex.status == 200 else None
    data = doc.get("data") if doc else None
    if not isinstance(data, list):
        return None
    return [m["id"] for m in data if isinstance(m, dict) and isinstance(m.get("id"), str)]


def _looks_like_api(ex: Exchange) -> bool:
    """The route exists and speaks JSON: an answer, or an error envelope about the request."""
    return ex.status not in (404, 405, 501) and _json_object(ex) is not None


def _wants_key(ex: Exchange, method: str, path: str, keyed: bool) -> Stop | None:
    if ex.status not in (401, 403):
        return None
    said = f"{method} {path} answered {ex.status}{_error_code(ex)}"
    if keyed:
        return Stop(f"the target refused the API key given ({said}): check the key ({KEY_HOW})", EXIT_USAGE)
    return Stop(f"the target wants an API key ({said}): {KEY_HOW}", EXIT_USAGE)


def first_contact(target: Any, base_url: str, model: str | None, keyed: bool) -> str:
    """The model to name in requests (`model`, else the first the target lists); raises Stop
    when the run cannot start."""
    try:
        listing = target.send("GET", "/v1/models")
    except TransportError as e:
        raise Stop(f"cannot reach {base_url}: {e}; is the server running at that address?", EXIT_UNTESTED) from None
    if (stop := _wants_key(listing, "GET", "/v1/models", keyed)) is not None:
        raise stop
    listed = _listed_models(listing)
    if listed:
        return model or listed[0]
    seen = [f"GET /v1/models answered {listing.status} ({what_came_back(listing)})"]
    for path, body in API_PROBES:
        try:
            ex = target.send("POST", path, json.dumps({"model": model or "any", **body}).encode())
        except TransportError as e:
            raise Stop(f"cannot reach {base_url}: {e}; is the server running at that address?",
                       EXIT_UNTESTED) from None
        if (stop := _wants_key(ex, "POST", path, keyed)) is not None:
            raise stop
        if _looks_like_api(ex):
            if model:
                return model
            why = "lists no model" if listed is not None else "gives no model list"
            raise Stop(f"the target {why} ({seen[0]}); name the model to test with --model", EXIT_USAGE)
        seen.append(f"POST {path} answered {ex.status} ({what_came_back(ex)})")
    raise Stop(f"{base_url} does not look like an LLM API: {', '.join(seen)}; give the root (or /v1) of an "
               "OpenAI- or Anthropic-compatible server", EXIT_UNTESTED)
