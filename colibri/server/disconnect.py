"""Noticing a client that hung up while its JSON answer is being computed: the WSGI server
gives us the socket, and a socket the peer has closed reads as end-of-file.

End-of-file alone does not mean the client is gone: a client may shut only its sending side
once its request is out (`nc -N`, `shutdown(SHUT_WR)`) and still wait for the answer. So on
end-of-file, before any byte of the answer went out, the detector sends an interim
`102 Processing` (RFC 9110 section 15.2: a client must read and skip 1xx answers): a client
that closed altogether answers it with a reset, which the next poll sees as an error or
hang-up; a half-closed one reads it and keeps waiting. An HTTP/1.0 client cannot be sent a
1xx answer, so its end-of-file is never taken for a disconnect.

`poll`, not `select`: select cannot watch a descriptor numbered 1024 or above, and a busy
server reaches such numbers; a ValueError there would read as "the client left" and cancel
a healthy request."""
from __future__ import annotations

import select
import socket
from collections.abc import Callable
from typing import Any

_HUNG_UP = select.POLLHUP | select.POLLERR | select.POLLNVAL
PROCESSING = b"HTTP/1.1 102 Processing\r\n\r\n"


def detector(env: dict[str, Any]) -> Callable[[], bool]:
    wrapper = env.get("gunicorn.socket")
    sock = getattr(wrapper, "_sock", wrapper)  # the raw socket under a read-deadline wrapper
    if not isinstance(sock, socket.socket):
        return lambda: False
    http10 = env.get("SERVER_PROTOCOL") == "HTTP/1.0"
    probed = False

    def gone() -> bool:
        nonlocal probed
        try:
            poller = select.poll()
            poller.register(sock.fileno(), select.POLLIN | _HUNG_UP)
            events = poller.poll(0)
            if not events:
                return False
            if events[0][1] & _HUNG_UP:
                return True  # reset, or closed both ways
            # Readable: end-of-file if the peer has shut its side (pipelined bytes are not).
            if sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) != b"":
                return False
            if probed or http10 or getattr(wrapper, "responding", False):
                return False  # half-closed and still reading, or no way left to ask
            probed = True
            sock.send(PROCESSING, socket.MSG_DONTWAIT)
            return False
        except BlockingIOError:
            return False
        except OSError:
            return True

    return gone
