"""A request's head must arrive in time: a real `warden serve` on 127.0.0.1, over raw sockets.

uvicorn times only the keep-alive wait between requests; before the head timeout, a client (no
token needed) that sent half a head, or nothing, held its connection and a descriptor for ever,
and a few thousand of them took every descriptor the server may open. The server here runs with
`api.request_timeout` = 2 s, so each slow head must be answered 408 and closed within seconds,
while a request that is quick but whose answer is long is never cut.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.support.servers import ServeProcess, cli_out, served_home

TIMEOUT_S = 2.0


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    with served_home(tmp_path_factory.mktemp("head-timeout"), WARDEN_API_REQUEST_TIMEOUT=f"{TIMEOUT_S:g}s") as served:
        yield served


def _connect(url: str) -> socket.socket:
    parts = urlsplit(url)
    assert parts.hostname == "127.0.0.1"
    return socket.create_connection((parts.hostname, parts.port), timeout=10)


def _answer_and_when(sock: socket.socket, started: float) -> tuple[bytes, float]:
    """What the server said until it closed, and how long after `started` it closed."""
    data = b""
    deadline = time.monotonic() + 4 * TIMEOUT_S + 5
    try:
        while time.monotonic() < deadline and (chunk := sock.recv(65536)):
            data += chunk
    except (ConnectionResetError, TimeoutError):
        pass
    return data, time.monotonic() - started


def _timed_out(data: bytes) -> None:
    top, _, body = data.partition(b"\r\n\r\n")
    assert top.startswith(b"HTTP/1.1 408 "), top[:80]
    assert b"connection: close" in top.lower()
    error = json.loads(body)["error"]
    assert error["code"] == "timeout" and "api.request_timeout" in error["message"]


def _descriptors(pid: int) -> int:
    return len(list(Path(f"/proc/{pid}/fd").iterdir()))


def test_half_a_head_then_silence_is_answered_408_and_closed(server: ServeProcess) -> None:
    with _connect(server.url) as sock:
        started = time.monotonic()
        sock.sendall(b"GET /v1/health HTTP/1.1\r\nHost: x\r\nX-Wait: ")
        data, took = _answer_and_when(sock, started)
    _timed_out(data)
    assert TIMEOUT_S - 0.5 < took < TIMEOUT_S + 3


def test_a_connection_that_never_sends_is_closed(server: ServeProcess) -> None:
    with _connect(server.url) as sock:
        data, took = _answer_and_when(sock, time.monotonic())
    _timed_out(data)
    assert took < TIMEOUT_S + 3


def test_a_head_trickled_a_byte_at_a_time_is_timed_from_its_start(server: ServeProcess) -> None:
    head = b"GET /v1/health HTTP/1.1\r\nHost: x\r\n" + b"X-Slow: " + b"a" * 200 + b"\r\n\r\n"
    with _connect(server.url) as sock:
        started = time.monotonic()
        try:
            for byte in head:  # one byte every 50 ms: 12 s for the head, far past the deadline
                sock.sendall(bytes([byte]))
                time.sleep(0.05)
                if time.monotonic() - started > 4 * TIMEOUT_S:
                    break
        except (BrokenPipeError, ConnectionResetError):
            pass  # closed under us: the answer is read below
        data, took = _answer_and_when(sock, started)
    _timed_out(data)
    assert took < TIMEOUT_S + 3


def test_many_silent_connections_are_all_let_go_and_a_quick_request_is_answered(server: ServeProcess) -> None:
    assert server.proc is not None
    before = _descriptors(server.proc.pid)
    socks = [_connect(server.url) for _ in range(200)]
    try:
        for sock in socks:
            sock.sendall(b"GET /v1/health HTTP/1.1\r\nHost: x\r\n")
        with _connect(server.url) as quick:  # another client meanwhile is served at once
            quick.sendall(b"GET /v1/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            data, took = _answer_and_when(quick, time.monotonic())
        assert data.startswith(b"HTTP/1.1 200 ") and took < 2
        deadline = time.monotonic() + TIMEOUT_S + 10
        while time.monotonic() < deadline and _descriptors(server.proc.pid) > before + 5:
            time.sleep(0.2)
        assert _descriptors(server.proc.pid) <= before + 5  # each slow head's descriptor given back
    finally:
        for sock in socks:
            sock.close()


def test_a_kept_alive_connection_is_timed_per_head(server: ServeProcess) -> None:
    # Pauses between quick requests add up past the deadline: each head is timed on its own.
    with _connect(server.url) as sock:
        for _ in range(3):
            sock.sendall(b"GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n")
            reply = b""
            while b"}" not in reply:  # the head and the body may come in two reads
                reply += sock.recv(65536) or b"}"
            assert reply.startswith(b"HTTP/1.1 200 ") and reply.endswith(b"}"), reply[:80]
            time.sleep(TIMEOUT_S * 0.75)  # within uvicorn's keep-alive wait (5 s); 4.5 s in all


def test_a_quick_request_with_a_long_answer_is_not_cut(server: ServeProcess) -> None:
    # A change stream of twice the deadline: its head came in time, its answer takes long.
    cli_out(server.environ, "create", "w", "--template", "minimal")
    cli_out(server.environ, "bot", "register", "watcher")
    token = cli_out(server.environ, "grant", "w", "watcher", "--permissions", "read")
    with _connect(server.url) as sock:
        started = time.monotonic()
        sock.sendall(f"GET /v1/workspaces/w/events?timeout={2 * TIMEOUT_S:g} HTTP/1.1\r\nHost: x\r\n"
                     f"Authorization: Bearer {token}\r\nConnection: close\r\n\r\n".encode())
        data, took = _answer_and_when(sock, started)
    assert data.startswith(b"HTTP/1.1 200 "), data[:80]
    assert b'{"reason":"timeout"}' in data  # the stream's own end, not a 408 in its middle
    assert took >= 2 * TIMEOUT_S - 0.2
