"""Rows of approval requests (see schema.py and core/approvals.py)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime

from warden.adapters.store.db import Row, Sql
from warden.core.approvals import ApprovalRecord

__all__ = ["SqlApprovals"]

_COLUMNS = ("id", "workspace", "workspace_id", "op", "path", "destination", "requester", "bot", "minter", "accessor",
            "zone", "rule", "status", "created_at", "expires_at", "digest", "size", "detail",
            "answered_by", "answered_at", "note", "outcome")
_CHANGEABLE = frozenset({"status", "answered_by", "answered_at", "note", "outcome"})


def _doc(text: object) -> dict[str, object]:
    try:
        value = json.loads(str(text or "{}"))
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _time(text: object) -> datetime | None:
    return None if text is None else datetime.fromisoformat(str(text))


def _record(row: Row) -> ApprovalRecord:
    created, expires = _time(row["created_at"]), _time(row["expires_at"])
    assert created is not None and expires is not None
    return ApprovalRecord(
        id=str(row["id"]), workspace=str(row["workspace"]), workspace_id=str(row["workspace_id"]),
        op=str(row["op"]), path=str(row["path"]), requester=str(row["requester"]), bot=str(row["bot"]),
        minter=str(row["minter"]), accessor=str(row["accessor"]),
        zone=None if row["zone"] is None else str(row["zone"]), rule=str(row["rule"]),
        created_at=created, expires_at=expires, status=str(row["status"]),
        destination=None if row["destination"] is None else str(row["destination"]),
        digest=None if row["digest"] is None else str(row["digest"]),
        size=None if row["size"] is None else int(row["size"]), detail=_doc(row["detail"]),
        answered_by=None if row["answered_by"] is None else str(row["answered_by"]),
        answered_at=_time(row["answered_at"]),
        note=None if row["note"] is None else str(row["note"]), outcome=_doc(row["outcome"]))


def _value(key: str, value: object) -> object:
    if isinstance(value, datetime):
        return value.isoformat(timespec="microseconds")  # compared as text: one width
    if key in ("detail", "outcome"):
        return json.dumps(dict(value or {}), sort_keys=True, default=str)  # type: ignore[call-overload]
    return value


class SqlApprovals:
    """The `approvals` table (core.ports.ApprovalTable)."""

    def __init__(self, sql: Sql) -> None:
        self._sql = sql

    def insert(self, record: ApprovalRecord, content: bytes | None) -> None:
        values = {c: _value(c, getattr(record, c)) for c in _COLUMNS}
        values["content"] = content
        columns = (*_COLUMNS, "content")
        self._sql.execute(f"INSERT INTO approvals ({', '.join(columns)}) "
                          f"VALUES ({', '.join(':' + c for c in columns)})", values)

    def get(self, approval_id: str) -> ApprovalRecord | None:
        rows = self._sql.execute(f"SELECT {', '.join(_COLUMNS)} FROM approvals WHERE id = :id", {"id": approval_id})
        return _record(rows[0]) if rows else None

    def content(self, approval_id: str) -> bytes | None:
        rows = self._sql.execute("SELECT content FROM approvals WHERE id = :id", {"id": approval_id})
        if not rows or rows[0]["content"] is None:
            return None
        return bytes(rows[0]["content"])

    def move(self, approval_id: str, from_status: str, changes: Mapping[str, object], *,
             answered_at: datetime | None = None) -> bool:
        unknown = set(changes) - _CHANGEABLE
        if unknown:
            raise ValueError(f"approval fields {sorted(unknown)} cannot change")
        sets = ", ".join(f"{key} = :{key}" for key in changes)
        # Once answered for good the bytes are no longer needed: the row keeps their hash.
        drop = ", content = NULL" if changes.get("status") in ("approved", "denied", "expired", "failed") else ""
        params = {key: _value(key, value) for key, value in changes.items()}
        also = ""
        if answered_at is not None:  # a claim on an answer in progress: only the one that saw it may
            also, params["_at"] = " AND answered_at = :_at", _value("answered_at", answered_at)
        rows = self._sql.execute(
            f"UPDATE approvals SET {sets}{drop} WHERE id = :_id AND status = :_from{also} RETURNING id",
            {**params, "_id": approval_id, "_from": from_status})
        return bool(rows)

    def listed(self, *, workspace: str | None, statuses: Sequence[str] | None, limit: int) -> list[ApprovalRecord]:
        where: list[str] = []
        params: dict[str, object] = {"limit": int(limit)}
        if workspace is not None:
            where.append("workspace = :workspace")
            params["workspace"] = workspace
        if statuses is not None:
            names = [f":s{i}" for i in range(len(statuses))]
            where.append(f"status IN ({', '.join(names) or 'NULL'})")
            params.update({f"s{i}": s for i, s in enumerate(statuses)})
        clause = f"WHERE {' AND '.join(where)}" if where else ""
        rows = self._sql.execute(f"SELECT {', '.join(_COLUMNS)} FROM approvals {clause} "
                                 "ORDER BY created_at DESC, id LIMIT :limit", params)
        return [_record(row) for row in rows]

    def count_waiting(self, minter: str, now: str) -> tuple[int, int]:
        rows = self._sql.execute(
            "SELECT COUNT(*) AS n FROM approvals WHERE minter = :m AND status = 'pending' AND expires_at > :now",
            {"m": minter, "now": now})
        held = self._sql.execute(
            "SELECT COALESCE(SUM(size), 0) AS b FROM approvals WHERE status = 'pending' AND expires_at > :now",
            {"now": now})
        return int(rows[0]["n"]), int(held[0]["b"])

    def expire(self, now: str) -> list[str]:
        rows = self._sql.execute("UPDATE approvals SET status = 'expired', content = NULL "
                                 "WHERE status = 'pending' AND expires_at <= :now RETURNING id", {"now": now})
        return sorted(str(row["id"]) for row in rows)

    def forget_workspace(self, workspace_id: str) -> int:
        rows = self._sql.execute("DELETE FROM approvals WHERE workspace_id = :w RETURNING id", {"w": workspace_id})
        return len(rows)
