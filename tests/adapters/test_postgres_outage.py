"""PostgreSQL going away under Warden: every answer says the registry is unavailable, in one line.

The registry is reached through a TCP relay the test owns, so "PostgreSQL stops" is the relay
closing its port and every connection through it (as `pg_ctl stop -m immediate` does to
clients), without stopping the server the other tests share. Runs when WARDEN_TEST_DATABASE_URL
names a PostgreSQL server (.ci/run starts one).
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from tests.adapters.test_postgres import ADMIN_URL, pg_cli  # noqa: F401 (a fixture used below)
from tests.conftest import Cli
from tests.support.servers import ServeProcess
from warden.adapters.store.db import SqlalchemyDatabase
from warden.core.errors import Unavailable

pytestmark = pytest.mark.skipif(not ADMIN_URL.startswith("postgresql"),
                                reason="set WARDEN_TEST_DATABASE_URL=postgresql+psycopg://… to test PostgreSQL")


class Relay:
    """127.0.0.1:port → the PostgreSQL server, until stop() closes the port and every connection."""

    def __init__(self, target: tuple[str, int], port: int = 0) -> None:
        self.target = target
        self.listener = socket.create_server(("127.0.0.1", port), reuse_port=False)
        self.port = self.listener.getsockname()[1]
        self.open: list[socket.socket] = []
        self.lock = threading.Lock()
        self.stopped = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            with self.lock:
                if self.stopped:
                    client.close()
                    return
                server = socket.create_connection(self.target)
                self.open += [client, server]
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def stop(self) -> None:
        with self.lock:
            self.stopped = True
            with contextlib.suppress(OSError):  # close() alone leaves a blocked accept() accepting
                self.listener.shutdown(socket.SHUT_RDWR)
            self.listener.close()
            for s in self.open:
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                s.close()
            self.open.clear()


@pytest.fixture
def relayed(pg_cli: Cli) -> Iterator[tuple[Cli, Relay]]:  # noqa: F811 (the fixture imported above)
    url = urlsplit(pg_cli.environ["WARDEN_DATABASE_URL"])
    relay = Relay((url.hostname or "127.0.0.1", url.port or 5432))
    netloc = f"{url.username}@127.0.0.1:{relay.port}" if url.username else f"127.0.0.1:{relay.port}"
    try:
        yield Cli({**pg_cli.environ, "WARDEN_DATABASE_URL": url._replace(netloc=netloc).geturl()}), relay
    finally:
        relay.stop()


def test_a_registry_lost_mid_transaction_or_at_connect_is_unavailable(relayed: tuple[Cli, Relay]) -> None:
    cli, relay = relayed
    assert cli("init").code == 0
    db = SqlalchemyDatabase(cli.environ["WARDEN_DATABASE_URL"])
    try:
        with pytest.raises(Unavailable) as lost, db.transaction() as tx:
            tx.execute("SELECT 1")
            relay.stop()
            tx.execute("SELECT 1")
        assert "registry" in str(lost.value) and "\n" not in str(lost.value)
        with pytest.raises(Unavailable) as refused, db.transaction() as tx:
            tx.execute("SELECT 1")
        assert "cannot reach the registry" in str(refused.value) and "\n" not in str(refused.value)
    finally:
        db.close()


def test_commands_and_the_api_say_unavailable_while_postgres_is_down(relayed: tuple[Cli, Relay],
                                                                      tmp_path: Path) -> None:
    cli, relay = relayed
    assert cli("init").code == 0
    token = cli("bot", "register", "down-bot", "--json").json["data"]["token"]
    with ServeProcess(cli.environ, tmp_path, "--no-access-log") as server:
        made = httpx.post(server.url + "/v1/workspaces", headers={"Authorization": f"Bearer {token}"},
                          json={"bot": "down-bot", "request": "workspace", "params": {"name": "w"}}, timeout=60)
        assert made.status_code == 201, made.text
        access = made.json()["workspace"]["access_token"]
        relay.stop()
        # The server was up before the registry went: its answers were 500 "internal error
        # (OperationalError)" for as long as PostgreSQL was down.
        answer = httpx.post(server.url + "/v1/workspaces/w/exec", headers={"Authorization": f"Bearer {access}"},
                            json={"cmd": ["true"]}, timeout=60)
        assert answer.status_code == 503, answer.text
        assert answer.json()["error"]["code"] == "unavailable"
        assert "registry" in answer.json()["error"]["message"]
    # A command started while it is down: one line (psycopg's message is several), its status.
    for args, status in ((("nodes",), 1), (("run", "w", "--", "true"), 126)):
        result = cli(*args)
        assert result.code == status, result
        assert result.stderr.count("\n") == 1 and "cannot reach the registry" in result.stderr, result.stderr
        assert "Traceback" not in result.stderr
