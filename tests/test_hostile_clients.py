"""Clients that try to make the server unreachable for everyone else (issue 49), over raw
sockets against a live `colibri serve`: one connection must not stall the event loop, no
body framing escapes the 4 MiB limit, unfinished requests are bounded in memory, idle
connections from one address cannot fill the accept limit, refused requests hold no thread,
and gunicorn's own refusals come in the JSON envelope. Each test failed before its fix.
Rules ops.loop.never-waits, ops.body.every-framing, ops.buffer.bounded,
ops.connections.cap-at-accept, ops.refused.no-drain, ops.http-errors.envelope."""
from __future__ import annotations

import contextlib
import json
import os
import resource
import select
import socket
import tempfile
import time
from collections.abc import Iterator

import pytest
from live_server import live_server
from raw_http import CHAT
from raw_http import addr as _addr
from raw_http import read_response as _read_response
from raw_http import request as _request

pytestmark = pytest.mark.integration

#: "Not stalled": the faults these tests pin stalled others for the read deadline (30 s) or
#: for good; a bound well under that and well over a loaded machine's scheduling delays.
STALL = 5.0


def _health_time(base: str, source: str = "127.0.0.1") -> float:
    """Seconds /health takes to answer 200 on a fresh connection from `source`."""
    start = time.monotonic()
    with socket.create_connection(_addr(base), timeout=10, source_address=(source, 0)) as s:
        s.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        status, _, _ = _read_response(s, timeout=10)
    assert status == 200
    return time.monotonic() - start


def _closed_after(s: socket.socket, timeout: float = 5) -> bool:
    """Whether the server closes the connection (after its answer) within `timeout`."""
    s.settimeout(timeout)
    try:
        while s.recv(65536):
            pass
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False
    return True


@contextlib.contextmanager
def _sockets(n: int) -> Iterator[list[socket.socket]]:
    held: list[socket.socket] = []
    try:
        yield held
    finally:
        for s in held:
            s.close()


def _raise_fd_limit(n: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < n:
        if hard != resource.RLIM_INFINITY and hard < n:
            pytest.skip(f"the descriptor limit ({hard}) is below {n}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (n, hard))


# ------------------------------------------------------------------ ops.loop.never-waits

@pytest.mark.parametrize("request_bytes", [
    b"GET /health HTTP/1.0\r\n\r\n",  # closed after its answer
    b"GARBAGE\r\n\r\n",  # a malformed request line
    _request(extra="Connection: close\r\n"),  # a chat, then the client reads nothing
], ids=["http10", "malformed", "close-unread"])
def test_ops_loop_never_waits_on_a_client_that_neither_reads_nor_closes(request_bytes):
    """Before: closing such a connection ran gunicorn's graceful close on the event loop,
    and its short wait became the request's whole remaining read deadline (30 s): /health
    from everyone else waited that long."""
    with live_server() as base, socket.create_connection(_addr(base), timeout=10) as s:
        s.sendall(request_bytes)
        assert select.select([s], [], [], 30)[0], "no answer within 30 s"
        # the answer is out; the client neither reads it nor closes
        assert _health_time(base) < STALL


def test_ops_loop_never_waits_half_closed_client_gets_its_answer():
    """A client that shuts its sending side after the request (`nc -N`) still waits for the
    answer. Before: the disconnect check took the end-of-file for a hang-up and answered an
    empty 400."""
    with live_server() as base:
        with socket.create_connection(_addr(base), timeout=30) as s:
            s.sendall(_request())
            s.shutdown(socket.SHUT_WR)
            status, _, body = _read_response(s)
        assert status == 200, body
        assert json.loads(body)["object"] == "chat.completion"


def test_ops_loop_never_waits_a_short_wait_stays_short():
    """A wait the caller sets itself (gunicorn's drain after an answer, its graceful close)
    is honoured. Before: the socket wrapper reset it to the request's whole remaining read
    deadline, so a 2 s close waited up to 30 s."""
    from colibri.server.worker import RequestSocket

    a, b = socket.socketpair()
    try:
        wrapped = RequestSocket(a)
        wrapped.begin(time.monotonic() + 30, True)
        wrapped.setblocking(True)
        wrapped.settimeout(0.2)
        start = time.monotonic()
        with pytest.raises(TimeoutError):
            wrapped.recv(10)
        assert time.monotonic() - start < STALL
    finally:
        a.close()
        b.close()


# ------------------------------------------------------------------ ops.body.every-framing

def _chunked_head(path: str) -> bytes:
    return f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n".encode()


@pytest.mark.parametrize("path,envelope", [("/v1/chat/completions", "openai"), ("/v1/messages", "anthropic")])
def test_ops_body_every_framing_chunked_body_over_the_limit_is_413(path, envelope):
    """Before: a chunked body was buffered without limit (1.5 GB in 5 s) and never answered."""
    with live_server() as base:
        with socket.create_connection(_addr(base), timeout=30) as s:
            s.sendall(_chunked_head(path))
            piece = b"x" * 65536
            sent = 0
            try:
                while sent < 6 * 1024 * 1024:
                    s.sendall(b"10000\r\n" + piece + b"\r\n")
                    sent += len(piece)
            except OSError:
                pass  # refused mid-stream: the answer is waiting
            status, headers, body = _read_response(s)
        assert status == 413
        doc = json.loads(body)
        if envelope == "openai":
            assert doc["error"]["code"] == "request_too_large" and doc["error"]["type"] == "invalid_request_error"
            assert doc["error"]["param"] is None
        else:
            assert doc == {"type": "error", "error": {"type": "request_too_large",
                                                      "message": "The request body exceeds the 4 MiB limit."}}
        assert headers["connection"] == "close"
        assert _health_time(base) < STALL


def test_ops_body_every_framing_one_declared_chunk_over_the_limit_is_refused_at_once():
    with live_server() as base:
        with socket.create_connection(_addr(base), timeout=10) as s:
            s.sendall(_chunked_head("/v1/chat/completions") + b"500000\r\n")  # 5 MiB announced
            status, _, body = _read_response(s, timeout=5)
        assert status == 413 and json.loads(body)["error"]["code"] == "request_too_large"


def test_ops_body_every_framing_last_chunk_with_extension_and_trailers_is_served():
    """Before: only a body ending in exactly `0\\r\\n\\r\\n` was taken as whole; a last chunk
    with an extension, or trailer fields, waited 30 s and got 408."""
    data = json.dumps(CHAT).encode()
    with live_server() as base:
        with socket.create_connection(_addr(base), timeout=10) as s:
            for tail in (b"0;name=value\r\n\r\n", b"0\r\nX-Checksum: abc\r\nX-Other: 1\r\n\r\n"):
                s.sendall(_chunked_head("/v1/chat/completions") + f"{len(data):x};ext=1\r\n".encode() + data
                          + b"\r\n" + tail)
                status, _, body = _read_response(s, timeout=5)
                assert status == 200, body


def test_ops_body_every_framing_malformed_chunk_size_is_a_named_400():
    with live_server() as base:
        with socket.create_connection(_addr(base), timeout=10) as s:
            s.sendall(_chunked_head("/v1/chat/completions") + b"zz\r\nabc\r\n")
            status, _, body = _read_response(s, timeout=5)
        doc = json.loads(body)
        assert status == 400 and doc["error"]["code"] == "malformed_request" and doc["error"]["param"] is None


# ------------------------------------------------------------------ ops.buffer.bounded

def test_ops_buffer_bounded_partial_bodies_from_one_address():
    """Connections that announce a body and send most of it, never the rest, are held by the
    loop; their bytes together are bounded per address. Before: each held its partial body
    until its deadline, so many connections held many times the limit."""
    limit = 1024 * 1024
    with live_server(env={"COLI_CLIENT_BUFFER_BYTES": str(limit)}) as base, _sockets(0) as held:
        part = b" " * (300 * 1024)
        for _ in range(3):  # 900 KiB held: within the bound
            s = socket.create_connection(_addr(base), timeout=10)
            held.append(s)
            s.sendall(_request().split(b"Content-Length")[0] + b"Content-Length: 4000000\r\n\r\n" + part)
        time.sleep(0.3)
        s = socket.create_connection(_addr(base), timeout=10)
        held.append(s)
        s.sendall(_request().split(b"Content-Length")[0] + b"Content-Length: 4000000\r\n\r\n" + part)
        status, headers, body = _read_response(s, timeout=5)
        assert status == 429 and json.loads(body)["error"]["code"] == "request_buffer_full"
        assert headers["retry-after"] == "1"
        for s in held[:3]:  # the three within the bound are still being read
            s.setblocking(False)
            with pytest.raises(BlockingIOError):
                s.recv(1)
        with socket.create_connection(_addr(base), timeout=10, source_address=("127.0.0.2", 0)) as other:
            other.sendall(_request())  # another address is unaffected
            assert _read_response(other)[0] == 200


# ------------------------------------------------------------------ ops.connections.cap-at-accept

def test_ops_connections_cap_at_accept_idle_sockets_cannot_lock_others_out():
    """Before: the cap was applied when a request arrived, so 1,000 connections sending
    nothing filled the worker's connection limit and nobody else was accepted until the
    idle timeout closed them."""
    _raise_fd_limit(2200)
    with live_server("--max-client-connections", "8") as base, _sockets(0) as held:
        for _ in range(1000):
            held.append(socket.create_connection(_addr(base), timeout=10))
        time.sleep(0.5)
        assert _health_time(base, source="127.0.0.2") < STALL
        extra = held[-1]  # beyond the cap: answered 429 as soon as it speaks
        extra.sendall(_request())
        status, headers, body = _read_response(extra, timeout=5)
        assert status == 429 and json.loads(body)["error"]["code"] == "too_many_connections"
        assert headers["retry-after"] == "1"
        with socket.create_connection(_addr(base), timeout=10) as s:  # even silent, it is closed
            assert _closed_after(s, timeout=5)


# ------------------------------------------------------------------ ops.refused.no-drain

def test_ops_refused_no_drain_huge_content_length_holds_no_thread():
    """Before: the 413 went out, then the thread drained the announced body for the rest of
    the read deadline, so 2 such clients took both threads and a chat got 429."""
    with live_server("--threads", "2") as base, _sockets(0) as held:
        for _ in range(4):
            s = socket.create_connection(_addr(base), timeout=10)
            held.append(s)
            s.sendall(_request().split(b"Content-Length")[0] + b"Content-Length: 100000000\r\n\r\n" + b"{")
            status, headers, body = _read_response(s, timeout=5)
            assert status == 413 and json.loads(body)["error"]["code"] == "request_too_large"
            assert headers["connection"] == "close"
            assert _closed_after(s, timeout=3)
        with socket.create_connection(_addr(base), timeout=30) as s:
            s.sendall(_request())
            assert _read_response(s)[0] == 200


def test_ops_refused_no_drain_expect_continue_without_a_body_holds_no_thread():
    """A client that asks for 100 Continue and then sends nothing waits on the event loop, not
    on a thread. Before: the thread waited for the body until the read deadline."""
    with live_server("--threads", "2") as base, _sockets(0) as held:
        for _ in range(4):
            s = socket.create_connection(_addr(base), timeout=10)
            held.append(s)
            s.sendall(_request(extra="Expect: 100-continue\r\n").split(b"\r\n\r\n")[0] + b"\r\n\r\n")
            s.settimeout(5)
            assert s.recv(64).startswith(b"HTTP/1.1 100 Continue")
        with socket.create_connection(_addr(base), timeout=30) as s:
            s.sendall(_request())
            assert _read_response(s)[0] == 200


def test_ops_refused_no_drain_key_refusal_with_body_unsent():
    """A request refused by the key check before it is whole still gets the key refusal,
    once its body is in; one announcing a body over the limit is answered at once and closed."""
    with live_server("--api-key", "sekrit", "--threads", "1") as base, _sockets(0) as held:
        for _ in range(3):
            s = socket.create_connection(_addr(base), timeout=10)
            held.append(s)
            s.sendall(_request().split(b"Content-Length")[0] + b"Content-Length: 100000000\r\n\r\n")
            status, headers, _ = _read_response(s, timeout=5)
            assert status in (401, 413) and headers["connection"] == "close"
        with socket.create_connection(_addr(base), timeout=30) as s:
            s.sendall(_request(extra="Authorization: Bearer sekrit\r\n"))
            assert _read_response(s)[0] == 200


# ------------------------------------------------------------------ ops.admission.bounded

def test_ops_admission_bounded_one_address_leaves_the_spare_threads_to_others():
    """Before: one address could take every thread (pipelined or parallel requests), and
    /health from everyone else got 429 queue_full."""
    with live_server("--threads", "6", "--kv-slots", "1", "--debug-step-delay", "0.3") as base, _sockets(0) as held:
        slow = json.dumps({**CHAT, "max_tokens": 20}).encode()
        for _ in range(2):  # two slow chats: this address's share (6 threads - 4 spare)
            s = socket.create_connection(_addr(base), timeout=30)
            held.append(s)
            s.sendall(_request().split(b"Content-Length")[0] + b"Content-Length: %d\r\n\r\n" % len(slow) + slow)
        time.sleep(0.5)
        with socket.create_connection(_addr(base), timeout=10) as s:
            start = time.monotonic()
            s.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            status, headers, body = _read_response(s, timeout=10)
            assert status == 429 and json.loads(body)["error"]["code"] == "queue_full"
            assert time.monotonic() - start < 2.0 and headers["retry-after"] == "1"
        assert _health_time(base, source="127.0.0.2") < STALL  # another address is served


# ------------------------------------------------------------------ ops.http-errors.envelope

@pytest.mark.parametrize("raw,status,code", [
    (b"GARBAGE\r\n\r\n", 400, "malformed_request"),
    (b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 414, "uri_too_long"),
    (b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"a" * 9000 + b"\r\n\r\n", 431, "headers_too_large"),
    (b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"a" * 70000 + b"\r\n\r\n", 431, "headers_too_large"),
    (b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 501,
     "unsupported_transfer_coding"),
    (b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: gzip\r\n\r\n", 400,
     "malformed_request"),
    (b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2\r\nTransfer-Encoding: chunked"
     b"\r\n\r\n", 400, "malformed_request"),
    (b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n",
     400, "malformed_request"),
    (b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nExpect: teapot\r\nContent-Length: 0\r\n\r\n", 417,
     "expectation_failed"),
], ids=["400", "414", "431", "431-head", "501", "400-gzip", "400-cl-te", "400-two-cl", "417"])
def test_ops_http_errors_envelope(raw, status, code):
    """Before: gunicorn answered these with its own HTML pages."""
    with live_server() as base:
        with socket.create_connection(_addr(base), timeout=10) as s:
            s.sendall(raw)
            got, headers, body = _read_response(s, timeout=5)
        assert got == status and headers["content-type"] == "application/json"
        doc = json.loads(body)
        assert doc["error"]["code"] == code and doc["error"]["type"] == "invalid_request_error"
        assert doc["error"]["param"] is None


# ------------------------------------------------------------------ control socket

def test_no_gunicorn_control_socket_is_left_for_other_servers_to_replace():
    """Before: each server made $XDG_RUNTIME_DIR/gunicorn.ctl (or ~/.gunicorn/gunicorn.ctl),
    so a second server run by the same user replaced the first one's and deleted it on
    exit, and `worker add` on it started a second model worker on the same --kv-dir."""
    with tempfile.TemporaryDirectory() as home:
        env = {"HOME": home, "XDG_RUNTIME_DIR": home}
        with live_server(env=env), live_server(env=env):
            found = [os.path.join(d, f) for d, _, files in os.walk(home) for f in files if f.endswith(".ctl")]
            assert found == []
