"""A file read over HTTP abandoned by the request's timeout after its bytes' room was taken (the
registry busy for the read's audit): the room is given back (interfaces/http/fastpath.py,
files.ContentHeld)."""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

import httpx

from tests.support.servers import ServeProcess, cli_out, warden_environ

SIZE = 3 << 20  # over one piece (1 MiB): its room is counted


def test_a_read_abandoned_at_its_timeout_gives_its_room_back(tmp_path: Path) -> None:
    # The fast path took the room in the read's thread, then the request's timeout (here 1 s + a
    # second per 256 KiB of the 4 MiB limit: 17 s) cancelled it before its answer began: the room
    # was never given back. Four such reads (the registry locked longer than the timeout, as a
    # backup or a busy machine does) and the bot's large reads were 503 until a restart.
    environ = {**warden_environ(tmp_path / "home"), "WARDEN_API_REQUEST_TIMEOUT": "1s",
               "WARDEN_SANDBOX_MAX_FILE_SIZE_MB": "4"}
    cli_out(environ, "init")
    cli_out(environ, "create", "demo", "--template", "minimal")
    cli_out(environ, "bot", "register", "reader")
    token = cli_out(environ, "grant", "demo", "reader", "--permissions", "read")
    with open(tmp_path / "home" / "workspaces" / "demo" / "big.bin", "wb") as big:
        big.truncate(SIZE)
    headers = {"Authorization": f"Bearer {token}"}
    with ServeProcess(environ, tmp_path) as server:
        url = f"{server.url}/v1/workspaces/demo/files/content"
        assert httpx.get(url, params={"path": "big.bin"}, headers=headers, timeout=60).status_code == 200
        # The registry held by another writer past the request's timeout: each read's audit waits.
        db = sqlite3.connect(tmp_path / "home" / "warden.db", timeout=30, isolation_level=None)
        db.execute("BEGIN IMMEDIATE")
        answers: list[int] = []

        def read() -> None:
            answers.append(httpx.get(url, params={"path": "big.bin"}, headers=headers, timeout=120).status_code)

        readers = [threading.Thread(target=read) for _ in range(4)]
        for reader in readers:
            reader.start()
        time.sleep(20)
        db.execute("ROLLBACK")
        db.close()
        for reader in readers:
            reader.join()
        assert answers == [503] * 4, answers  # abandoned at the timeout
        time.sleep(1)
        again = httpx.get(url, params={"path": "big.bin"}, headers=headers, timeout=60)
        assert again.status_code == 200 and len(again.content) == SIZE, again.text[:300]
