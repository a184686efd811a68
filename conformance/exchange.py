"""One HTTP exchange as evidence: the request sent, the status, headers and raw body (with the
arrival time of every chunk), parsed as JSON or as server-sent events. The targets that make
exchanges are in targets.py."""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from colibri.paths import EMBEDDED_MODEL_ID

#: One SSE event ends at a blank line; the three line endings of the WHATWG rules.
_EVENT_END = re.compile(rb"\r\n\r\n|\n\n|\r\r|\r\n\n|\n\r\n")


@dataclass
class SseEvent:
    event: str | None
    data: str
    at: float = 0.0  # seconds from sending the request until the bytes ending this event arrived

    def json(self) -> Any:
        return json.loads(self.data)


class BodyNotJson(ValueError):
    """The body a check needs as JSON is not JSON (the server's fault, not the harness's)."""


@dataclass
class Exchange:
    method: str
    path: str
    request_headers: dict[str, str]
    request_body: bytes | None
    status: int = 0
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    elapsed: float = 0.0
    first_byte: float | None = None  # seconds until the response head arrived
    #: (seconds since sending, body length so far) after each chunk read; empty in-process
    arrivals: list[tuple[float, int]] = field(default_factory=list)
    transport_error: str | None = None  # set when the exchange broke off

    def header(self, name: str) -> str | None:
        for k, v in self.headers.items():
            if k.lower() == name.lower():
                return v
        return None

    @property
    def is_sse(self) -> bool:
        return (self.header("content-type") or "").startswith("text/event-stream")

    def json(self) -> Any:
        try:
            return json.loads(self.body.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise BodyNotJson(f"{e}; body starts {self.text(120)!r}") from None

    def text(self, limit: int = 200) -> str:
        """The body as text for a message (decoded, not a bytes repr), cut at `limit` characters."""
        text = self.body.decode("utf-8", "replace")
        return text if len(text) <= limit else text[:limit] + "…"

    def _arrival(self, offset: int) -> float:
        for t, n in self.arrivals:
            if n >= offset:
                return t
        return self.elapsed

    def events(self) -> list[SseEvent]:
        """The complete SSE events of the body (WHATWG rules: events end at a blank line, `data:`
        lines joined with newlines, `event:` kept, comment lines dropped). Bytes after the last
        blank line are an unfinished event and, as in a browser, not dispatched."""
        out: list[SseEvent] = []
        start = 0
        for m in _EVENT_END.finditer(self.body):
            block = self.body[start:m.start()].decode("utf-8", "replace")
            start = m.end()
            name, data, comment_only = None, [], True
            for line in re.split(r"\r\n|\r|\n", block):
                if line.startswith(":") or not line:
                    continue
                comment_only = False
                key, _, value = line.partition(":")
                value = value[1:] if value.startswith(" ") else value
                if key == "event":
                    name = value
                elif key == "data":
                    data.append(value)
            if not comment_only:
                out.append(SseEvent(name, "\n".join(data), self._arrival(m.end())))
        return out

    def comments(self) -> list[str]:
        text = self.body.decode("utf-8", "replace")
        return [line for line in text.splitlines() if line.startswith(":")]

    def to_dict(self, redact: str | None = None) -> dict[str, Any]:
        def red(s: str) -> str:
            return s.replace(redact, "***") if redact else s

        resp: dict[str, Any] = {"status": self.status, "headers": {k: red(v) for k, v in self.headers.items()},
                                "body": red(self.body.decode("utf-8", "replace"))[:50000], "elapsed": self.elapsed}
        if self.transport_error:
            resp["transport_error"] = self.transport_error
        return {"request": {"method": self.method, "path": self.path,
                            "headers": {k: red(v) for k, v in self.request_headers.items()},
                            "body": red((self.request_body or b"").decode("utf-8", "replace"))[:20000]},
                "response": resp}


class TransportError(Exception):
    """The exchange broke off (refused, reset, timed out): what arrived is kept as evidence."""

    def __init__(self, message: str, exchange: Exchange):
        super().__init__(message)
        self.exchange = exchange


def model_of(target: Any) -> str:
    """The model id requests to `target` name: the one it serves, or the embedded model's."""
    return getattr(target, "model", None) or EMBEDDED_MODEL_ID
