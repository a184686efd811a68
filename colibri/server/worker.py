"""gunicorn's gthread worker, changed so that an HTTP thread is only ever given a request
that has fully arrived, only while one is free, and so that no one connection can stall the
event loop or hold memory or threads beyond fixed bounds.

Stock gthread hands a connection to its thread pool as soon as it is readable. A client
that trickles its request a byte at a time then holds a thread for as long as it likes,
and requests beyond the pool wait in the executor's unbounded queue, where no 429, queue
timeout or disconnect check reaches them. Here instead:

- The event loop reads each request, headers and body, without blocking (framing.py); a
  thread gets the connection once the request is complete. Every body framing passes the
  4 MiB limit there: a chunked body is decoded as it arrives and refused with 413 the moment
  it passes the limit (rule ops.body.every-framing). Reading has one deadline per request,
  headers and body together (`--read-deadline`); past it the client gets 408
  `request_timeout` and the connection is closed (rule ops.read-deadline). `Expect:
  100-continue` is answered from the loop, which then reads the body like any other.
- The bytes of unfinished requests are bounded: 16 MiB per client address and 64 MiB in
  all; the connection that would pass a bound gets 429 `request_buffer_full`
  (rule ops.buffer.bounded).
- A complete request finding every thread busy gets the first thread back within
  HANDOFF_WAIT (100 ms: a thread's answer reaches its client just before the thread is free
  again), else it is answered from the event loop with 429 `queue_full`: the threads are
  sized from the KV slots plus the admission queue plus four spare, so a busy pool means
  the scheduler's queue is full (rule ops.admission.bounded). One address may hold all
  threads but the four spare, so a client flooding requests leaves a thread for everyone
  else's /health and chat.
- One client address may hold at most `--max-client-connections` open connections, counted
  when a connection is accepted: one more is answered 429 `too_many_connections` and closed
  at once, so idle connections from one address cannot fill the worker's connection limit
  (rules ops.connections.per-client, ops.connections.cap-at-accept).
- Nothing on the loop thread waits on a client (rule ops.loop.never-waits). A connection a
  thread is done with is closed by half-closing it and draining what the client still sends
  for at most LINGER seconds, on the loop, between everyone else's events; gunicorn's own
  graceful close (a blocking drain, whose short wait our socket wrapper used to stretch to
  the request's whole read deadline) never runs there. A connection the loop refuses for
  what it sent (too slow, too much) gets its answer and is closed at once.
- A request refused from its headers alone (a declared body over the limit, a framing
  gunicorn rejects) is answered with `Connection: close` and its connection closed: no
  thread drains a body that may never come (rule ops.refused.no-drain). gunicorn's own
  400/414/417/431/501 answers come in the JSON envelope (rule ops.http-errors.envelope).
- An idle kept-alive connection is closed after `--idle-timeout` (15 s: longer than the 5 s
  after which httpx stops reusing one); a request that arrived just as that time ran out is
  served, not reset (rule ops.keepalive.idle).

The socket a thread reads and writes through is request_socket.py; the answers the loop
writes itself are raw_responses.py; the limits come from gunicorn's config (worker_config.py).
"""
from __future__ import annotations

import errno
import selectors
import socket
import time
from collections import defaultdict, deque
from functools import partial
from typing import Any

from gunicorn.workers.gthread import TConn, ThreadWorker

from ..settings import SPARE_THREADS
from .errors import ApiError, error
from .framing import MORE, READY, RequestReader
from .raw_responses import answer, parser_refusal, request_path
from .request_socket import RequestSocket, has_bytes
from .worker_config import limit

#: A thread's answer reaches its client a moment before the thread is back in the pool (it
#: still closes the response and logs): a request finding every thread busy waits this long
#: for one before it is refused, so a client sending its next request at once is served.
HANDOFF_WAIT = 0.1
#: A closing connection's unread bytes are drained (so its last answer is not cut off by a
#: reset) for at most this long and this much, on the loop, without blocking it.
LINGER = 2.0
LINGER_BYTES = 64 * 1024
MAX_LINGERING = 1024  # beyond this many closing connections, the oldest is closed outright
ACCEPT_BATCH = 64
CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"


class Arriving:
    """A connection whose next request is being read by the event loop: its read deadline
    (set by the request's first byte), when the wait for that byte began, and its reader."""

    __slots__ = ("conn", "deadline", "since", "reader", "held")

    def __init__(self, conn: Any):
        self.conn = conn
        self.deadline = float("inf")
        self.since = time.monotonic()
        self.reader = RequestReader()
        self.held = 0  # bytes of this request counted against the buffer bounds


class Waiting:
    """A complete request that found every thread busy: it gets the first thread to come back,
    or 429 `queue_full` at `until`."""

    __slots__ = ("conn", "deadline", "until", "body_in_hand")

    def __init__(self, conn: Any, deadline: float, until: float, body_in_hand: bool):
        self.conn = conn
        self.deadline = deadline
        self.until = until
        self.body_in_hand = body_in_hand


class Lingering:
    """A connection being closed on the loop: its last answer sent (or, for a connection
    refused at accept, still to send once its request line shows the envelope), its write
    side shut, what the client still sends drained until it closes or LINGER passes."""

    __slots__ = ("sock", "until", "drained", "refusal")

    def __init__(self, sock: socket.socket, refusal: ApiError | None):
        self.sock = sock
        self.until = time.monotonic() + LINGER
        self.drained = 0
        self.refusal = refusal


class AdmittingThreadWorker(ThreadWorker):  # type: ignore[misc]
    wsgi: Any  # the application, set by gunicorn's load_wsgi

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.in_flight = 0  # connections handed to a thread and not yet back
        self.per_address: dict[str, set[int]] = defaultdict(set)  # address -> accept numbers of its open connections
        self.accepted = 0
        self.arriving: dict[int, Arriving] = {}  # fd -> connection being read
        self.waiting: deque[Waiting] = deque()  # complete requests waiting HANDOFF_WAIT for a thread
        self.lingering: dict[int, Lingering] = {}  # fd -> connection being closed (oldest first)
        self.held_by: dict[str, int] = defaultdict(int)  # address -> bytes of its unfinished requests
        self.held_total = 0
        self.busy_by: dict[str, int] = defaultdict(int)  # address -> threads its requests hold
        # The limits `colibri serve` put on gunicorn's config (server/worker_config.py).
        self.read_deadline = float(limit(self.cfg, "read_deadline"))
        self.write_timeout = float(limit(self.cfg, "write_timeout"))
        self.max_client_connections = int(limit(self.cfg, "max_client_connections"))
        self.client_buffer = int(limit(self.cfg, "client_buffer_bytes"))  # bytes of unfinished requests per address
        self.total_buffer = int(limit(self.cfg, "total_buffer_bytes"))  # and in all (rule ops.buffer.bounded)

    def load_wsgi(self) -> None:
        super().load_wsgi()
        app = self.wsgi

        def closing_when_body_unread(environ: dict[str, Any], start_response: Any) -> Any:
            # A request handed over on its headers alone (a declared body over the limit, say)
            # is answered with "Connection: close": the connection then closes instead of a
            # thread draining a body the client may never send (rule ops.refused.no-drain).
            if not getattr(environ.get("gunicorn.socket"), "body_in_hand", True):
                response = getattr(start_response, "__self__", None)
                if response is not None and hasattr(response, "force_close"):
                    response.force_close()
            return app(environ, start_response)

        self.wsgi = closing_when_body_unread

    # --------------------------------------------------------------- connections in and out

    def accept(self, listener: Any) -> None:
        # Up to ACCEPT_BATCH connections per wake-up, not one: under a connection flood the
        # listen backlog is shared with everyone else, and draining it one connection per
        # loop turn left a well-behaved client's connection queued behind the flood.
        for _ in range(ACCEPT_BATCH):
            if self.nr_conns >= self.worker_connections:
                return
            try:
                client, addr = listener.accept()
            except OSError as e:
                if e.errno not in (errno.EAGAIN, errno.ECONNABORTED, errno.EWOULDBLOCK, errno.EMFILE, errno.ENFILE):
                    raise
                return
            self._accepted(client, addr, listener)

    def _accepted(self, client: socket.socket, addr: Any, listener: Any) -> None:
        address = addr[0] if isinstance(addr, tuple) else str(addr)
        if len(self.per_address.get(address, ())) >= self.max_client_connections:
            self._settle(address)
        if len(self.per_address.get(address, ())) >= self.max_client_connections:
            # Counted at accept, not when a request arrives: connections that never send a
            # byte must not fill the worker's connection limit (rule ops.connections.cap-at-accept).
            self._linger(client, refusal=error("too_many_connections"))
            return
        self.nr_conns += 1
        conn = TConn(self.cfg, RequestSocket(client, self.write_timeout), addr, listener.getsockname())
        conn.address = address
        self.accepted += 1
        conn.number = self.accepted
        self.per_address[address].add(conn.number)
        self._read_next(conn)

    def _settle(self, address: str) -> None:
        """Before refusing a client for its connection cap, count only what is still open. On a
        busy machine one turn of the loop can hold a new connection together with news of older
        ones: a request a thread has answered on a connection that then closes (its completion
        waits in the method queue) and a connection the client has closed (its end not read
        yet). Neither may count against the client: run the finished threads' callbacks, then
        let go of this address's idle connections whose client is gone. Only connections with
        no byte of a next request are looked at, by a peek that reads nothing."""
        self.method_queue.run_callbacks(None)
        for state in [a for a in self.arriving.values() if a.conn.address == address and not a.reader.started]:
            try:
                closed = state.conn.sock._sock.recv(1, socket.MSG_PEEK) == b""
            except (BlockingIOError, InterruptedError):
                closed = False
            except OSError:
                closed = True
            if closed:
                self._forget(state.conn)
                self._drop(state.conn)

    def _closed(self, conn: Any) -> None:
        """Bookkeeping for a connection that is gone (whichever path closed it)."""
        self.nr_conns -= 1
        address = getattr(conn, "address", None)
        if address is not None and conn.number in self.per_address.get(address, ()):
            self.per_address[address].discard(conn.number)
            if not self.per_address[address]:
                del self.per_address[address]

    def _drop(self, conn: Any, reply: bytes | None = None) -> None:
        """Answer (best effort, never blocking) and close a connection the event loop holds.
        No lingering: the client is refused for what it sends (too slow, too much), and the
        sooner its own sends fail, the sooner it reads the answer."""
        raw = conn.sock._sock if isinstance(conn.sock, RequestSocket) else conn.sock
        self._closed(conn)
        if reply:
            try:
                raw.setblocking(False)
                raw.send(reply)
                raw.shutdown(socket.SHUT_WR)
            except OSError:
                pass
        self._close_quietly(raw)

    def _linger(self, raw: socket.socket, reply: bytes | None = None, refusal: ApiError | None = None) -> None:
        """Send `reply` without blocking, shut the write side, and drain until the client closes
        or LINGER passes, on the loop: closing a socket with unread bytes would reset it and
        could cut the answer off before the client reads it."""
        try:
            raw.setblocking(False)
            if reply:
                raw.send(reply)
            if refusal is None:
                raw.shutdown(socket.SHUT_WR)
            fd = raw.fileno()
            self.poller.register(raw, selectors.EVENT_READ, partial(self._on_lingering, fd))
        except (OSError, ValueError, KeyError):
            self._close_quietly(raw)
            return
        self.lingering[fd] = Lingering(raw, refusal)
        while len(self.lingering) > MAX_LINGERING:
            self._end_linger(next(iter(self.lingering)))

    def _on_lingering(self, fd: int, _sock: Any) -> None:
        state = self.lingering.get(fd)
        if state is None:
            return
        try:
            data = state.sock.recv(LINGER_BYTES)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if state.refusal is not None:
            self._send_refusal(state, data)
        state.drained += len(data)
        if not data or state.drained >= LINGER_BYTES:
            self._end_linger(fd)

    def _send_refusal(self, state: Lingering, data: bytes) -> None:
        assert state.refusal is not None
        try:
            state.sock.send(answer(state.refusal, request_path(data)))
            state.sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        state.refusal = None

    def _end_linger(self, fd: int) -> None:
        state = self.lingering.pop(fd)
        if state.refusal is not None:
            self._send_refusal(state, b"")
        try:
            self.poller.unregister(state.sock)
        except (KeyError, ValueError, OSError):
            pass
        self._close_quietly(state.sock)

    @staticmethod
    def _close_quietly(raw: socket.socket) -> None:
        try:
            raw.close()
        except OSError:
            pass

    # --------------------------------------------------------------- reading on the event loop

    def _read_next(self, conn: Any) -> None:
        """Watch the connection until its next request has arrived (or its time is up)."""
        conn.sock.setblocking(False)
        fd = conn.sock.fileno()
        state = self.arriving[fd] = Arriving(conn)
        self.poller.register(conn.sock, selectors.EVENT_READ, partial(self._on_readable, conn))
        if conn.sock.buffered:  # read ahead of the last request: the next one has begun
            ahead = bytes(conn.sock.buffered)
            conn.sock.buffered = bytearray()
            self._feed(conn, state, ahead)

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
        self._feed(conn, state, data)

    def _feed(self, conn: Any, state: Arriving, data: bytes) -> None:
        reader = state.reader
        if not reader.started:
            state.deadline = time.monotonic() + self.read_deadline  # the request starts with its first byte
        outcome = reader.feed(data)
        if outcome == READY:
            self._arrived(conn)
            return
        if outcome != MORE:  # the error-table code of a refusal
            self._refuse(conn, outcome)
            return
        held = reader.held
        self.held_total += held - state.held
        self.held_by[conn.address] += held - state.held
        state.held = held
        if self.held_by[conn.address] > self.client_buffer or self.held_total > self.total_buffer:
            self._refuse(conn, "request_buffer_full")  # rule ops.buffer.bounded
            return
        if reader.expects_continue:
            reader.expects_continue = False
            try:
                conn.sock._sock.send(CONTINUE)
            except OSError:
                pass

    def _refuse(self, conn: Any, code: str) -> None:
        """Answer a request the loop refuses before any thread sees it, and close."""
        reader = self.arriving[conn.sock.fileno()].reader
        path = request_path(reader.whole or reader.head or reader.raw)
        self._forget(conn)
        self._drop(conn, answer(error(code), path))

    def _forget(self, conn: Any) -> None:
        fd = conn.sock.fileno()
        state = self.arriving.pop(fd, None)
        if state is not None:
            self.held_total -= state.held
            self.held_by[conn.address] -= state.held
            if not self.held_by[conn.address]:
                del self.held_by[conn.address]
            try:
                self.poller.unregister(conn.sock)
            except (KeyError, ValueError, OSError):
                pass

    def _share(self) -> int:
        """Threads one address may hold at once."""
        threads = int(self.cfg.threads)
        return threads - SPARE_THREADS if threads > SPARE_THREADS else threads

    def _may_start(self, conn: Any) -> bool:
        return self.in_flight < self.cfg.threads and self.busy_by.get(conn.address, 0) < self._share()

    def _arrived(self, conn: Any) -> None:
        """A whole request is in: a thread serves it, or waits HANDOFF_WAIT for one."""
        state = self.arriving[conn.sock.fileno()]
        self._forget(conn)
        conn.sock.buffered = bytearray(state.reader.whole)
        if self._may_start(conn):
            self._start(conn, state.deadline, state.reader.body_in_hand)
        else:
            self.waiting.append(Waiting(conn, state.deadline, time.monotonic() + HANDOFF_WAIT,
                                        state.reader.body_in_hand))

    def _start(self, conn: Any, deadline: float, body_in_hand: bool) -> None:
        self.in_flight += 1
        self.busy_by[conn.address] += 1
        conn.sock.begin(deadline if deadline != float("inf") else time.monotonic() + self.read_deadline, body_in_hand)
        conn.data_ready = True
        fs = self.tpool.submit(self.handle, conn)
        fs.add_done_callback(lambda fut: self.method_queue.defer(self._thread_done, conn, fut))

    def _thread_done(self, conn: Any, fut: Any) -> None:
        self.in_flight -= 1
        self.busy_by[conn.address] -= 1
        if not self.busy_by[conn.address]:
            del self.busy_by[conn.address]
        self.finish_request(conn, fut)
        for w in list(self.waiting):  # the oldest waiting request that may have a thread now
            if self.in_flight >= self.cfg.threads:
                break
            if self._may_start(w.conn):
                self.waiting.remove(w)
                self._start(w.conn, w.deadline, w.body_in_hand)

    def _refuse_waited(self, now: float) -> None:
        """Requests no thread came back for within HANDOFF_WAIT: the pool (or the address's
        share of it) is really full."""
        while self.waiting and self.waiting[0].until <= now:
            w = self.waiting.popleft()
            self._drop(w.conn, answer(error("queue_full", "The server is at capacity: every request thread is "
                                                          "busy and the admission queue is full."),
                                      request_path(w.conn.sock.buffered)))

    def wait_for_and_dispatch_events(self, timeout: float) -> None:
        if self.waiting:  # wake for the first waiting request's refusal, not a second later
            timeout = min(timeout, max(0.0, self.waiting[0].until - time.monotonic()))
        super().wait_for_and_dispatch_events(timeout)

    # --------------------------------------------------------------- on a request thread

    def handle_error(self, req: Any, client: Any, addr: Any, exc: BaseException) -> None:
        """gunicorn's parser refusals in the JSON envelope, not its HTML pages."""
        code = parser_refusal(exc)
        if code is None:
            super().handle_error(req, client, addr, exc)
            return
        path = getattr(req, "path", None) or "/"
        try:
            client.sendall(answer(error(code), path.encode("latin-1", "replace")))
        except OSError:
            pass
        self.log.debug("refused a request gunicorn could not parse: %s", exc)

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
            # Not gunicorn's graceful close: it blocks until the client closes or sends
            # (rule ops.loop.never-waits).
            self._closed(conn)
            self._linger(conn.sock._sock)

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
            if not force and has_bytes(conn.sock):
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
        if force:
            for fd in list(self.lingering):
                self._end_linger(fd)

    def murder_pending(self) -> None:
        """Requests past their read deadline get 408; connections that never sent a byte are
        closed after the keep-alive time; lingering closes past LINGER end."""
        now = time.monotonic()
        self._refuse_waited(now)
        for state in list(self.arriving.values()):
            conn = state.conn
            if state.deadline == float("inf"):
                if state.since < now - self.cfg.keepalive:
                    self._forget(conn)
                    self._drop(conn)
            elif state.deadline <= now:
                self._refuse(conn, "request_timeout")
        while self.lingering:  # oldest first: stop at the first one still in its time
            fd, lingering = next(iter(self.lingering.items()))
            if lingering.until > now:
                break
            self._end_linger(fd)
