"""The registry store: migrations, WAL, and concurrent writers."""

from __future__ import annotations

import sqlite3
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from warden.adapters.store.db import SCHEMA_REVISION, open_database
from warden.adapters.store.migrate import head_revision
from warden.bootstrap import App
from warden.core.errors import Conflict


def test_schema_revision_matches_alembic_head() -> None:
    assert head_revision() == SCHEMA_REVISION


def test_sqlite_is_in_wal_mode(app: App, home: Path) -> None:
    app.workspaces.list()
    with sqlite3.connect(home / "warden.db") as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_reopening_does_not_migrate_again(home: Path) -> None:
    open_database(None, home).close()
    with sqlite3.connect(home / "warden.db") as conn:
        assert conn.execute("SELECT version_num FROM alembic_version").fetchall() == [(SCHEMA_REVISION,)]
    open_database(None, home).close()


def test_same_name_twice_conflicts(app: App) -> None:
    app.workspaces.create("one")
    with pytest.raises(Conflict):
        app.workspaces.create("one")


def test_concurrent_audit_appends_keep_the_chain(app: App) -> None:
    def write(i: int) -> None:
        app.audit.record(actor="t", action="op", target=str(i))

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(write, range(40)))
    count, broken = app.audit.verify()
    assert count == 40 and broken is None


def test_a_migration_that_dies_half_way_leaves_nothing_half_made(tmp_path: Path) -> None:
    """A first command killed between two CREATE TABLEs must not leave tables without a version
    (every later start would fail with "table ... already exists")."""
    import sqlite3

    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    from warden.adapters.store.db import open_database
    from warden.adapters.store.migrate import upgrade

    created: list[str] = []

    def die_on_the_second_table(conn: object, cursor: object, statement: str, *args: object) -> None:
        if statement.lstrip().upper().startswith("CREATE TABLE"):
            created.append(statement)
            if len(created) == 2:
                raise KeyboardInterrupt  # as if killed here

    event.listen(Engine, "before_cursor_execute", die_on_the_second_table)
    try:
        with pytest.raises(KeyboardInterrupt):
            upgrade(f"sqlite:///{tmp_path / 'warden.db'}")
    finally:
        event.remove(Engine, "before_cursor_execute", die_on_the_second_table)
    with sqlite3.connect(tmp_path / "warden.db") as conn:
        tables = [row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    assert tables == []
    db = open_database(None, tmp_path)  # the next start migrates cleanly
    try:
        with db.transaction() as tx:
            assert tx.execute("SELECT count(*) AS n FROM workspaces") == [{"n": 0}]
    finally:
        db.close()
