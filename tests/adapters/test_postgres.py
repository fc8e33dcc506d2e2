"""The registry on PostgreSQL (several machines): the same flows as on SQLite, through the real CLI.

Runs when WARDEN_TEST_DATABASE_URL names a PostgreSQL server the tests may create databases
on (.ci/run starts a throwaway cluster); each test gets a database of its own.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.conftest import Cli

ADMIN_URL = os.environ.get("WARDEN_TEST_DATABASE_URL", "")
pytestmark = pytest.mark.skipif(not ADMIN_URL.startswith("postgresql"),
                                reason="set WARDEN_TEST_DATABASE_URL=postgresql+psycopg://… to test PostgreSQL")


def _admin(sql: str) -> None:
    import psycopg

    url = ADMIN_URL.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql)  # type: ignore[arg-type]


@pytest.fixture
def pg_cli(environ: dict[str, str]) -> Iterator[Cli]:
    name = "warden_test_" + secrets.token_hex(6)
    _admin(f"CREATE DATABASE {name}")
    base, _, _ = ADMIN_URL.rpartition("/")
    try:
        yield Cli({**environ, "WARDEN_DATABASE_URL": f"{base}/{name}"})
    finally:
        _admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def test_workspace_flow_on_postgres(pg_cli: Cli) -> None:
    assert pg_cli("init").code == 0
    created = pg_cli("create", "pg1", "--json")
    assert created.code == 0, created.stderr
    assert pg_cli("create", "pg1").code == 5
    assert [w["name"] for w in pg_cli("list", "--status", "ready", "--json").json["data"]] == ["pg1"]
    run = pg_cli("run", "pg1", "--json", "--", "sh", "-c", "echo hi > note.txt; cat note.txt")
    assert run.json["data"]["stdout"] == "hi\n"
    assert pg_cli("fs", "pg1", "cat", "/note.txt").stdout == "hi\n"
    assert pg_cli("destroy", "pg1", "--yes", "--no-archive").code == 0
    assert pg_cli("list", "--json").json["data"] == []
    verified = pg_cli("audit", "verify", "--json")
    assert verified.code == 0 and verified.json["data"]["rows"] >= 5


def test_keys_on_postgres(pg_cli: Cli) -> None:
    pg_cli("init")
    pg_cli("create", "pg2")
    assert pg_cli("bot", "register", "b").code == 0
    grant = pg_cli("grant", "pg2", "b", "--permissions", "read,execute", "--json").json["data"]
    assert pg_cli("secret", "set", "API_KEY", input="v4lue").code == 0
    assert [g["state"] for g in pg_cli("grants", "pg2", "--json").json["data"]] == ["active"]
    assert pg_cli("revoke", "pg2", "--accessor", grant["accessor"]).code == 0
    assert [g["state"] for g in pg_cli("grants", "pg2", "--json").json["data"]] == ["revoked"]


def test_concurrent_creators_and_audit_chain_on_postgres(pg_cli: Cli) -> None:
    """Two processes create one name: exactly one wins; the chain stays whole under concurrency."""
    pg_cli("init")

    def create(i: int) -> int:
        proc = subprocess.run([sys.executable, "-m", "warden", "create", "race"], env=pg_cli.environ,
                              capture_output=True, timeout=120, check=False)
        return proc.returncode

    with ThreadPoolExecutor(4) as pool:
        codes = sorted(pool.map(create, range(4)))
    assert codes == [0, 5, 5, 5]
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda i: pg_cli("config", "set", "sandbox.max_file_size_mb", str(10 + i)), range(8)))
    verified = pg_cli("audit", "verify", "--json")
    assert verified.code == 0, verified.stdout


def test_two_homes_on_one_registry_take_turns_on_a_workspace(pg_cli: Cli,
                                                             tmp_path_factory: pytest.TempPathFactory) -> None:
    """Two nodes (two homes, one PostgreSQL): lifecycle changes of one workspace never overlap."""
    pg_cli("init")
    assert pg_cli("create", "shared").code == 0
    assert pg_cli("fs", "shared", "write", "/keep.txt", input="kept\n").code == 0
    other_home = tmp_path_factory.mktemp("node-b") / "home"
    node_b = Cli({**pg_cli.environ, "WARDEN_HOME": str(other_home)})

    def archive(cli: Cli) -> tuple[int, str]:
        proc = subprocess.run([sys.executable, "-m", "warden", "archive", "shared"], env=cli.environ,
                              capture_output=True, timeout=120, check=False)
        return proc.returncode, proc.stderr.decode()

    with ThreadPoolExecutor(2) as pool:
        results = sorted(pool.map(archive, [pg_cli, node_b]))
    assert [code for code, _ in results] in ([0, 0], [0, 5]), results
    assert pg_cli("info", "shared", "--json").json["data"]["status"] == "archived"
    assert pg_cli("unarchive", "shared").code == 0
    assert pg_cli("fs", "shared", "cat", "/keep.txt").stdout == "kept\n"
