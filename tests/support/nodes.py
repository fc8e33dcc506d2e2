"""Two nodes for tests: homes with their own `WARDEN_NODE` sharing one throwaway PostgreSQL
database and the cluster's keys, each able to run the CLI and a real `warden serve`.

They run when WARDEN_TEST_DATABASE_URL names a PostgreSQL server the tests may create databases on.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.servers import ServeProcess, warden_environ
from tests.support.waiting import poll

ADMIN_URL = os.environ.get("WARDEN_TEST_DATABASE_URL", "")
needs_postgres = pytest.mark.skipif(not ADMIN_URL.startswith("postgresql"),
                                    reason="set WARDEN_TEST_DATABASE_URL=postgresql+psycopg://… to test PostgreSQL")


def admin(sql: str) -> None:
    import psycopg

    with psycopg.connect(ADMIN_URL.replace("postgresql+psycopg://", "postgresql://"), autocommit=True) as conn:
        conn.execute(sql)  # type: ignore[arg-type]


@contextlib.contextmanager
def fresh_database(prefix: str) -> Iterator[str]:
    """The URL of a new database on the test server, dropped afterwards."""
    name = prefix + secrets.token_hex(6)
    admin(f"CREATE DATABASE {name}")
    base, _, _ = ADMIN_URL.rpartition("/")
    try:
        yield f"{base}/{name}"
    finally:
        admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@dataclass
class Node:
    name: str
    environ: dict[str, str]
    logs: Path

    def cli(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run([sys.executable, "-m", "warden", *args], capture_output=True, text=True,
                              env=self.environ, timeout=120, check=False)
        if check:
            assert proc.returncode == 0, proc.stderr
        return proc

    def serve(self) -> ServeProcess:
        return ServeProcess(self.environ, self.logs)

    def folder(self) -> Path:
        """Workspace `wsa`'s folder on this node."""
        path = Path(json.loads(self.cli("info", "wsa", "--json").stdout)["data"]["path"])
        return Path(self.environ["WARDEN_HOME"]) / path.relative_to(path.parents[1])

    @contextlib.contextmanager
    def killed_once(self, marker: str) -> Iterator[None]:
        """This node's `warden serve` running for the block, killed -9 as soon as a file named
        `marker` appears in workspace `wsa` (a command it runs has begun)."""
        server = self.serve()
        server.__enter__()
        try:
            assert server.proc is not None
            folder, pid = self.folder(), server.proc.pid

            def kill_once_it_ran() -> None:
                poll(lambda: (folder / marker).exists(), timeout=30, interval=0.02)
                os.kill(pid, signal.SIGKILL)

            killer = threading.Thread(target=kill_once_it_ran)
            killer.start()
            try:
                yield
            finally:
                killer.join()
        finally:
            server.__exit__(None, None, None)

    def token(self) -> str:
        """A token of bot `tester` for workspace `wsa` (read, write, execute; one hour)."""
        granted = json.loads(self.cli("grant", "wsa", "tester", "--permissions", "read,write,execute", "--ttl", "1h",
                                      "--json").stdout)
        return str(granted["data"]["token"])


def node_pair(database: str, tmp_path_factory: pytest.TempPathFactory, *, window_s: int,
              **settings: str) -> tuple[Node, Node]:
    """Nodes `node-a` (holding workspace `wsa` and bot `tester`) and `node-b`, set up on `database`
    with the same pepper, master key and cluster key; `settings` are more environment variables."""
    pepper = base64.urlsafe_b64encode(os.urandom(32)).decode()
    master = base64.urlsafe_b64encode(os.urandom(32)).decode()
    cluster = base64.b64encode(os.urandom(32)).decode()  # the cluster key every node holds
    nodes = []
    for name in ("node-a", "node-b"):
        root = tmp_path_factory.mktemp(name)
        environ = {**warden_environ(root / "home"), "WARDEN_NODE": name, "WARDEN_DATABASE_URL": database,
                   "WARDEN_TOKEN_PEPPER": pepper, "WARDEN_MASTER_KEY": master, "WARDEN_CLUSTER_KEY": cluster,
                   "WARDEN_NODE_HEARTBEAT_INTERVAL": "1s", "WARDEN_NODE_HEARTBEAT_WINDOW": f"{window_s}s",
                   "WARDEN_JANITOR_INTERVAL": "0s", **settings}
        node = Node(name, environ, root)
        node.cli("init")
        nodes.append(node)
    nodes[0].cli("create", "wsa", "--template", "minimal")
    nodes[0].cli("bot", "register", "tester")
    return nodes[0], nodes[1]


def node_fixtures(prefix: str, *, window_s: int, **settings: str) -> tuple[Any, Any, Any]:
    """A test module's `database` (fresh, named `prefix…`), `pair` (node_pair on it) and `token`
    (Node.token of node A) fixtures, each made once for the module:
    `database, pair, token = node_fixtures("warden_x_", window_s=3)`."""

    @pytest.fixture(scope="module")
    def database() -> Iterator[str]:
        with fresh_database(prefix) as url:
            yield url

    @pytest.fixture(scope="module")
    def pair(database: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[Node, Node]:
        return node_pair(database, tmp_path_factory, window_s=window_s, **settings)

    @pytest.fixture(scope="module")
    def token(pair: tuple[Node, Node]) -> str:
        return pair[0].token()

    return database, pair, token
