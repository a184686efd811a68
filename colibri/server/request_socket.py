"""The client socket as a request thread sees it (server/worker.py hands it over once the
event loop has read the whole request): the bytes already read come first, reads share the
request's read deadline (408 `request_timeout` past it, rule ops.read-deadline), and sends
get a generous timeout of their own."""
from __future__ import annotations

import socket
import time
from typing import Any

from ..settings import BY_NAME
from .errors import error
from .raw_responses import answer


def has_bytes(sock: Any) -> bool:
    """Whether a non-blocking socket has bytes (or the client's close) waiting to be read."""
    raw = sock._sock if isinstance(sock, RequestSocket) else sock
    try:
        raw.recv(1, socket.MSG_PEEK)
    except (BlockingIOError, InterruptedError):
        return False
    except OSError:
        return True  # reset by the client: reading it says so
    return True


class RequestSocket:
    """The client socket as the thread sees it: bytes the event loop already read come first;
    further reads share the request's deadline; sends get a generous timeout of their own."""

    def __init__(self, sock: socket.socket, write_timeout: float = BY_NAME["write_timeout"].default):
        self._sock = sock
        #: a send that cannot make progress for this long drops the client (it stopped reading)
        self.write_timeout = write_timeout
        self.buffered = bytearray()
        self.deadline = float("inf")
        self._timeout: float | None = sock.gettimeout()
        #: A wait a caller asked for itself (gunicorn's drain after a response, its graceful
        #: close): reads wait at most this long, never the request's whole remaining deadline.
        self.cap: float | None = None
        self.responding = False  # bytes of the answer have been sent
        self.body_in_hand = True  # the request's whole body is in `buffered` (framing.py)

    def begin(self, deadline: float, body_in_hand: bool) -> None:
        """A request is handed to a thread."""
        self.deadline = deadline
        self.body_in_hand = body_in_hand
        self.cap = None
        self.responding = False

    def _set_timeout(self, value: float | None) -> None:
        self._sock.settimeout(value)
        self._timeout = value

    def _wait(self) -> None:
        left = self.deadline - time.monotonic()
        if left <= 0:
            self._expire()
        want = left if self.cap is None else min(left, self.cap)
        t = self._timeout
        # Reset the timeout only when it is off by more than a tenth: a request read in one
        # or two calls costs no extra system call.
        if t is None or t <= 0 or want < 0.9 * t or t < 0.9 * want:
            self._set_timeout(want)

    def _expire(self) -> None:
        try:
            self._set_timeout(1.0)
            self._sock.sendall(answer(error("request_timeout"), b"/"))
        except OSError:
            pass
        raise TimeoutError("read deadline passed")

    def _take(self, n: int) -> bytes:
        out = bytes(self.buffered[:n])
        del self.buffered[:n]
        return out

    def recv(self, n: int, *flags: Any) -> bytes:
        if self.buffered and not flags:
            return self._take(n)
        self._wait()
        try:
            return self._sock.recv(n, *flags)
        except TimeoutError:
            if self.cap is not None and self.deadline > time.monotonic():
                raise  # the caller's own short wait ran out, not the request's deadline
            self._expire()
            raise

    def recv_into(self, buf: Any, nbytes: int = 0, *flags: Any) -> int:
        if self.buffered and not flags:
            data = self._take(nbytes or len(buf))
            buf[:len(data)] = data
            return len(data)
        self._wait()
        try:
            return self._sock.recv_into(buf, nbytes, *flags)
        except TimeoutError:
            if self.cap is not None and self.deadline > time.monotonic():
                raise
            self._expire()
            raise

    def _writing(self) -> None:
        self.responding = True
        if self._timeout != self.write_timeout:
            self._set_timeout(self.write_timeout)

    def sendall(self, data: Any, *flags: Any) -> None:
        self._writing()
        self._sock.sendall(data, *flags)

    def send(self, data: Any, *flags: Any) -> int:
        self._writing()
        return self._sock.send(data, *flags)

    def setblocking(self, flag: bool) -> None:
        # gunicorn makes the socket blocking before it serves a request: a timeout of the time
        # left is blocking too, and keeps the deadline.
        if flag:
            self.cap = None
            self._set_timeout(max(1e-3, min(self.deadline - time.monotonic(), self.write_timeout)))
        else:
            self._set_timeout(0.0)

    def settimeout(self, value: float | None) -> None:
        self.cap = value
        self._set_timeout(value)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)
