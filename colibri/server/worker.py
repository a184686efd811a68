"""gunicorn's gthread worker, changed so that an HTTP thread is only ever given a request
that has fully arrived, and only while one is free.

Stock gthread hands a connection to its thread pool as soon as it is readable. A client
that trickles its request a byte at a time then holds a thread for as long as it likes,
and requests beyond the pool wait in the executor's unbounded queue, where no 429, queue
timeout or disconnect check reaches them. Here instead:

- The event loop reads each request (headers and, when its length is known, body) without
  blocking; a thread gets the connection once the request is complete. Reading has one
  deadline per request, headers and body together (`--read-deadline`); past it the client
  gets 408 `request_timeout` and the connection is closed (rule ops.read-deadline).
- A complete request finding every thread busy gets the first thread back within
  HANDOFF_WAIT (100 ms: a thread's answer reaches its client just before the thread is free
  again), else it is answered from the event loop with 429 `queue_full`: the threads are
  sized from the KV slots plus the admission queue plus a few spare, so a busy pool means
  the scheduler's queue is full (rule ops.admission.bounded).
- One client address may hold at most `--max-client-connections` open connections; a
  request on one more is answered 429 `too_many_connections` (rule ops.connections.per-client).
- An idle kept-alive connection is closed after `--idle-timeout` (15 s: longer than the 5 s
  after which httpx stops reusing one); a request that arrived just as that time ran out is
  served, not reset (rule ops.keepalive.idle).

A request that cannot be framed from its headers (chunked, `Expect: 100-continue`) is
handed over once its headers are in; the thread then reads its body under the same deadline.
"""
from __future__ import annotations

import errno
import os
import re
import selectors
import socket
import time
from collections import defaultdict, deque
from functools import partial
from typing import Any

from gunicorn.workers.gthread import TConn, ThreadWorker

from .body import MAX_BODY  # a larger declared body is complete as it stands: refused from its headers
from .errors import ApiError, error

READ_DEADLINE = float(os.environ.get("COLI_READ_DEADLINE", "30"))
#: A send that cannot make progress for this long drops the client (it stopped reading).
WRITE_TIMEOUT = float(os.environ.get("COLI_WRITE_TIMEOUT", "60"))
#: A thread's answer reaches its client a moment before the thread is back in the pool (it
#: still closes the response and logs): a request finding every thread busy waits this long
#: for one before it is refused, so a client sending its next request at once is served.
HANDOFF_WAIT = 0.1
MAX_CLIENT_CONNECTIONS = int(os.environ.get("COLI_MAX_CLIENT_CONNECTIONS", "64"))
MAX_HEADER_BYTES = 64 * 1024  # beyond this, gunicorn's own parser refuses the request

_CONTENT_LENGTH = re.compile(rb"\r\ncontent-length:[ \t]*([0-9]+)[ \t]*\r\n", re.IGNORECASE)
_CHUNKED = re.compile(rb"\r\ntransfer-encoding:[^\r\n]*chunked", re.IGNORECASE)
_EXPECT = re.compile(rb"\r\nexpect:[ \t]*100-continue", re.IGNORECASE)


def request_complete(buf: bytes | bytearray) -> bool:
    """Whether `buf` holds a whole request a thread can serve without waiting on the client
    (or one the thread will refuse from its headers alone)."""
    end = buf.find(b"\r\n\r\n")
    if end < 0:
        return len(buf) > MAX_HEADER_BYTES
    head = bytes(buf[:end + 2])
    if _CHUNKED.search(head):
        return buf.endswith(b"\r\n0\r\n\r\n") or bool(_EXPECT.search(head))
    m = _CONTENT_LENGTH.search(head)
    if m is None or _EXPECT.search(head):
        return True
    length = int(m.group(1))
    return length > MAX_BODY or len(buf) - (end + 4) >= length


def answer(ex: ApiError, path: bytes, extra: dict[str, str] | None = None) -> bytes:
    """A whole HTTP/1.1 error response in the envelope the request's path implies."""
    body = ex.body("anthropic" if path.startswith(b"/v1/messages") else "openai")
    headers = {"Content-Type": "application/json", "Content-Length": str(len(body)), "Connection": "close",
               **ex.headers, **(extra or {})}
    reason = {408: "Request Timeout", 429: "Too Many Requests"}.get(ex.status, "Error")
    head = f"HTTP/1.1 {ex.status} {reason}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    return head.encode() + b"\r\n" + body


def _path(buf: bytes | bytearray) -> bytes:
    parts = bytes(buf[:buf.find(b"\r\n") if b"\r\n" in buf else 256]).split(b" ")
    return parts[1] if len(parts) > 1 else b"/"


def _has_bytes(sock: Any) -> bool:
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

    def __init__(self, sock: socket.socket):
        self._sock = sock
        self.buffered = bytearray()
        self.deadline = float("inf")
        self._timeout: float | None = sock.gettimeout()

    def start(self) -> None:
        """A new request begins: its deadline starts now."""
        self.deadline = time.monotonic() + READ_DEADLINE

    def _set_timeout(self, value: float | None) -> None:
        self._sock.settimeout(value)
        self._timeout = value

    def _wait(self) -> None:
        left = self.deadline - time.monotonic()
        if left <= 0:
            self._expire()
        t = self._timeout
        # Reset the timeout only when it is off by more than a tenth: a request read in one
        # or two calls costs no extra system call.
        if t is None or t <= 0 or left < 0.9 * t or t < 0.9 * left:
            self._set_timeout(left)

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
            self._expire()
            raise

    def _writing(self) -> None:
        if self._timeout != WRITE_TIMEOUT:
            self._set_timeout(WRITE_TIMEOUT)

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
            self._set_timeout(max(1e-3, min(self.deadline - time.monotonic(), WRITE_TIMEOUT)))
        else:
            self._set_timeout(0.0)

    settimeout = _set_timeout

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


class Arriving:
    """A connection whose next request is being read by the event loop: its read deadline
    (set by the request's first byte) and when the wait for that byte began."""

    __slots__ = ("conn", "deadline", "since")

    def __init__(self, conn: Any, deadline: float):
        self.conn = conn
        self.deadline = deadline
        self.since = time.monotonic()


class Waiting:
    """A complete request that found every thread busy: it gets the first thread to come back,
    or 429 `queue_full` at `until`."""

    __slots__ = ("conn", "deadline", "until")

    def __init__(self, conn: Any, deadline: float, until: float):
        self.conn = conn
        self.deadline = deadline
        self.until = until


class AdmittingThreadWorker(ThreadWorker):  # type: ignore[misc]
    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.in_flight = 0  # connections handed to a thread and not yet back
        self.per_address: dict[str, set[int]] = defaultdict(set)  # address -> accept numbers of its open connections
        self.accepted = 0
        self.arriving: dict[int, Arriving] = {}  # fd -> connection being read
        self.waiting: deque[Waiting] = deque()  # complete requests waiting HANDOFF_WAIT for a thread

    # --------------------------------------------------------------- connections in and out

    def accept(self, listener: Any) -> None:
        try:
            client, addr = listener.accept()
        except OSError as e:
            if e.errno not in (errno.EAGAIN, errno.ECONNABORTED, errno.EWOULDBLOCK):
                raise
            return
        self.nr_conns += 1
        conn = TConn(self.cfg, RequestSocket(client), addr, listener.getsockname())
        conn.address = addr[0] if isinstance(addr, tuple) else str(addr)
        self.accepted += 1
        conn.number = self.accepted
        self.per_address[conn.address].add(conn.number)
        self._read_next(conn)

    def _over_cap(self, conn: Any) -> bool:
        """Whether the address already held its quota of connections when this one was opened
        (judged when a request arrives, so a connection closed meanwhile frees its place)."""
        older = sum(1 for n in self.per_address[conn.address] if n < conn.number)
        return older >= MAX_CLIENT_CONNECTIONS

    def _closed(self, conn: Any) -> None:
        """Bookkeeping for a connection that is gone (whichever path closed it)."""
        address = getattr(conn, "address", None)
        if address is not None and conn.number in self.per_address.get(address, ()):
            self.per_address[address].discard(conn.number)
            if not self.per_address[address]:
                del self.per_address[address]

    def _drop(self, conn: Any, reply: bytes | None = None) -> None:
        """Answer (best effort, never blocking) and close a connection the event loop holds."""
        raw = conn.sock._sock if isinstance(conn.sock, RequestSocket) else conn.sock
        if reply:
            try:
                raw.setblocking(False)
                raw.send(reply)
                raw.shutdown(socket.SHUT_WR)
            except OSError:
                pass
        self.nr_conns -= 1
        self._closed(conn)
        try:
            raw.close()
        except OSError:
            pass

    # --------------------------------------------------------------- reading on the event loop

    def _read_next(self, conn: Any) -> None:
        """Watch the connection until its next request has arrived (or its time is up)."""
        conn.sock.setblocking(False)
        fd = conn.sock.fileno()
        started = time.monotonic() + READ_DEADLINE if conn.sock.buffered else float("inf")
        self.arriving[fd] = Arriving(conn, started)
        self.poller.register(conn.sock, selectors.EVENT_READ, partial(self._on_readable, conn))
        if conn.sock.buffered and request_complete(conn.sock.buffered):
            self._arrived(conn)

    def _on_readable(self, conn: Any, _sock: Any) -> None:
        sock = conn.sock
        state = self.arriving.get(sock.fileno())
        if state is None:
            return
        try:
            data = sock._sock.recv(256 * 1024)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:  # the client closed (between requests, that is the normal end)
            self._forget(conn)
            self._drop(conn)
            return
        if not sock.buffered:
            state.deadline = time.monotonic() + READ_DEADLINE  # the request starts with its first byte
        sock.buffered += data
        if request_complete(sock.buffered):
            self._arrived(conn)

    def _forget(self, conn: Any) -> None:
        fd = conn.sock.fileno()
        state = self.arriving.pop(fd, None)
        if state is not None:
            try:
                self.poller.unregister(conn.sock)
            except (KeyError, ValueError, OSError):
                pass

    def _arrived(self, conn: Any) -> None:
        """A whole request is in: a thread serves it, or the event loop refuses it now."""
        deadline = self.arriving[conn.sock.fileno()].deadline
        self._forget(conn)
        path = _path(conn.sock.buffered)
        if self._over_cap(conn):
            self._drop(conn, answer(error("too_many_connections"), path))
        elif self.in_flight >= self.cfg.threads:
            self.waiting.append(Waiting(conn, deadline, time.monotonic() + HANDOFF_WAIT))
        else:
            self._start(conn, deadline)

    def _start(self, conn: Any, deadline: float) -> None:
        self.in_flight += 1
        conn.sock.deadline = deadline if deadline != float("inf") else time.monotonic() + READ_DEADLINE
        conn.data_ready = True
        fs = self.tpool.submit(self.handle, conn)
        fs.add_done_callback(lambda fut: self.method_queue.defer(self._thread_done, conn, fut))

    def _thread_done(self, conn: Any, fut: Any) -> None:
        self.in_flight -= 1
        self.finish_request(conn, fut)
        while self.waiting and self.in_flight < self.cfg.threads:
            w = self.waiting.popleft()
            self._start(w.conn, w.deadline)

    def _refuse_waited(self, now: float) -> None:
        """Requests no thread came back for within HANDOFF_WAIT: the pool is really full."""
        while self.waiting and self.waiting[0].until <= now:
            w = self.waiting.popleft()
            self._drop(w.conn, answer(error("queue_full", "The server is at capacity: every request thread is "
                                                          "busy and the admission queue is full."),
                                      _path(w.conn.sock.buffered)))

    def wait_for_and_dispatch_events(self, timeout: float) -> None:
        if self.waiting:  # wake for the first waiting request's refusal, not a second later
            timeout = min(timeout, max(0.0, self.waiting[0].until - time.monotonic()))
        super().wait_for_and_dispatch_events(timeout)

    # --------------------------------------------------------------- gthread's hooks, rerouted

    def enqueue_req(self, conn: Any) -> None:
        # gthread calls this for a kept-alive connection with read-ahead bytes in its parser:
        # move them back in front of the socket and read the rest of the request here.
        ahead = conn.parser.unreader.take_buffered() if conn.parser is not None else b""
        conn.sock.buffered[:0] = ahead
        self._read_next(conn)

    def finish_request(self, conn: Any, fs: Any) -> None:
        try:
            keep = (fs.result() if not fs.cancelled() else False) and self.alive
        except Exception:
            keep = False
        if keep and (conn.sock.buffered or (conn.parser is not None and conn.parser.unreader.buf.getvalue())):
            self.enqueue_req(conn)  # the client already sent (part of) its next request
        elif keep:
            self.keepalived_conns.append(conn)
            conn.set_timeout()
            self.poller.register(conn.sock, selectors.EVENT_READ, partial(self.on_client_socket_readable, conn))
            conn.sock.setblocking(False)
        else:
            self.nr_conns -= 1
            self._closed(conn)
            try:
                conn.close(graceful=True)
            except OSError:
                pass

    def on_client_socket_readable(self, conn: Any, client: Any) -> None:
        self.poller.unregister(client)
        self.keepalived_conns.remove(conn)
        self._read_next(conn)
        self._on_readable(conn, client)

    def murder_keepalived(self, force: bool = False) -> None:
        now = time.monotonic()
        while self.keepalived_conns:
            conn = self.keepalived_conns[0]
            if conn.timeout > now and not force:
                break
            if not force and _has_bytes(conn.sock):
                # The client's next request arrived after the last poll: serve it. Closing a
                # socket with unread bytes resets it, and the client sees its request refused
                # with no answer (rule ops.keepalive.idle).
                self.on_client_socket_readable(conn, conn.sock)
                continue
            self.keepalived_conns.popleft()
            try:
                self.poller.unregister(conn.sock)
            except (OSError, KeyError, ValueError):
                pass
            self._drop(conn)

    def murder_pending(self) -> None:
        """Requests past their read deadline get 408; connections that never sent a byte are
        closed after the keep-alive time."""
        now = time.monotonic()
        self._refuse_waited(now)
        for state in list(self.arriving.values()):
            conn = state.conn
            if state.deadline == float("inf"):
                if state.since < now - self.cfg.keepalive:
                    self._forget(conn)
                    self._drop(conn)
            elif state.deadline <= now:
                self._forget(conn)
                self._drop(conn, answer(error("request_timeout"), _path(conn.sock.buffered)))
