"""One HTTP exchange as evidence: the request sent, the status, headers and raw body (with the
arrival time of every chunk), parsed as JSON or as server-sent events. Targets are in-process
(a WSGI app through falcon's test client) or remote (a base URL through httpx)."""
from __future__ import annotations

import json
import re
import time
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


def _chunks(body: bytes | None) -> Any:
    """The body as an iterator, which httpx sends with Transfer-Encoding: chunked."""
    data = body or b""
    return iter([data[i:i + 64] for i in range(0, len(data), 64)])


def _with_content_type(hdrs: dict[str, str], body: bytes | None) -> dict[str, str]:
    if body is not None and not any(k.lower() == "content-type" for k in hdrs):
        return hdrs | {"Content-Type": "application/json"}
    return hdrs


def model_of(target: Any) -> str:
    """The model id requests to `target` name: the one it serves, or the embedded model's."""
    return getattr(target, "model", None) or EMBEDDED_MODEL_ID


class InProcessTarget:
    """A WSGI app driven through falcon.testing (no sockets)."""

    remote = False

    def __init__(self, app: Any, default_headers: dict[str, str] | None = None, model: str = EMBEDDED_MODEL_ID):
        from falcon import testing

        self.client = testing.TestClient(app)
        self.default_headers = {"Host": "localhost"} | (default_headers or {})
        self.model = model

    def send(self, method: str, path: str, body: bytes | None = None, headers: dict[str, str] | None = None) -> Exchange:
        hdrs = _with_content_type(self.default_headers | (headers or {}), body)
        t = time.perf_counter()
        r = self.client.simulate_request(method, path, body=body, headers=hdrs)
        return Exchange(method, path, hdrs, body, r.status_code, dict(r.headers), r.content, time.perf_counter() - t)


class HttpTarget:
    """A remote server: base URL like http://127.0.0.1:8000 (the /v1 prefix belongs to paths).

    One httpx client with connection reuse; redirects are not followed (a redirect is what
    some rules assert); every response is read as a stream so that each chunk's arrival time
    is known (keepalive and time-to-first-byte rules run remotely too)."""

    remote = True

    def __init__(self, base_url: str, default_headers: dict[str, str] | None = None, timeout: float = 120.0,
                 model: str | None = None):
        import httpx

        self.base = base_url.rstrip("/").removesuffix("/v1")
        self.default_headers = default_headers or {}
        self.timeout = timeout
        self.model = model
        self.api_key: str | None = None
        self.client = httpx.Client(follow_redirects=False, timeout=httpx.Timeout(timeout, connect=10.0),
                                   limits=httpx.Limits(max_connections=32, max_keepalive_connections=16))

    def send(self, method: str, path: str, body: bytes | None = None, headers: dict[str, str] | None = None,
             timeout: float | None = None, default_auth: bool = True) -> Exchange:
        import httpx

        base = self.default_headers if default_auth else {
            k: v for k, v in self.default_headers.items() if k.lower() not in ("authorization", "x-api-key")}
        hdrs = _with_content_type(base | (headers or {}), body)
        ex = Exchange(method, path, hdrs, body)
        content: Any = body
        if any(k.lower() == "transfer-encoding" and "chunked" in v.lower() for k, v in hdrs.items()):
            # A vector about chunked bodies: httpx frames an iterator as chunks (and sends no
            # Content-Length beside it, which servers rightly refuse as ambiguous).
            hdrs = {k: v for k, v in hdrs.items() if k.lower() != "transfer-encoding"}
            content = _chunks(body)
        try:
            return self._send_once(self.client, method, path, content, hdrs, ex, timeout)
        except TransportError as e:
            # A server may close an idle kept-alive connection just as it is reused (mockllm
            # does after a 500): nothing came back, so try once on a fresh connection.
            if e.exchange.status or not isinstance(e.__cause__, (httpx.ReadError, httpx.RemoteProtocolError,
                                                                  httpx.WriteError)):
                raise
        ex = Exchange(method, path, hdrs, body)
        if not isinstance(content, (bytes, type(None))):
            content = _chunks(body)
        with httpx.Client(follow_redirects=False, timeout=self.client.timeout) as fresh:
            return self._send_once(fresh, method, path, content, hdrs, ex, timeout)

    def _send_once(self, client: Any, method: str, path: str, content: Any, hdrs: dict[str, str], ex: Exchange,
                   timeout: float | None) -> Exchange:
        import httpx

        buf = bytearray()
        t0 = time.perf_counter()
        try:
            # httpcore reads the response even when the server stopped reading the body and
            # closed (an early 413): the status arrives instead of a broken pipe.
            with client.stream(method, self.base + path, content=content, headers=hdrs,
                                    timeout=timeout if timeout is not None else httpx.USE_CLIENT_DEFAULT) as r:
                ex.first_byte = time.perf_counter() - t0
                ex.status, ex.headers = r.status_code, dict(r.headers)
                for chunk in r.iter_bytes():
                    buf += chunk
                    ex.arrivals.append((time.perf_counter() - t0, len(buf)))
        except (httpx.HTTPError, OSError) as e:
            ex.body, ex.elapsed = bytes(buf), time.perf_counter() - t0
            ex.transport_error = f"{type(e).__name__}: {e}"
            raise TransportError(ex.transport_error, ex) from e
        ex.body, ex.elapsed = bytes(buf), time.perf_counter() - t0
        return ex

    def close(self) -> None:
        self.client.close()
