"""The disconnect detector on high descriptor numbers (select() cannot watch fd >= 1024 and
used to report such a healthy client as gone, cancelling its request)."""
from __future__ import annotations

import os
import resource
import socket

import pytest

from colibri.server.disconnect import detector


def _high_fd_pair(minimum: int = 1100) -> tuple[socket.socket, socket.socket]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard <= minimum:
        pytest.skip(f"the descriptor limit ({hard}) is too low to open fd {minimum}")
    if soft != resource.RLIM_INFINITY and soft <= minimum:
        resource.setrlimit(resource.RLIMIT_NOFILE, (minimum + 64, hard))
    a, b = socket.socketpair()
    fd = os.dup2(a.fileno(), minimum)
    a.close()
    return socket.socket(fileno=fd), b


def test_a_connected_client_on_a_high_descriptor_is_not_gone():
    server, client = _high_fd_pair()
    try:
        assert server.fileno() >= 1024
        gone = detector({"gunicorn.socket": server})
        assert gone() is False
        client.sendall(b"pipelined bytes")  # readable, but the peer is still there
        assert gone() is False
        assert server.recv(64) == b"pipelined bytes"
        client.close()
        assert gone() is True
    finally:
        server.close()
        client.close()


def test_a_non_socket_is_never_reported_gone():
    assert detector({})() is False
