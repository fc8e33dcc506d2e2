"""Uploads a bot never finishes: a real `warden serve` on 127.0.0.1, raw sockets.

An upload's body is held in the server's memory until it has all come (limits.py), for its
deadline: `api.request_timeout` and a second more for every 256 KiB received. A bot with a
`write` grant that sent most of a 99 MB file on each of 256 connections (api.max_connections)
and then waited made the server hold 25 GB, for minutes, and every other bot's new connection
was refused 503 meanwhile (a body a token let in never gives way). Downloads were bounded
already (files.ContentHeld: 1 GiB for all bots, 4 large ones a bot); uploads now take their
room there too, before a byte of their body is read.
"""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.servers import ServeProcess, cli_out, warden_environ
from tests.support.waiting import wait_until

SIZE = 24 << 20  # each upload's declared length; all but its last byte are sent


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServeProcess, dict[str, str], Path]]:
    root = tmp_path_factory.mktemp("upload-room")
    environ = warden_environ(root / "home")
    cli_out(environ, "init")
    cli_out(environ, "create", "demo", "--template", "minimal")
    tokens = {}
    for bot in ("hoarder", "other"):
        cli_out(environ, "bot", "register", bot)
        tokens[bot] = cli_out(environ, "grant", "demo", bot, "--permissions", "read,write")
    with ServeProcess(environ, root) as server:
        yield server, tokens, root / "home" / "workspaces" / "demo"


def _rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        return next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmRSS:"))


def _answered(sock: socket.socket, wait: float) -> bytes:
    """What the server answered within `wait` seconds (b"" for nothing yet)."""
    sock.settimeout(wait)
    try:
        return sock.recv(65536)
    except TimeoutError:
        return b""
    except ConnectionResetError:
        return b"reset"


def _unfinished(url: httpx.URL, head: str, body: bytes) -> tuple[socket.socket, bytes]:
    """A request `head` whose `body` (all but the last byte of what its head declares) is sent
    only when no early answer came; the early answer, or what came after the body, if anything."""
    sock = socket.create_connection((url.host, url.port), timeout=30)
    sock.sendall(head.encode())
    early = _answered(sock, 0.5)
    if early:
        return sock, early
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        sock.sendall(body)
    return sock, _answered(sock, 0.2)


def _upload_unfinished(url: httpx.URL, token: str, index: int) -> tuple[socket.socket, bytes]:
    """A PUT of SIZE bytes whose last byte never comes; the early answer, if the server gave one."""
    return _unfinished(url, f"PUT /v1/workspaces/demo/files/content?path=up{index}.bin HTTP/1.1\r\nHost: x\r\n"
                            f"Authorization: Bearer {token}\r\nContent-Length: {SIZE}\r\n\r\n", b"u" * (SIZE - 1))


@contextlib.contextmanager
def _ten_unfinished(server: ServeProcess, start: Callable[[], tuple[socket.socket, bytes]], size: int,
                    what: str) -> Iterator[None]:
    """Ten requests of `size` bytes of one bot's whose last byte never comes (`start` opens one):
    the server grows by a few of them, not ten; the first four are held (waiting for their last
    byte), the others refused at once (503, Retry-After). Held open while the block runs."""
    assert server.proc is not None
    before = _rss(server.proc.pid)
    held = []
    try:
        answers = []
        for _ in range(10):
            sock, early = start()
            held.append(sock)
            answers.append(early)
        time.sleep(0.5)
        grown = _rss(server.proc.pid) - before
        print(f"server RSS grew {grown >> 20} MiB for 10 unfinished {what} of {size >> 20} MiB")
        assert grown < 6 * size, f"the server holds {grown >> 20} MiB for 10 unfinished {what}"
        assert answers[:4] == [b""] * 4, answers[:4]
        assert all(a.startswith(b"HTTP/1.1 503") and b"retry-after: 1" in a.lower() for a in answers[4:]), answers[4:]
        yield
    finally:
        for sock in held:
            sock.close()


def test_a_bots_unfinished_uploads_hold_a_few_files_not_one_per_connection(
        served: tuple[ServeProcess, dict[str, str], Path]) -> None:
    server, tokens, workspace = served
    url = httpx.URL(server.url)
    uploads = iter(range(10))
    with _ten_unfinished(server, lambda: _upload_unfinished(url, tokens["hoarder"], next(uploads)), SIZE, "uploads"):
        # Another bot's upload goes on.
        other = httpx.put(f"{server.url}/v1/workspaces/demo/files/content", params={"path": "other.bin"},
                          content=b"o" * SIZE, headers={"Authorization": f"Bearer {tokens['other']}"}, timeout=60)
        assert other.status_code == 200, other.text
        assert (workspace / "other.bin").stat().st_size == SIZE
    # Once its clients have gone, the room is given back.
    wait_until(lambda: httpx.put(f"{server.url}/v1/workspaces/demo/files/content", params={"path": "again.bin"},
                                 content=b"a" * SIZE, headers={"Authorization": f"Bearer {tokens['hoarder']}"},
                                 timeout=60).status_code == 200, timeout=30)


def _json_unfinished(url: httpx.URL, token: str, size: int) -> tuple[socket.socket, bytes]:
    """A POST of an exec whose JSON body of `size` bytes never gets its last byte."""
    return _unfinished(url, f"POST /v1/workspaces/demo/exec HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n"
                            f"Content-Type: application/json\r\nContent-Length: {size}\r\n\r\n",
                       b'{"cmd": ["cat"], "stdin": "' + b"s" * (size - 1 - 28))


def test_a_bots_unfinished_json_bodies_hold_a_few_not_one_per_connection(
        served: tuple[ServeProcess, dict[str, str], Path]) -> None:
    # A JSON body past 64 KiB is held once the bot's token opens the door (limits.py), up to
    # api.max_body (16 MiB) on each connection: the same room as a file's.
    server, tokens, _ = served
    url = httpx.URL(server.url)
    size = 12 << 20
    with _ten_unfinished(server, lambda: _json_unfinished(url, tokens["hoarder"], size), size, "JSON bodies"):
        pass
