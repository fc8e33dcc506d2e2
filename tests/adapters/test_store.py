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
