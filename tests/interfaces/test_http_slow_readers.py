"""A file's bytes over HTTP to a client that does not read them: the server holds at most a few
of them, not one whole file for each connection (interfaces/http/files.py, ContentHeld)."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.servers import ServeProcess, cli_out, warden_environ
from tests.support.waiting import wait_until

SIZE = 60 << 20  # a sparse file: no disk, and past glibc's largest mmap threshold (freed at once)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServeProcess, dict[str, str], Path]]:
    root = tmp_path_factory.mktemp("slow-readers")
    environ = warden_environ(root / "home")
    cli_out(environ, "init")
    cli_out(environ, "create", "demo", "--template", "minimal")
    cli_out(environ, "bot", "register", "hoarder")
    cli_out(environ, "bot", "register", "other")
    tokens = {bot: cli_out(environ, "grant", "demo", bot, "--permissions", "read") for bot in ("hoarder", "other")}
    workspace = root / "home" / "workspaces" / "demo"
    with open(workspace / "big.bin", "wb") as big:
        big.truncate(SIZE)
    with ServeProcess(environ, root) as server:
        yield server, tokens, workspace


def _rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        return next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmRSS:"))


def _ask(url: httpx.URL, token: str, path: str = "big.bin") -> socket.socket:
    """A GET of the file on a connection whose client reads nothing (a small receive buffer)."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect((url.host, url.port))
    sock.sendall(f"GET /v1/workspaces/demo/files/content?path={path} HTTP/1.1\r\nHost: x\r\n"
                 f"Authorization: Bearer {token}\r\n\r\n".encode())
    return sock


def _status(sock: socket.socket) -> int:
    sock.settimeout(30)
    head = b""
    while b"\r\n" not in head:
        head += sock.recv(64)
    return int(head.split()[1])


def test_a_bot_that_reads_no_answers_holds_a_few_files_not_one_per_connection(
        served: tuple[ServeProcess, dict[str, str], Path]) -> None:
    # Each answer was written to its connection whole: 10 connections asking for a 99 MB sparse
    # file and reading nothing made the server hold 1.3 GB more, 256 of them (api.max_connections)
    # 25 GB. Now a bot has at most 4 large answers being sent; the next is 503 with Retry-After.
    server, tokens, _ = served
    assert server.proc is not None
    url = httpx.URL(server.url)
    before = _rss(server.proc.pid)
    hoard = [_ask(url, tokens["hoarder"]) for _ in range(12)]
    try:
        statuses = sorted(_status(sock) for sock in hoard)
        assert statuses == [200] * 4 + [503] * 8, statuses
        time.sleep(1)
        grown = _rss(server.proc.pid) - before
        assert grown < 8 * SIZE, f"the server holds {grown >> 20} MiB for 12 unread answers"
        refused = httpx.get(f"{server.url}/v1/workspaces/demo/files/content", params={"path": "big.bin"},
                            headers={"Authorization": f"Bearer {tokens['hoarder']}"}, timeout=60)
        assert refused.status_code == 503 and refused.headers.get("retry-after") == "1"
        assert refused.json()["error"]["code"] == "unavailable"
        # Another bot's reads go on; so do the hoarder's small ones.
        other = httpx.get(f"{server.url}/v1/workspaces/demo/files/content", params={"path": "big.bin"},
                          headers={"Authorization": f"Bearer {tokens['other']}"}, timeout=60)
        assert other.status_code == 200 and len(other.content) == SIZE
    finally:
        for sock in hoard:
            sock.close()
    # Once its clients have gone, the room is given back.
    wait_until(lambda: httpx.get(f"{server.url}/v1/workspaces/demo/files/content", params={"path": "big.bin"},
                                 headers={"Authorization": f"Bearer {tokens['hoarder']}"},
                                 timeout=60).status_code == 200, timeout=30)


def test_a_huge_directory_is_listed_in_pages(served: tuple[ServeProcess, dict[str, str], Path]) -> None:
    # A folder of 200,000 empty files with long names (no disk) was one 97 MB answer, written whole
    # to its connection for a client that may never read it. Pages of 5,000 now; the SDK follows them.
    server, tokens, workspace = served
    folder = workspace / "many"
    folder.mkdir()
    names = sorted(f"{'n' * 200}{i:05}" for i in range(12_000))
    for name in names:
        (folder / name).touch()
    headers = {"Authorization": f"Bearer {tokens['other']}"}
    first = httpx.get(f"{server.url}/v1/workspaces/demo/files", params={"path": "/many"}, headers=headers,
                      timeout=60)
    assert first.status_code == 200 and len(first.content) < 3 << 20, len(first.content)
    page = first.json()
    assert len(page["entries"]) == 5000 and page["next_offset"] == 5000
    assert [e["name"] for e in page["entries"]] == names[:5000]
    last = httpx.get(f"{server.url}/v1/workspaces/demo/files", params={"path": "/many", "offset": 10_000},
                     headers=headers, timeout=60).json()
    assert [e["name"] for e in last["entries"]] == names[10_000:] and last["next_offset"] is None
    assert httpx.get(f"{server.url}/v1/workspaces/demo/files", params={"path": "/many", "limit": 5001},
                     headers=headers, timeout=60).status_code in (400, 422)
    from warden.client import Client

    listed = Client(server.url, tokens["other"]).workspace("demo").files.list("/many")
    assert [e["name"] for e in listed] == names
    # A file's status has no entries and no next page.
    one = httpx.get(f"{server.url}/v1/workspaces/demo/files", params={"path": f"/many/{names[0]}"},
                    headers=headers, timeout=60).json()
    assert one["entries"] is None and one["next_offset"] is None


def test_a_read_refused_as_too_large_gives_its_room_back(
        served: tuple[ServeProcess, dict[str, str], Path]) -> None:
    # The room of a file's bytes is taken from its size before it is read; a file over
    # sandbox.max_file_size_mb (100 MiB) is then refused (413), and its room was never given back:
    # one read of a 1 GiB sparse file held all 1 GiB of every bot's room for good, and every
    # other bot's read of more than 1 MiB was 503 until the server restarted.
    server, tokens, workspace = served
    with open(workspace / "huge.bin", "wb") as huge:
        huge.truncate(1 << 30)
    with open(workspace / "huger.bin", "wb") as huger:
        huger.truncate(2 << 30)
    # Over the limit and over all the room there is: too large (413), not 503 with Retry-After,
    # which the SDK retries for ever.
    refused = httpx.get(f"{server.url}/v1/workspaces/demo/files/content", params={"path": "huger.bin"},
                        headers={"Authorization": f"Bearer {tokens['hoarder']}"}, timeout=60)
    assert refused.status_code == 413, refused.text
    for _ in range(5):  # past the bot's own 4 answers as well
        refused = httpx.get(f"{server.url}/v1/workspaces/demo/files/content", params={"path": "huge.bin"},
                            headers={"Authorization": f"Bearer {tokens['hoarder']}"}, timeout=60)
        assert refused.status_code == 413, refused.text
    for bot in ("other", "hoarder"):
        read = httpx.get(f"{server.url}/v1/workspaces/demo/files/content", params={"path": "big.bin"},
                         headers={"Authorization": f"Bearer {tokens[bot]}"}, timeout=60)
        assert read.status_code == 200 and len(read.content) == SIZE, (bot, read.status_code, read.text[:200])


def test_a_read_of_a_file_growing_past_the_limit_gives_its_room_back(
        served: tuple[ServeProcess, dict[str, str], Path]) -> None:
    # A file under sandbox.max_file_size_mb when its room is taken, over it by the time it is read
    # (a command in the sandbox writing it): 413, and the room was kept, so after four of them the
    # bot's large reads were 503 for good. (Its answer is now the size it had when opened, sent a
    # piece at a time: each read here is 200 or, over the limit when opened, 413.)
    import threading

    server, tokens, workspace = served
    grown = workspace / "growing.bin"
    grown.touch()
    stop = threading.Event()

    def grow() -> None:
        while not stop.is_set():
            for size in ((100 << 20) - 1, 120 << 20):
                os.truncate(grown, size)
                time.sleep(0.002)

    grower = threading.Thread(target=grow)
    grower.start()
    answers = []
    try:
        for _ in range(12):
            answer = httpx.get(f"{server.url}/v1/workspaces/demo/files/content", params={"path": "growing.bin"},
                               headers={"Authorization": f"Bearer {tokens['hoarder']}"}, timeout=60)
            assert answer.status_code in (200, 409, 413), answer.text
            answers.append(answer.status_code)
    finally:
        stop.set()
        grower.join()
    assert 200 in answers, answers  # read while it grew (past four, the bot's own answers)
    read = httpx.get(f"{server.url}/v1/workspaces/demo/files/content", params={"path": "big.bin"},
                     headers={"Authorization": f"Bearer {tokens['hoarder']}"}, timeout=60)
    assert read.status_code == 200 and len(read.content) == SIZE, read.text[:200]


def test_a_large_files_answer_holds_a_piece_of_it_not_all(served: tuple[ServeProcess, dict[str, str], Path]) -> None:
    # The file was read whole before its first byte was sent: four unread answers of a 60 MB file
    # held 240 MB (1 GiB for all bots, 40 reads at once). Now a piece of each is read as its
    # client takes the one before.
    server, tokens, workspace = served
    assert server.proc is not None
    url = httpx.URL(server.url)
    data = os.urandom(3 << 20) + b"end"  # over two pieces, and not a whole number of them
    (workspace / "pieces.bin").write_bytes(data)
    whole = httpx.get(f"{server.url}/v1/workspaces/demo/files/content", params={"path": "pieces.bin"},
                      headers={"Authorization": f"Bearer {tokens['other']}"}, timeout=60)
    assert whole.status_code == 200 and whole.content == data
    time.sleep(1)
    before = _rss(server.proc.pid)
    hoard = [_ask(url, tokens["hoarder"]) for _ in range(4)]
    try:
        assert [_status(sock) for sock in hoard] == [200] * 4
        time.sleep(1)
        grown = _rss(server.proc.pid) - before
        assert grown < 32 << 20, f"four unread answers of a {SIZE >> 20} MiB file hold {grown >> 20} MiB"
    finally:
        for sock in hoard:
            sock.close()
    wait_until(lambda: httpx.get(f"{server.url}/v1/workspaces/demo/files/content", params={"path": "big.bin"},
                                 headers={"Authorization": f"Bearer {tokens['hoarder']}"},
                                 timeout=60).status_code == 200, timeout=30)
