"""One HTTP exchange as evidence: the request sent, the status, headers and raw body, with the
body parsed as JSON or as server-sent events. Targets are in-process (a WSGI app through
falcon's test client) or remote (a base URL through the standard library)."""
from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any


@dataclass
class SseEvent:
    event: str | None
    data: str
    at: float = 0.0  # seconds since the request was sent

    def json(self) -> Any:
        return json.loads(self.data)


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

    def header(self, name: str) -> str | None:
        for k, v in self.headers.items():
            if k.lower() == name.lower():
                return v
        return None

    @property
    def is_sse(self) -> bool:
        return (self.header("content-type") or "").startswith("text/event-stream")

    def json(self) -> Any:
        return json.loads(self.body.decode("utf-8"))

    def events(self) -> list[SseEvent]:
        """SSE parsing per the WHATWG rules we rely on: events separated by a blank line, `data:`
        lines joined, `event:` names kept, comment lines (starting with ':') dropped."""
        out: list[SseEvent] = []
        text = self.body.decode("utf-8", "replace").replace("\r\n", "\n")
        for block in text.split("\n\n"):
            if not block.strip():
                continue
            name, data, comment_only = None, [], True
            for line in block.split("\n"):
                if line.startswith(":"):
                    continue
                comment_only = False
                key, _, value = line.partition(":")
                value = value[1:] if value.startswith(" ") else value
                if key == "event":
                    name = value
                elif key == "data":
                    data.append(value)
            if not comment_only:
                out.append(SseEvent(name, "\n".join(data)))
        return out

    def comments(self) -> list[str]:
        text = self.body.decode("utf-8", "replace")
        return [line for line in text.split("\n") if line.startswith(":")]

    def to_dict(self, redact: str | None = None) -> dict[str, Any]:
        def red(s: str) -> str:
            return s.replace(redact, "***") if redact else s

        return {"request": {"method": self.method, "path": self.path,
                            "headers": {k: red(v) for k, v in self.request_headers.items()},
                            "body": red((self.request_body or b"").decode("utf-8", "replace"))[:20000]},
                "response": {"status": self.status, "headers": {k: red(v) for k, v in self.headers.items()},
                             "body": red(self.body.decode("utf-8", "replace"))[:50000], "elapsed": self.elapsed}}


class InProcessTarget:
    """A WSGI app driven through falcon.testing (no sockets)."""

    def __init__(self, app: Any, default_headers: dict[str, str] | None = None):
        from falcon import testing

        self.client = testing.TestClient(app)
        self.default_headers = {"Host": "localhost"} | (default_headers or {})

    def send(self, method: str, path: str, body: bytes | None = None, headers: dict[str, str] | None = None) -> Exchange:
        hdrs = self.default_headers | (headers or {})
        if body is not None and not any(k.lower() == "content-type" for k in hdrs):
            hdrs = hdrs | {"Content-Type": "application/json"}
        t = time.perf_counter()
        r = self.client.simulate_request(method, path, body=body, headers=hdrs)
        ex = Exchange(method, path, hdrs, body, r.status_code, dict(r.headers), r.content, time.perf_counter() - t)
        return ex


class HttpTarget:
    """A remote server: base URL like http://127.0.0.1:8000 (the /v1 prefix belongs to paths)."""

    def __init__(self, base_url: str, default_headers: dict[str, str] | None = None, timeout: float = 120.0):
        self.base = base_url.rstrip("/")
        if self.base.endswith("/v1"):
            self.base = self.base[:-3]
        self.default_headers = default_headers or {}
        self.timeout = timeout

    def send(self, method: str, path: str, body: bytes | None = None, headers: dict[str, str] | None = None) -> Exchange:
        hdrs = self.default_headers | (headers or {})
        if body is not None and not any(k.lower() == "content-type" for k in hdrs):
            hdrs = hdrs | {"Content-Type": "application/json"}
        req = urllib.request.Request(self.base + path, data=body, method=method, headers=hdrs)
        t = time.perf_counter()
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as r:  # noqa: S310 - the user's target
                status, rh, data = r.status, dict(r.headers), r.read()
        except urllib.error.HTTPError as e:
            status, rh, data = e.code, dict(e.headers), e.read()
        return Exchange(method, path, hdrs, body, status, rh, data, time.perf_counter() - t)
