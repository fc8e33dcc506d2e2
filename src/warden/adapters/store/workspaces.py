"""Workspace rows in the registry."""

from __future__ import annotations

import json
from collections.abc import Mapping

from warden.adapters.store.db import Row, Sql
from warden.core.errors import Conflict
from warden.core.workspaces import WorkspaceRecord

__all__ = ["SqlWorkspaces"]

_COLUMNS = ("id", "name", "path", "type", "status", "template", "layer_id", "created_at",
            "last_accessed", "expires_at", "created_by", "meta", "node")


def _record(row: Row) -> WorkspaceRecord:
    data = dict(row)
    data["meta"] = json.loads(data.get("meta") or "{}")
    return WorkspaceRecord(**data)



# A bot's workspaces are counted, then one is inserted (api.max_workspaces_per_bot): on PostgreSQL
# such transactions take turns under this transaction-scoped advisory lock.
_CREATE_LOCK = 7263903


class SqlWorkspaces:
    """The `workspaces` table (core.ports.WorkspaceTable)."""

    def __init__(self, sql: Sql) -> None:
        self._sql = sql

    def get(self, name: str) -> WorkspaceRecord | None:
        rows = self._sql.execute("SELECT * FROM workspaces WHERE name = :name", {"name": name})
        return _record(rows[0]) if rows else None

    def list_all(self, *, status: str | None = None, kind: str | None = None) -> list[WorkspaceRecord]:
        rows = self._sql.execute(
            "SELECT * FROM workspaces WHERE (CAST(:status AS TEXT) IS NULL OR status = :status)"
            " AND (CAST(:kind AS TEXT) IS NULL OR type = :kind) ORDER BY name",
            {"status": status, "kind": kind})
        return [_record(r) for r in rows]

    def elsewhere(self, node: str) -> dict[str, str]:
        rows = self._sql.execute("SELECT name, node FROM workspaces WHERE node <> :node", {"node": node})
        return {r["name"]: r["node"] for r in rows}

    def count_created_by(self, actor: str) -> int:
        if self._sql.dialect == "postgresql":
            # Two creators each count, then insert: at READ COMMITTED both would see the other's
            # row missing. SQLite's write transaction already holds its database lock.
            self._sql.execute("SELECT pg_advisory_xact_lock(:lock)", {"lock": _CREATE_LOCK})
        rows = self._sql.execute("SELECT COUNT(*) AS n FROM workspaces WHERE created_by = :actor", {"actor": actor})
        return int(rows[0]["n"])

    def insert(self, record: WorkspaceRecord) -> None:
        values = {c: getattr(record, c) for c in _COLUMNS}
        values["meta"] = json.dumps(dict(record.meta), sort_keys=True)
        try:
            self._sql.execute(f"INSERT INTO workspaces ({', '.join(_COLUMNS)}) VALUES "
                       f"({', '.join(':' + c for c in _COLUMNS)})", values)
        except Conflict:
            raise Conflict(f"workspace {record.name!r} already exists; pick another name "
                           "or `warden destroy` it first", rule="workspace.exists") from None

    def update(self, name: str, changes: Mapping[str, object]) -> None:
        values = dict(changes)
        if "meta" in values:
            values["meta"] = json.dumps(values["meta"], sort_keys=True)
        sets = ", ".join(f"{k} = :{k}" for k in values)
        self._sql.execute(f"UPDATE workspaces SET {sets} WHERE name = :_name", {**values, "_name": name})

    def compare_and_set(self, name: str, record_id: str, status: str, changes: Mapping[str, object]) -> bool:
        """Apply `changes` only if the row of `name` is still workspace `record_id` in `status`."""
        values = dict(changes)
        if "meta" in values:
            values["meta"] = json.dumps(values["meta"], sort_keys=True)
        sets = ", ".join(f"{k} = :{k}" for k in values)
        done = self._sql.execute(
            f"UPDATE workspaces SET {sets} WHERE name = :_name AND id = :_id AND status = :_status RETURNING id",
            {**values, "_name": name, "_id": record_id, "_status": status})
        return bool(done)

    def delete(self, name: str, *, record_id: str | None = None) -> None:
        """Delete the row of `name` (only if it is still workspace `record_id`, when given)."""
        if record_id is None:
            self._sql.execute("DELETE FROM workspaces WHERE name = :name", {"name": name})
        else:
            self._sql.execute("DELETE FROM workspaces WHERE name = :name AND id = :id", {"name": name, "id": record_id})
