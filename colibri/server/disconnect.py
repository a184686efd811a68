"""Noticing a client that hung up while its JSON answer is being computed: the WSGI server
gives us the socket; a readable socket whose peek returns no bytes has been closed."""
from __future__ import annotations

import select
import socket
from collections.abc import Callable
from typing import Any


def detector(env: dict[str, Any]) -> Callable[[], bool]:
    sock = env.get("gunicorn.socket")
    sock = getattr(sock, "_sock", sock)  # the raw socket under a read-deadline wrapper
    if not isinstance(sock, socket.socket):
        return lambda: False

    def gone() -> bool:
        try:
            readable, _, _ = select.select([sock], [], [], 0)
            if not readable:
                return False
            return sock.recv(1, socket.MSG_PEEK) == b""
        except (OSError, ValueError):
            return True

    return gone
