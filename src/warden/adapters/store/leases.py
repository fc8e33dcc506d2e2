"""Workspace lease rows: one per workspace name, changed only by compare-and-set on `fence`.

`version` counts every change (the compare-and-set key); `fence` is the fencing number of the
pure model (core/leases), grown by exclusive grants only.
"""

from __future__ import annotations

import json

from warden.adapters.store.db import Sql
from warden.core.leases import LeaseState, from_json, to_json
from warden.core.locks import TerminalLock

__all__ = ["SqlLeases"]


class SqlLeases:
    """The `workspace_leases` table (core.ports.LeaseTable)."""

    def __init__(self, sql: Sql) -> None:
        self._sql = sql

    def read(self, workspace: str) -> tuple[LeaseState, int | None]:
        """The lease state of `workspace` and its row version (None: no row yet)."""
        rows = self._sql.execute("SELECT fence, version, holders, terminal_lock FROM workspace_leases "
                                 "WHERE workspace = :w", {"w": workspace})
        if not rows:
            return LeaseState(workspace), None
        row = rows[0]
        try:
            holders = json.loads(row["holders"] or "[]")
        except ValueError:
            holders = []
        lock = None
        if row["terminal_lock"]:
            try:
                lock = TerminalLock.from_json(json.loads(row["terminal_lock"]))
            except ValueError:
                lock = None
        return from_json(workspace, int(row["fence"]), holders)._replace(lock=lock), int(row["version"])

    def names(self) -> list[str]:
        """The workspace names whose lease row has holders or a terminal's lock."""
        rows = self._sql.execute("SELECT workspace FROM workspace_leases WHERE holders <> '[]' "
                                 "OR terminal_lock IS NOT NULL ORDER BY workspace")
        return [str(r["workspace"]) for r in rows]

    def write(self, state: LeaseState, version: int | None) -> bool:
        """Store `state` if the row is still at `version` (None: it must not exist yet); False when
        another writer got there first."""
        holders = json.dumps(to_json(state), sort_keys=True)
        lock = json.dumps(state.lock.to_json(), sort_keys=True) if state.lock is not None else None
        if version is None:
            # ON CONFLICT, not a caught error: on PostgreSQL a failed statement aborts the whole
            # transaction, which would silently drop the caller's other writes in it.
            made = self._sql.execute(
                "INSERT INTO workspace_leases (workspace, fence, version, holders, terminal_lock) "
                "VALUES (:w, :f, 1, :h, :l) ON CONFLICT (workspace) DO NOTHING RETURNING version",
                {"w": state.workspace, "f": state.fence, "h": holders, "l": lock})
            return bool(made)
        done = self._sql.execute("UPDATE workspace_leases SET fence = :f, version = version + 1, holders = :h, "
                                 "terminal_lock = :l WHERE workspace = :w AND version = :v RETURNING version",
                                 {"w": state.workspace, "f": state.fence, "h": holders, "l": lock, "v": version})
        return bool(done)
