"""Answers a client never reads: a real `warden serve` on 127.0.0.1, over raw sockets.

uvicorn parsed every request of each socket read and queued those behind the one in flight
(HTTP/1.1 pipelining), reading on at each answer's end: a client that sent small requests and
read no answers (no token needed) made the server hold 1.5 GB within 20 s, growing for as long
as it sent, and its connection was never closed. Now the server parses no further than one
queued piece, reads nothing while the answers are not drained, and aborts a connection whose
answers have not drained for `api.request_timeout` (2 s here).
"""

from __future__ import annotations

import re
import socket
import time
from collections.abc import Iterator
from urllib.parse import urlsplit

import httpx
import pytest

from tests.support.servers import ServeProcess, served_home

TIMEOUT_S = 2.0


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    with served_home(tmp_path_factory.mktemp("unread"), WARDEN_API_REQUEST_TIMEOUT=f"{TIMEOUT_S:g}s") as served:
        yield served


def _rss_mib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        return next(int(line.split()[1]) >> 10 for line in status if line.startswith("VmRSS:"))


def _reader_that_never_reads(url: str) -> socket.socket:
    parts = urlsplit(url)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect((parts.hostname, parts.port))
    sock.settimeout(0.2)
    return sock


def _flood(sock: socket.socket, seconds: float, request: bytes) -> int:
    """Pipeline `request` for `seconds` without reading an answer; the bytes the server took."""
    burst, sent = request * 1000, 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            sent += sock.send(burst)
        except (TimeoutError, BlockingIOError):
            pass
        except (BrokenPipeError, ConnectionResetError):
            break
    return sent


def test_a_client_that_pipelines_requests_and_reads_no_answers_holds_little(server: ServeProcess) -> None:
    assert server.proc is not None
    before = _rss_mib(server.proc.pid)
    sock = _reader_that_never_reads(server.url)
    try:
        # Before: 6 MiB of requests taken in 2 s, 1.5 GB held after 20 s.
        sent = _flood(sock, 1.5, b"GET /v1/nothing HTTP/1.1\r\nHost: x\r\n\r\n")
        grown = _rss_mib(server.proc.pid) - before
        assert grown < 64, f"the server holds {grown} MiB more for one client that reads nothing"
        assert sent < 8 << 20, f"the server took {sent >> 20} MiB of requests whose answers are unread"
        # The server answers others meanwhile.
        assert httpx.get(server.url + "/v1/health", timeout=10).status_code == 200
    finally:
        sock.close()


def test_a_connection_whose_answers_are_not_read_is_closed_after_the_request_timeout(
        server: ServeProcess) -> None:
    sock = _reader_that_never_reads(server.url)
    try:
        _flood(sock, 0.5, b"GET /openapi.json HTTP/1.1\r\nHost: x\r\n\r\n")
        time.sleep(TIMEOUT_S + 2)
        # Aborted: what the client reads now ends (a reset, or the end of what was sent before).
        ended = False
        sock.settimeout(5)
        deadline = time.monotonic() + 15
        try:
            while time.monotonic() < deadline:
                if not sock.recv(1 << 20):
                    ended = True
                    break
        except ConnectionResetError:
            ended = True
        except TimeoutError:
            pass
        assert ended, "a connection whose answers were not read for api.request_timeout is still open"
    finally:
        sock.close()
    log = server.err_path.read_text()
    assert "read none of its answers" in log and "api.request_timeout" in log


def test_pipelined_requests_are_all_answered_in_order(server: ServeProcess) -> None:
    # The parser stops at a queued request and takes up the rest once it is answered: none is lost.
    parts = urlsplit(server.url)
    body = b'{"name": "x"}'
    post = (b"POST /v1/nothing HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    health, nothing = b"GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n", b"GET /v1/nothing HTTP/1.1\r\nHost: x\r\n\r\n"
    requests = health * 300 + post + nothing * 300
    with socket.create_connection((parts.hostname, parts.port), timeout=30) as sock:
        sock.sendall(requests)
        got = b""
        while got.count(b"HTTP/1.1 ") < 601:
            chunk = sock.recv(1 << 20)
            assert chunk, got.count(b"HTTP/1.1 ")
            got += chunk
    statuses = re.findall(rb"HTTP/1\.1 (\d{3}) ", got)
    assert statuses[:300] == [b"200"] * 300 and len(statuses) == 601
    assert set(statuses[300:]) <= {b"404", b"405", b"401"}, set(statuses[300:])
