"""A recording proxy in front of the server under test: every exchange a client makes is kept
with the scenario it belongs to (the drivers announce each with POST /__scenario), so a FAIL
carries the HTTP it came from. Forwarding is conformance/proxy.py's: a stream reaches the
client at once, whole, which every client handles."""
from __future__ import annotations

import io
import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from conformance.proxy import mutating_proxy

KEEP = 3000  # bytes of each body kept as evidence


def kept(body: bytes) -> str:
    """A body as evidence: whole when short, else its start and its end, since a stream's last
    event (response.completed or response.incomplete, finish_reason, usage) matters as often as
    its first."""
    if len(body) > KEEP:
        body = body[:KEEP // 2] + b"\n[...]\n" + body[-KEEP // 2:]
    return body.decode(errors="replace")


class Recorder:
    def __init__(self) -> None:
        self.tag: tuple[str, str] = ("", "")
        self.exchanges: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    def wrap(self, app: Callable[..., Any]) -> Callable[..., Any]:
        def recording(environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
            length = int(environ.get("CONTENT_LENGTH") or 0)
            body = environ["wsgi.input"].read(length) if length else b""
            if environ.get("PATH_INFO") == "/__scenario":
                doc = json.loads(body or b"{}")
                self.tag = (doc.get("client", ""), doc.get("scenario", ""))
                start_response("204 No Content", [])
                return [b""]
            environ["wsgi.input"] = io.BytesIO(body)
            seen: dict[str, Any] = {}

            def keep(status: str, headers: list[tuple[str, str]], *rest: Any) -> Any:
                seen["status"] = int(status.split()[0])
                return start_response(status, headers, *rest)

            out = app(environ, keep)
            with self.lock:
                self.exchanges.append({
                    "client": self.tag[0], "scenario": self.tag[1], "method": environ["REQUEST_METHOD"],
                    "path": environ.get("PATH_INFO", ""), "request": kept(body),
                    "status": seen.get("status"), "response": kept(b"".join(out))})
            return out

        return recording

    def of(self, client: str, scenario: str) -> list[dict[str, Any]]:
        with self.lock:
            return [e for e in self.exchanges if e["client"] == client and e["scenario"] == scenario]


@contextmanager
def recording(upstream: str) -> Iterator[tuple[str, Recorder]]:
    rec = Recorder()
    with mutating_proxy(upstream, rec.wrap) as url:
        yield url, rec
