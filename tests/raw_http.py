"""HTTP/1.1 by hand over raw sockets, for the tests that must send what no client library sends
(trickled headers, half-closes, unread answers) and read exactly what the server wrote back."""
from __future__ import annotations

import json
import socket

CHAT = {"model": "colibri-tiny", "messages": [{"role": "user", "content": "Repeat exactly: ok"}], "max_tokens": 4}


def addr(base: str) -> tuple[str, int]:
    """(host, port) of a base URL such as http://127.0.0.1:8123."""
    host, port = base.split("//")[1].split(":")
    return host, int(port)


def request(path: str = "/v1/chat/completions", body: dict | None = None, extra: str = "") -> bytes:
    """A whole POST with a JSON body (a short chat by default); `extra` holds more header lines."""
    data = json.dumps(body or CHAT).encode()
    return (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\n{extra}\r\n").encode() + data


def read_response(s: socket.socket, timeout: float = 30) -> tuple[int, dict[str, str], bytes]:
    """One final HTTP/1.1 response with a Content-Length body (interim 1xx answers skipped)."""
    s.settimeout(timeout)
    buf = b""
    while True:
        while b"\r\n\r\n" not in buf:
            chunk = s.recv(65536)
            assert chunk, f"connection closed before a response: {buf!r}"
            buf += chunk
        head, rest = buf.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        if 100 <= status < 200:
            buf = rest
            continue
        headers = {k.strip().lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:])}
        n = int(headers.get("content-length", "0"))
        while len(rest) < n:
            chunk = s.recv(65536)
            assert chunk
            rest += chunk
        return status, headers, rest[:n]
