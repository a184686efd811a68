"""The targets a run sends its requests to: in-process (a WSGI app through falcon's test
client, no sockets) or remote (a base URL through httpx, found answering like an LLM API by
first_contact.py before anything runs), and the headers every request carries."""
from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from colibri.paths import EMBEDDED_MODEL_ID

from .exchange import Exchange, TransportError
from .first_contact import Stop, first_contact


def _chunks(body: bytes | None) -> Any:
    """The body as an iterator, which httpx sends with Transfer-Encoding: chunked."""
    data = body or b""
    return iter([data[i:i + 64] for i in range(0, len(data), 64)])


def _with_content_type(hdrs: dict[str, str], body: bytes | None) -> dict[str, str]:
    if body is not None and not any(k.lower() == "content-type" for k in hdrs):
        return hdrs | {"Content-Type": "application/json"}
    return hdrs


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


def broke_unanswered(status: int, exc: BaseException | None) -> bool:
    """A reused kept-alive connection the server closed just as it was reused: nothing came back
    (no status) and the socket broke. HTTP lets either side close an idle connection at any time
    (RFC 9112 9.6), so the request is tried once more on a fresh connection, not counted lost."""
    import httpx

    return not status and isinstance(exc, (httpx.ReadError, httpx.RemoteProtocolError, httpx.WriteError))


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
            if not broke_unanswered(e.exchange.status, e.__cause__):
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


def request_headers(args: argparse.Namespace) -> dict[str, str]:
    """The headers every request carries: each --header, and the key of --api-key (else
    $COLI_CONFORM_API_KEY) as Bearer and x-api-key."""
    out = {}
    for h in args.header:
        k, sep, v = h.partition(":")
        if not sep:
            raise SystemExit(f"colibri-conform: --header wants 'Name: value', not {h!r}")
        out[k.strip()] = v.strip()
    key = args.api_key or os.environ.get("COLI_CONFORM_API_KEY")
    if key:
        out.setdefault("Authorization", f"Bearer {key}")
        out.setdefault("x-api-key", key)
    return out


def remote_target(base_url: str, headers: dict[str, str], model: str | None, timeout: float = 120.0) -> Any:
    """An HttpTarget whose model is `model`, else the first id the target lists, once the target
    answers like an LLM API that takes the key given (conformance/first_contact.py). Raises
    SystemExit with the exit code after one line a user can act on."""
    target = HttpTarget(base_url, headers, timeout=timeout)
    target.api_key = next((v.removeprefix("Bearer ").strip() for k, v in headers.items()
                           if k.lower() == "authorization"), None)
    keyed = any(k.lower() in ("authorization", "x-api-key") for k in headers)
    try:
        target.model = first_contact(target, base_url, model, keyed)
    except Stop as e:
        print(f"colibri-conform: {e.message}", file=sys.stderr)
        raise SystemExit(e.code) from None
    return target


@dataclass
class RunTargets:
    """Where a rule run sends each vector, and what the report calls it."""
    label: str
    probe: Any  # the target discovery probes and whose model the report names
    target_for: Callable[[Any], Any]  # a vector -> the target to send it to
    release: Callable[[Any], None] | None  # undoes the test-only state a vector put on its server
    phase_target: Callable[[], dict[str, Any]]  # the generated-request phases' target arguments


def remote_run_targets(base_url: str, headers: dict[str, str], model: str | None, timeout: float) -> RunTargets:
    """Every vector to the one server at `base_url` (SystemExit as remote_target says)."""
    target = remote_target(base_url, headers, model, timeout)
    return RunTargets(base_url, target, lambda vector: target, None,
                      lambda: {"url": base_url, "target": target, "headers": headers})
