"""A mutating HTTP proxy: the injected defects of mutants.py in front of a live server, so the
suite's power is also proven over real sockets and its HTTP client, not only on WSGI rewrites.

    with mutating_proxy("http://127.0.0.1:8000", MUTANTS["done-missing"][0]) as url:
        ...  # colibri-conform --base-url url

Requests are forwarded whole and answers returned whole (a stream arrives at once), which is
enough for every rule that runs against a URL.
"""
from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "content-encoding", "upgrade",
              "proxy-authenticate", "proxy-authorization", "te", "trailers"}


def forwarding_app(upstream: str) -> Callable[..., Any]:
    """A WSGI app that sends each request on to `upstream` and answers with its response."""
    import httpx

    client = httpx.Client(base_url=upstream.rstrip("/"), timeout=300.0, follow_redirects=False)

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        path = environ.get("PATH_INFO", "") + (f"?{environ['QUERY_STRING']}" if environ.get("QUERY_STRING") else "")
        length = int(environ.get("CONTENT_LENGTH") or 0)
        body: Any = environ["wsgi.input"].read(length) if length else None
        if "chunked" in environ.get("HTTP_TRANSFER_ENCODING", "").lower():
            body = iter([_dechunk(environ["wsgi.input"])])  # sent on chunked, as it came
        # Host goes through as the client sent it: the upstream's host allowlist judges it.
        headers = {k[5:].replace("_", "-").lower(): v for k, v in environ.items()
                   if k.startswith("HTTP_") and k[5:].replace("_", "-").lower() not in HOP_BY_HOP}
        if environ.get("CONTENT_TYPE"):
            headers["content-type"] = environ["CONTENT_TYPE"]
        r = client.request(environ["REQUEST_METHOD"], path, content=body, headers=headers)
        start_response(f"{r.status_code} {r.reason_phrase}",
                       [(k, v) for k, v in r.headers.multi_items() if k.lower() not in HOP_BY_HOP])
        return [r.content]

    return app


def _dechunk(stream: Any) -> bytes:
    """A chunked request body (wsgiref hands the raw stream over and does not decode it)."""
    parts: list[bytes] = []
    while True:
        size = int(stream.readline().split(b";")[0].strip() or b"0", 16)
        if size == 0:
            while stream.readline() not in (b"\r\n", b"\n", b""):  # trailers
                pass
            return b"".join(parts)
        parts.append(stream.read(size))
        stream.readline()


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    disable_nagle_algorithm = True  # head and body are separate writes: no delayed-ACK stall

    def log_message(self, *args: Any) -> None:  # the suite's report is the log
        pass


@contextlib.contextmanager
def mutating_proxy(upstream: str, wrap: Callable[[Any], Any] | None = None) -> Iterator[str]:
    """Serve `wrap(forwarding_app(upstream))` on a free loopback port; yield its base URL."""
    app = forwarding_app(upstream)
    server = make_server("127.0.0.1", 0, wrap(app) if wrap else app, server_class=_Server,
                         handler_class=_QuietHandler)
    thread = threading.Thread(target=server.serve_forever, name="mutating-proxy", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
