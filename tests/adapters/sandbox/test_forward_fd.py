"""What a supervisor hands over for a forward is checked before Warden relays through it
(adapters/sandbox/live._not_a_connection): only a TCP connection to the asked port of a loopback
address passes; a pipe, a Unix socket, a listening socket, another port or a socket not connected
never does."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator

import pytest

from warden.adapters.sandbox.live import _not_a_connection


@pytest.fixture
def server() -> Iterator[socket.socket]:
    sock = socket.create_server(("127.0.0.1", 0))
    yield sock
    sock.close()


def test_a_tcp_connection_to_the_port_passes(server: socket.socket) -> None:
    port = server.getsockname()[1]
    with socket.create_connection(("127.0.0.1", port)) as conn:
        assert _not_a_connection(conn.fileno(), port) is None
        assert _not_a_connection(conn.fileno(), port + 1 if port < 65535 else 1) is not None  # another port


def test_anything_else_is_refused(server: socket.socket) -> None:
    port = server.getsockname()[1]
    assert "TCP connection" in (_not_a_connection(server.fileno(), port) or "")  # listening
    left, right = socket.socketpair()
    with left, right:
        assert "not a TCP stream" in (_not_a_connection(left.fileno(), port) or "")
    read, write = os.pipe()
    try:
        assert "not a socket" in (_not_a_connection(read, port) or "")
    finally:
        os.close(read)
        os.close(write)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as unconnected:
        assert "cannot use" in (_not_a_connection(unconnected.fileno(), port) or "")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as datagram:
        datagram.connect(("127.0.0.1", port))
        assert "not a TCP stream" in (_not_a_connection(datagram.fileno(), port) or "")
