"""A request's head is bounded: a real `warden serve` on 127.0.0.1, attacked over raw sockets.

Each attack must be answered 414/431 (or the connection closed) long before it is all sent,
with the server's memory (VmRSS in /proc/PID/status) grown by no more than a few MiB. Every
loop is bounded in bytes and in time.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from tests.support.servers import ServeProcess, served_home
from warden.interfaces.http.protocol import MAX_HEADER, MAX_HEADERS, MAX_HEADERS_SIZE, MAX_REQUEST_LINE

MiB = 1 << 20


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    with served_home(tmp_path_factory.mktemp("heads")) as served:
        yield served


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def _connect(url: str) -> socket.socket:
    parts = urlsplit(url)
    assert parts.hostname == "127.0.0.1"
    return socket.create_connection((parts.hostname, parts.port), timeout=10)


def _answer(sock: socket.socket) -> bytes:
    """What the server said before closing (b"" when it closed, or reset, without a word)."""
    data = b""
    deadline = time.monotonic() + 10
    try:
        while time.monotonic() < deadline and (chunk := sock.recv(65536)):
            data += chunk
    except (ConnectionResetError, TimeoutError):
        pass
    return data


def _refused(data: bytes, status: int) -> None:
    if not data:
        return  # closed without an answer: also a refusal
    top, _, body = data.partition(b"\r\n\r\n")
    assert top.startswith(b"HTTP/1.1 %d " % status), top[:80]
    assert b"connection: close" in top.lower()
    error = json.loads(body)["error"]
    assert error["code"] == "invalid" and "limit" in error["message"]


def _flood(url: str, head: bytes, filler: bytes, total: int) -> tuple[int, bytes]:
    """Send `head`, then `filler` until `total` bytes or the server stops reading; returns the
    bytes sent and the answer."""
    sent = 0
    with _connect(url) as sock:
        sock.settimeout(5)  # a server that stopped reading makes sendall time out, not hang
        try:
            sock.sendall(head)
            started = time.monotonic()
            while sent < total and time.monotonic() - started < 60:
                sock.sendall(filler)
                sent += len(filler)
        except (BrokenPipeError, ConnectionResetError, TimeoutError):
            pass
        return sent, _answer(sock)


def test_a_64_mib_header_is_refused_before_it_is_all_sent_and_memory_stays_flat(server: ServeProcess) -> None:
    assert server.proc is not None
    pid = server.proc.pid
    assert httpx.get(server.url + "/v1/health", timeout=10).status_code == 200
    before = _rss_kib(pid)
    sent, answer = _flood(server.url, b"GET /v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: ", b"a" * MiB,
                          64 * MiB)
    grown = _rss_kib(pid) - before
    assert sent < 64 * MiB, "the server read the whole 64 MiB header"
    _refused(answer, 431)
    assert grown < 4 * 1024, f"the server grew by {grown} KiB"
    assert httpx.get(server.url + "/v1/health", timeout=10).status_code == 200  # still serving


def test_many_or_large_headers_are_431(server: ServeProcess) -> None:
    base = b"GET /v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\n"
    many = b"".join(b"X-H%d: v\r\n" % i for i in range(MAX_HEADERS + 1))
    one_large = b"X-Large: " + b"b" * (MAX_HEADER + 1) + b"\r\n"
    # Each within MAX_HEADER, together over MAX_HEADERS_SIZE.
    large_in_all = b"".join(b"X-P%d: %s\r\n" % (i, b"c" * 4000) for i in range(MAX_HEADERS_SIZE // 4000 + 1))
    for extra in (many, one_large, large_in_all):
        with _connect(server.url) as sock:
            sock.sendall(base + extra + b"\r\n")
            answer = _answer(sock)
        assert answer, "a head over the limits must be answered, not only cut off"
        _refused(answer, 431)
    # Just within every limit: served.
    fits = b"".join(b"X-F%d: %s\r\n" % (i, b"d" * 500) for i in range(MAX_HEADERS - 2))
    with _connect(server.url) as sock:
        sock.sendall(base + fits + b"Connection: close\r\n\r\n")
        assert _answer(sock).startswith(b"HTTP/1.1 200 ")


def test_a_long_request_line_is_414(server: ServeProcess) -> None:
    path = b"/v1/health?pad=" + b"e" * MAX_REQUEST_LINE
    with _connect(server.url) as sock:
        sock.sendall(b"GET " + path + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        _refused(_answer(sock), 414)
    # A URL that never ends is cut off too, without being read whole.
    sent, answer = _flood(server.url, b"GET /v1/health?pad=", b"f" * MiB, 64 * MiB)
    assert sent < 64 * MiB
    _refused(answer, 414)
    ok = httpx.get(server.url + "/v1/health", params={"pad": "g" * (MAX_REQUEST_LINE // 2)}, timeout=10)
    assert ok.status_code == 200
    # The longest file path (PATH_MAX bytes, 12 KiB percent-encoded) still reaches the API.
    longest = httpx.get(server.url + "/v1/workspaces/demo/files", params={"path": "é" * 2048}, timeout=10)
    assert longest.status_code == 401


def test_huge_trailers_of_a_chunked_body_are_cut_off(server: ServeProcess) -> None:
    assert server.proc is not None
    before = _rss_kib(server.proc.pid)
    head = (b"POST /v1/workspaces/none/exec HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n"
            b"Content-Type: application/json\r\n\r\n2\r\n{}\r\n0\r\nX-Trailer: ")
    sent, answer = _flood(server.url, head, b"h" * MiB, 64 * MiB)
    assert sent < 64 * MiB
    assert _rss_kib(server.proc.pid) - before < 4 * 1024
    _refused(answer, 431)  # the body ends after its trailers: nothing answered it before


def test_keep_alive_and_pipelined_requests_still_work(server: ServeProcess) -> None:
    one = b"GET /v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    with _connect(server.url) as sock:
        sock.sendall(one * 50 + b"GET /v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        answer = _answer(sock)
    assert answer.count(b"HTTP/1.1 200 ") == 51
    with httpx.Client(base_url=server.url, timeout=10) as client:  # one connection, many requests
        assert all(client.get("/v1/health").status_code == 200 for _ in range(200))
