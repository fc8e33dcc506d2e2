"""The registry port on SQL: one transaction of the database, its tables made on first use."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING, Generic, TypeVar, overload

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

T = TypeVar("T")


class _table(Generic[T]):  # (lower case, as the functools.cached_property it stands for)
    """A table of one transaction, made on first use and kept in the transaction's `__dict__`
    (which later lookups then find first: a non-data descriptor). Not functools.cached_property:
    until Python 3.12 that takes a lock at every first use, and an exec's transactions make a
    dozen tables. A transaction belongs to one thread, so no lock is needed."""

    def __init__(self, make: Callable[[SqlTx], T]) -> None:
        self._make = make
        self._name = make.__name__

    @overload
    def __get__(self, tx: None, owner: type) -> _table[T]: ...

    @overload
    def __get__(self, tx: SqlTx, owner: type) -> T: ...

    def __get__(self, tx: SqlTx | None, owner: type) -> T | _table[T]:
        if tx is None:
            return self
        made = tx.__dict__[self._name] = self._make(tx)
        return made


class SqlTx:
    """One registry transaction (core.ports.Tx); each table's module is imported when first used."""

    def __init__(self, sql: Sql) -> None:
        self.sql = sql

    @_table
    def workspaces(self) -> SqlWorkspaces:
        from warden.adapters.store.workspaces import SqlWorkspaces

        return SqlWorkspaces(self.sql)

    @_table
    def bots(self) -> SqlBots:
        from warden.adapters.store.grants import SqlBots

        return SqlBots(self.sql)

    @_table
    def grants(self) -> SqlGrants:
        from warden.adapters.store.grants import SqlGrants

        return SqlGrants(self.sql)

    @_table
    def secrets(self) -> SqlSecrets:
        from warden.adapters.store.secrets import SqlSecrets

        return SqlSecrets(self.sql)

    @_table
    def leases(self) -> SqlLeases:
        from warden.adapters.store.leases import SqlLeases

        return SqlLeases(self.sql)

    @_table
    def runs(self) -> SqlRuns:
        from warden.adapters.store.runs_in_progress import SqlRuns

        return SqlRuns(self.sql)

    @_table
    def sandboxes(self) -> SqlSandboxes:
        from warden.adapters.store.live import SqlSandboxes

        return SqlSandboxes(self.sql)

    @_table
    def processes(self) -> SqlProcesses:
        from warden.adapters.store.live import SqlProcesses

        return SqlProcesses(self.sql)

    @_table
    def approvals(self) -> SqlApprovals:
        from warden.adapters.store.approvals import SqlApprovals

        return SqlApprovals(self.sql)

    @_table
    def instances(self) -> SqlInstances:
        from warden.adapters.store.instances import SqlInstances

        return SqlInstances(self.sql)

    @_table
    def audit(self) -> SqlAudit:
        from warden.adapters.store.audit import SqlAudit

        return SqlAudit(self.sql)


class _Transaction:
    """The database's transaction seen as a registry one (its tables); a class rather than a
    generator-based context manager, whose calls an exec's four transactions paid twice over."""

    __slots__ = ("_sql",)

    def __init__(self, sql: contextlib.AbstractContextManager[Sql]) -> None:
        self._sql = sql

    def __enter__(self) -> SqlTx:
        try:
            return SqlTx(self._sql.__enter__())
        except BaseException as exc:
            # A stop raised between the database's transaction begun and this one returned (a
            # signal's handler runs as a call returns) would leave that transaction open, no
            # __exit__ to end it: ended here (it ends only what it began).
            self._sql.__exit__(type(exc), exc, exc.__traceback__)
            raise

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> bool | None:
        return self._sql.__exit__(kind, exc, tb)


class SqlRegistry:
    """The registry (core.ports.Registry) on an open SQLite or PostgreSQL database."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.url = db.url

    def transaction(self, *, write: bool = True) -> contextlib.AbstractContextManager[SqlTx]:
        return _Transaction(self.db.transaction(write=write))

    def checkpoint(self) -> None:
        self.db.checkpoint()

    def give_back_ahead(self) -> None:
        self.db.give_back_ahead()

    def close(self) -> None:
        self.db.close()
