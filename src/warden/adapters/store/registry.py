"""The registry port on SQL: one transaction of the database, its tables made on first use."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from functools import cached_property
from typing import TYPE_CHECKING

from warden.adapters.store.db import Database, Sql

if TYPE_CHECKING:
    from warden.adapters.store.approvals import SqlApprovals
    from warden.adapters.store.audit import SqlAudit
    from warden.adapters.store.grants import SqlBots, SqlGrants
    from warden.adapters.store.instances import SqlInstances
    from warden.adapters.store.leases import SqlLeases
    from warden.adapters.store.live import SqlProcesses, SqlSandboxes
    from warden.adapters.store.runs_in_progress import SqlRuns
    from warden.adapters.store.secrets import SqlSecrets
    from warden.adapters.store.workspaces import SqlWorkspaces

__all__ = ["SqlRegistry", "SqlTx"]


class SqlTx:
    """One registry transaction (core.ports.Tx); each table's module is imported when first used."""

    def __init__(self, sql: Sql) -> None:
        self.sql = sql

    @cached_property
    def workspaces(self) -> SqlWorkspaces:
        from warden.adapters.store.workspaces import SqlWorkspaces

        return SqlWorkspaces(self.sql)

    @cached_property
    def bots(self) -> SqlBots:
        from warden.adapters.store.grants import SqlBots

        return SqlBots(self.sql)

    @cached_property
    def grants(self) -> SqlGrants:
        from warden.adapters.store.grants import SqlGrants

        return SqlGrants(self.sql)

    @cached_property
    def secrets(self) -> SqlSecrets:
        from warden.adapters.store.secrets import SqlSecrets

        return SqlSecrets(self.sql)

    @cached_property
    def leases(self) -> SqlLeases:
        from warden.adapters.store.leases import SqlLeases

        return SqlLeases(self.sql)

    @cached_property
    def runs(self) -> SqlRuns:
        from warden.adapters.store.runs_in_progress import SqlRuns

        return SqlRuns(self.sql)

    @cached_property
    def sandboxes(self) -> SqlSandboxes:
        from warden.adapters.store.live import SqlSandboxes

        return SqlSandboxes(self.sql)

    @cached_property
    def processes(self) -> SqlProcesses:
        from warden.adapters.store.live import SqlProcesses

        return SqlProcesses(self.sql)

    @cached_property
    def approvals(self) -> SqlApprovals:
        from warden.adapters.store.approvals import SqlApprovals

        return SqlApprovals(self.sql)

    @cached_property
    def instances(self) -> SqlInstances:
        from warden.adapters.store.instances import SqlInstances

        return SqlInstances(self.sql)

    @cached_property
    def audit(self) -> SqlAudit:
        from warden.adapters.store.audit import SqlAudit

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

    def checkpoint(self) -> None:
        self.db.checkpoint()

    def give_back_ahead(self) -> None:
        self.db.give_back_ahead()

    def close(self) -> None:
        self.db.close()
