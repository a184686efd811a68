"""Noticing a client that hung up while its JSON answer is being computed: the WSGI server
gives us the socket; a readable socket whose peek returns no bytes has been closed.

`poll`, not `select`: select cannot watch a descriptor numbered 1024 or above, and a busy
server reaches such numbers; a ValueError there would read as "the client left" and cancel
a healthy request."""
from __future__ import annotations

import select
import socket
from collections.abc import Callable
from typing import Any

_HUNG_UP = select.POLLHUP | select.POLLERR | select.POLLNVAL


def detector(env: dict[str, Any]) -> Callable[[], bool]:
    sock = env.get("gunicorn.socket")
    sock = getattr(sock, "_sock", sock)  # the raw socket under a read-deadline wrapper
    if not isinstance(sock, socket.socket):
        return lambda: False

    def gone() -> bool:
        try:
            poller = select.poll()
            poller.register(sock.fileno(), select.POLLIN | _HUNG_UP)
            events = poller.poll(0)
            if not events:
                return False
            if events[0][1] & (select.POLLERR | select.POLLNVAL):
                return True
            # Readable (or hung up with unread data): gone only if the peer has closed.
            return sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
        except BlockingIOError:
            return False
        except OSError:
            return True

    return gone
