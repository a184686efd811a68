"""A run always completes: whatever a target answers (HTML, nothing, a reset, half a stream) and
whatever a check does (raise), colibri-conform writes every requested report, with the fault
on the vector it happened to as ERROR or FAIL and the exchange as evidence."""
from __future__ import annotations

import json
import socket
import struct
import threading
import xml.etree.ElementTree as ET
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from colibri.schemas import validator
from conformance import checks
from conformance.cli import main
from conformance.report import embedded_reports
from conformance.suite import PROFILES_ALL

pytestmark = pytest.mark.integration

CHAT = {"id": "c1", "object": "chat.completion", "created": 1, "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "hello"}, "finish_reason": "stop",
                     "logprobs": None}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}}


class Misbehaving(BaseHTTPRequestHandler):
    """A server with one fault (the class attribute `mode`); otherwise it answers a valid but
    minimal chat completion to every POST and an empty model list to GET /v1/models."""

    mode = "html"
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # head and body go out in two writes: no 40 ms delayed-ACK stall

    def log_message(self, *a):  # keep test output clean
        pass

    def _send(self, status, body, ctype="application/json", close=False):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        if close:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path == "/metrics" and self.mode == "odd-ops":
            return self._send(501, b'{"error": {"code": 501, "message": "metrics disabled", "type": "not_supported_error"}}')
        if self.path == "/health" and self.mode == "odd-ops":
            return self._send(200, b"OK", "text/plain")
        if self.path.startswith("/v1/models"):
            return self._send(200, json.dumps({"object": "list", "data": [{"id": "m", "object": "model", "created": 1,
                                                                             "owned_by": "x"}]}).encode())
        self._send(404, b"<html>not here</html>", "text/html")

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            req = json.loads(body)
        except (ValueError, RecursionError):
            req = {}
        mode = self.mode
        if mode == "reset":
            # SO_LINGER 0: close() sends a TCP reset instead of an orderly end.
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.close_connection = True
            return
        if mode == "html":
            return self._send(200, b"<html><body>Welcome to nginx!</body></html>", "text/html")
        if mode == "empty":
            return self._send(200, b"")
        if mode == "wrong-content-type":
            return self._send(200, json.dumps(CHAT).encode(), "text/plain")
        if mode == "truncated-sse" and isinstance(req, dict) and req.get("stream"):
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(b'data: {"id": "c1", "object": "chat.completion.chunk", "choices": [{"ind')
            self.close_connection = True
            return
        self._send(200, json.dumps(CHAT).encode())


@pytest.fixture
def target():
    servers = []

    def start(mode):
        handler = type("Handler", (Misbehaving,), {"mode": mode})
        srv = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        servers.append(srv)
        return f"http://127.0.0.1:{srv.server_address[1]}/v1"

    yield start
    for srv in servers:
        srv.shutdown()
        srv.server_close()


def _every_profile():
    return [x for p in PROFILES_ALL for x in ("--profile", p)]


def _run(url, out, *extra):
    return main(["-q", "--base-url", url, "--model", "m", "--timeout", "10", *_every_profile(), "--include-should",
                 "--json", str(out / "r.json"), "--junit", str(out / "r.xml"), "--markdown", str(out / "r.md"),
                 "--html", str(out / "html"), *extra])


def _assert_complete_reports(out):
    doc = json.loads((out / "r.json").read_text())
    validator("conform-report.json").validate(doc)
    vectors = sum(len(r["vectors"]) or 1 for r in doc["rules"])
    root = ET.parse(out / "r.xml").getroot()
    assert int(root.get("tests")) == vectors
    assert embedded_reports((out / "html" / "index.html").read_text()) == [doc]  # evidence and all
    assert (out / "r.md").read_text().startswith("# colibri-conform")
    return doc


@pytest.mark.parametrize("mode", ["html", "empty", "wrong-content-type", "truncated-sse", "odd-ops", "reset"])
def test_a_misbehaving_target_gets_complete_reports(target, tmp_path, mode):
    code = _run(target(mode), tmp_path)
    doc = _assert_complete_reports(tmp_path)
    s = doc["summary"]
    assert code == (3 if s["ERROR"] and not s["PASS"] and not s["FAIL"] else 1)
    outcomes = {v["outcome"] for r in doc["rules"] for v in r["vectors"]}
    if mode == "reset":
        # Every POST broke off: those vectors are ERRORs carrying the request and the reason.
        err = next(v for r in doc["rules"] for v in r["vectors"] if v["outcome"] == "ERROR")
        assert err["reason"].startswith("transport: ") and err["evidence"]["request"]["method"] == "POST"
        assert doc["discovery"]["chat"]["state"] == "error"
    else:
        assert "FAIL" in outcomes
    if mode in ("html", "empty"):
        # A 200 that is no JSON fails the rule that needs the body, as the server's fault.
        r = next(r for r in doc["rules"] if r["id"] == "chat.response.shape")
        assert r["outcome"] == "FAIL" and r["vectors"][0]["check"] == "json body"
    if mode == "truncated-sse":
        r = next(r for r in doc["rules"] if r["id"] == "stream.sse.framing")
        assert r["outcome"] == "FAIL" and r["vectors"][0]["check"] in ("sse_framing", "header Content-Type")
    if mode == "odd-ops":
        by_id = {r["id"]: r for r in doc["rules"]}
        assert doc["discovery"]["metrics"]["state"] == "absent"
        assert by_id["ops.metrics.names"]["outcome"] == "UNSUPPORTED"
        assert by_id["ops.metrics.names"]["vectors"][0]["evidence"]["response"]["status"] == 501
        assert doc["discovery"]["health"]["state"] == "absent"
        assert by_id["ops.health"]["outcome"] == "UNSUPPORTED"


def test_a_raising_check_is_that_vectors_error(target, tmp_path, monkeypatch):
    def boom(ctx):
        raise RuntimeError("a bug in a check")

    monkeypatch.setitem(checks.CHECKS, "usage_arithmetic", boom)
    code = _run(target("fine"), tmp_path)
    doc = _assert_complete_reports(tmp_path)
    errs = [(r["id"], v) for r in doc["rules"] for v in r["vectors"] if v["outcome"] == "ERROR"]
    assert errs and all("RuntimeError: a bug in a check" in v["reason"] for _, v in errs)
    assert all(v["evidence"]["response"]["status"] == 200 for _, v in errs)
    assert {rid for rid, _ in errs} >= {"gen.usage.counts"}
    assert code == 1
