"""The registry port on SQL: one transaction of the database, its tables made on first use."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from functools import cached_property

from warden.adapters.store.audit import SqlAudit
from warden.adapters.store.db import Database, Sql
from warden.adapters.store.grants import SqlBots, SqlGrants
from warden.adapters.store.leases import SqlLeases
from warden.adapters.store.runs_in_progress import SqlRuns
from warden.adapters.store.secrets import SqlSecrets
from warden.adapters.store.workspaces import SqlWorkspaces

__all__ = ["SqlRegistry", "SqlTx"]


class SqlTx:
    """One registry transaction (core.ports.Tx)."""

    def __init__(self, sql: Sql) -> None:
        self.sql = sql

    @cached_property
    def workspaces(self) -> SqlWorkspaces:
        return SqlWorkspaces(self.sql)

    @cached_property
    def bots(self) -> SqlBots:
        return SqlBots(self.sql)

    @cached_property
    def grants(self) -> SqlGrants:
        return SqlGrants(self.sql)

    @cached_property
    def secrets(self) -> SqlSecrets:
        return SqlSecrets(self.sql)

    @cached_property
    def leases(self) -> SqlLeases:
        return SqlLeases(self.sql)

    @cached_property
    def runs(self) -> SqlRuns:
        return SqlRuns(self.sql)

    @cached_property
    def audit(self) -> SqlAudit:
        return SqlAudit(self.sql)


class SqlRegistry:
    """The registry (core.ports.Registry) on an open SQLite or PostgreSQL database."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.url = db.url

    @contextlib.contextmanager
    def transaction(self, *, write: bool = True) -> Iterator[SqlTx]:
        with self.db.transaction(write=write) as sql:
            yield SqlTx(sql)

    def close(self) -> None:
        self.db.close()
