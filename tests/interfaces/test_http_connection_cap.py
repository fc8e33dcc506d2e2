"""`warden serve` keeps at most `api.max_connections` connections open: a real server on
127.0.0.1, real sockets.

Without the cap a local client (no token needed) opening connections faster than the head
timeout closes them held one descriptor each, until the server could accept nothing and every
bot's request failed. Here the cap is 16: a flood of idle connections leaves the server's
descriptors bounded and a bot's request still answered (the connection idle longest gives way),
and when every connection is busy with a request a new one is refused with 503 at once.
"""

from __future__ import annotations

import contextlib
import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.support.servers import ServeProcess, cli_out, served_home

CAP = 16


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    # A bot may hold as many change streams as the cap (the busy requests of the 503 test).
    with served_home(tmp_path_factory.mktemp("connection-cap"), WARDEN_API_MAX_CONNECTIONS=str(CAP),
                     WARDEN_API_MAX_WATCHES_PER_BOT=str(2 * CAP)) as served:
        yield served


def _connect(url: str) -> socket.socket:
    parts = urlsplit(url)
    assert parts.hostname is not None and parts.port is not None
    return socket.create_connection((parts.hostname, parts.port), timeout=10)


def _health(url: str) -> bytes:
    """A bot's request on a new connection: the status line of its answer."""
    with _connect(url) as sock:
        sock.sendall(b"GET /v1/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    return data.split(b"\r\n", 1)[0]


def _descriptors(pid: int) -> int:
    return len(list(Path(f"/proc/{pid}/fd").iterdir()))


def _closed(sock: socket.socket) -> bool:
    sock.settimeout(0.05)
    try:
        return sock.recv(1) == b""
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True


def test_a_flood_of_idle_connections_leaves_descriptors_bounded_and_bots_answered(server: ServeProcess) -> None:
    assert server.proc is not None
    assert _health(server.url).startswith(b"HTTP/1.1 200")
    before = _descriptors(server.proc.pid)
    flood = [_connect(server.url) for _ in range(10 * CAP)]
    try:
        assert _health(server.url).startswith(b"HTTP/1.1 200")  # a bot still gets in
        during = _descriptors(server.proc.pid)
        print(f"server descriptors: {before} before, {during} with {len(flood)} idle connections open")
        assert during <= before + CAP + 2, (before, during)
        # The first ones gave way to the later ones; the last CAP - 1 are still open.
        assert sum(_closed(sock) for sock in flood) >= len(flood) - CAP
        assert not _closed(flood[-1])
    finally:
        for sock in flood:
            sock.close()


def test_bodies_held_back_give_way_too(server: ServeProcess) -> None:
    # Heads sent, bodies held back: no token is needed for that, and each may wait for its body's
    # deadline (api.request_timeout): they held every place, and every bot was answered 503.
    held = []
    try:
        for _ in range(CAP):
            sock = _connect(server.url)
            sock.sendall(b"POST /v1/workspaces HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         b"Content-Length: 100\r\n\r\n{")
            held.append(sock)
        time.sleep(0.5)  # the server reads the heads: each connection then waits for its body
        assert _health(server.url).startswith(b"HTTP/1.1 200")  # a bot still gets in
        # One of the oldest gave way (the very oldest, unless a loaded server had not yet read
        # every head: one still without a request is idle, and gives way first), not the newest.
        assert any(_closed(sock) for sock in held[:CAP // 2]) and not _closed(held[-1])
    finally:
        for sock in held:
            sock.close()


@pytest.fixture(scope="module")
def tokens(server: ServeProcess) -> dict[str, str]:
    cli_out(server.environ, "create", "w", "--template", "minimal")
    cli_out(server.environ, "bot", "register", "watcher")
    cli_out(server.environ, "bot", "register", "uploader")
    return {"read": cli_out(server.environ, "grant", "w", "watcher", "--permissions", "read"),
            "write": cli_out(server.environ, "grant", "w", "uploader", "--permissions", "read,write")}


def test_a_bots_slow_upload_never_gives_way_to_stalled_bodies(server: ServeProcess, tokens: dict[str, str]) -> None:
    # Its body was let in by its token (the upload screen) before a byte of it was read: a flood of
    # stalled bodies without a token, each newer than it, closed it (the attack helper's probe).
    upload = _connect(server.url)
    upload.sendall(f"PUT /v1/workspaces/w/files/content?path=slow.bin HTTP/1.1\r\nHost: x\r\n"
                   f"Authorization: Bearer {tokens['write']}\r\nContent-Length: 100000\r\n\r\n".encode()
                   + b"u" * 5000)
    held = []
    try:
        time.sleep(0.5)  # screened, its first bytes read
        for _ in range(CAP):
            sock = _connect(server.url)
            sock.sendall(b"POST /v1/workspaces HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         b"Content-Length: 100\r\n\r\n{")
            held.append(sock)
        time.sleep(0.5)
        assert _health(server.url).startswith(b"HTTP/1.1 200")
        assert not _closed(upload)  # the stalled ones gave way, not the upload
        assert sum(_closed(sock) for sock in held) >= 2
        upload.settimeout(30)
        upload.sendall(b"u" * 95000)
        answer = b""
        while b"\r\n\r\n" not in answer:
            answer += upload.recv(65536) or b"\r\n\r\n"
        assert answer.startswith(b"HTTP/1.1 200"), answer[:200]
    finally:
        upload.close()
        for sock in held:
            sock.close()


def test_with_every_connection_busy_a_new_one_is_refused_503_at_once(server: ServeProcess,
                                                                      tokens: dict[str, str]) -> None:
    # Requests received and in flight: change streams, each answering for ten seconds.
    token = tokens["read"]
    busy = []
    try:
        for _ in range(CAP):
            sock = _connect(server.url)
            sock.sendall(f"GET /v1/workspaces/w/events?timeout=10 HTTP/1.1\r\nHost: x\r\n"
                         f"Authorization: Bearer {token}\r\n\r\n".encode())
            busy.append(sock)
        time.sleep(0.5)  # the server reads the heads: each connection is then busy
        # The server has them all (accepted in order), and a request on one more is refused.
        refused = _connect(server.url)
        data = b""
        while chunk := refused.recv(65536):
            data += chunk
        refused.close()
        top, _, body = data.partition(b"\r\n\r\n")
        assert top.startswith(b"HTTP/1.1 503"), top[:80]
        error = json.loads(body)["error"]
        assert error["code"] == "unavailable" and "api.max_connections" in error["message"]
        assert not any(_closed(sock) for sock in busy)  # no request in flight was cut
    finally:
        for sock in busy:
            sock.close()
    assert _health(server.url).startswith(b"HTTP/1.1 200")


def test_bodies_refused_by_their_declared_length_hold_no_place(server: ServeProcess) -> None:
    # A head declaring a body over api.max_body is answered 413 at once, its body unread; the
    # connection stayed open, waiting for that body (no timer: uvicorn's keep-alive wait ends at
    # the first byte that comes, and the head's at the head's end), busy to the connection cap.
    # One byte of the body on each of `CAP` connections (no token needed) and every bot's new
    # connection was refused 503, for good.
    held = []
    try:
        for _ in range(CAP):
            sock = _connect(server.url)
            sock.sendall(b"POST /v1/workspaces HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         b"Content-Length: 999999999999\r\n\r\n")
            answer = b""
            while b"\r\n\r\n" not in answer:
                answer += sock.recv(65536) or b"\r\n\r\n"
            assert answer.startswith(b"HTTP/1.1 413"), answer[:80]
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                sock.sendall(b"{")  # the body goes on coming, a byte (closed now: refused)
            held.append(sock)
        time.sleep(0.5)
        assert _health(server.url).startswith(b"HTTP/1.1 200")  # a bot still gets in
    finally:
        for sock in held:
            sock.close()


def test_one_bots_slow_uploads_take_a_few_places_not_all(server: ServeProcess, tokens: dict[str, str]) -> None:
    # A body its token let in never gives way (the test above); a bot sending small uploads
    # slowly on every connection held them all, each for its body's deadline, again and again,
    # and every other bot's new connection was refused 503. Its bodies on their way count with
    # its large files (files.ContentHeld, 4 a bot), whatever their size.
    held = []
    try:
        refused = 0
        for index in range(CAP):
            sock = _connect(server.url)
            sock.sendall(f"PUT /v1/workspaces/w/files/content?path=slow{index}.bin HTTP/1.1\r\nHost: x\r\n"
                         f"Authorization: Bearer {tokens['write']}\r\nContent-Length: 100000\r\n\r\n".encode()
                         + b"u" * 5000)
            held.append(sock)
            sock.settimeout(0.3)
            try:
                refused += sock.recv(64).startswith(b"HTTP/1.1 503")
            except TimeoutError:
                pass
            except ConnectionResetError:
                refused += 1
        assert _health(server.url).startswith(b"HTTP/1.1 200")  # another bot still gets in
        assert refused >= CAP - 4, refused
    finally:
        for sock in held:
            sock.close()
