"""gunicorn's gthread worker with a cumulative read deadline (the slowloris defence).

A client that sends its request a byte at a time would otherwise hold an HTTP thread for as
long as it likes. Each request gets `read_deadline` seconds in total to deliver its headers
and body; past it the client receives 408 `request_timeout` and the connection is closed.
The deadline covers reading only: once the request is in, writing the answer (a long
stream, say) is not limited.
"""
from __future__ import annotations

import json
import os
import socket
import time
from typing import Any

from gunicorn.workers.gthread import ThreadWorker

READ_DEADLINE = float(os.environ.get("COLI_READ_DEADLINE", "30"))

_TIMEOUT_BODY = json.dumps({"error": {"message": "The request was not received within the read deadline.",
                                      "type": "invalid_request_error", "param": None,
                                      "code": "request_timeout"}}).encode()


class DeadlineSocket:
    """A socket whose reads share one deadline; everything else is the socket's own.

    The socket's timeout is set to the time left only when the two differ by more than a
    tenth, so a request read in one or two calls costs no extra system call (a read may
    overrun the deadline by at most a tenth of what was left when it started)."""

    def __init__(self, sock: socket.socket):
        self._sock = sock
        self.deadline = time.monotonic() + READ_DEADLINE
        self._timeout: float | None = sock.gettimeout()

    def restart(self) -> None:
        self.deadline = time.monotonic() + READ_DEADLINE

    def _set_timeout(self, value: float | None) -> None:
        self._sock.settimeout(value)
        self._timeout = value

    def _wait(self) -> None:
        left = self.deadline - time.monotonic()
        if left <= 0:
            self._expire()
        t = self._timeout
        if t is None or t <= 0 or left < 0.9 * t or t < 0.9 * left:
            self._set_timeout(left)

    def _expire(self) -> None:
        try:
            self._set_timeout(1.0)
            self._sock.sendall(b"HTTP/1.1 408 Request Timeout\r\nContent-Type: application/json\r\nConnection: close\r\n"
                               + f"Content-Length: {len(_TIMEOUT_BODY)}\r\n\r\n".encode() + _TIMEOUT_BODY)
        except OSError:
            pass
        raise TimeoutError("read deadline passed")

    def _read(self, fn: Any, *args: Any) -> Any:
        self._wait()
        try:
            return fn(*args)
        except TimeoutError:
            self._expire()
            raise

    def recv(self, n: int, *flags: Any) -> bytes:
        return self._read(self._sock.recv, n, *flags)  # type: ignore[no-any-return]

    def recv_into(self, buf: Any, *args: Any) -> int:
        return self._read(self._sock.recv_into, buf, *args)  # type: ignore[no-any-return]

    def setblocking(self, flag: bool) -> None:
        # gunicorn makes the socket blocking before it handles a request: a timeout of the
        # time left is blocking too, and saves the read that follows a second system call.
        if flag:
            self._set_timeout(max(1e-3, self.deadline - time.monotonic()))
        else:
            self._set_timeout(0.0)

    settimeout = _set_timeout

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


class DeadlineThreadWorker(ThreadWorker):  # type: ignore[misc]
    def handle(self, conn: Any) -> Any:
        if not isinstance(conn.sock, DeadlineSocket):
            conn.sock = DeadlineSocket(conn.sock)
        conn.sock.restart()
        return super().handle(conn)

    def handle_request(self, req: Any, conn: Any) -> Any:
        # The request line and headers are in; the body is read by the app under the same
        # deadline. Writing the answer is not limited, so the deadline is lifted for it.
        if isinstance(conn.sock, DeadlineSocket):
            conn.sock.restart()  # a fresh window for the body the app reads
        return super().handle_request(req, conn)
