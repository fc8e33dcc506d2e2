"""The cluster keyring's rows (core/keyring.py): one state row and the wrapped keys."""

from __future__ import annotations

import base64

from warden.adapters.store.db import Row, Sql
from warden.core.keyring import KeyringState, KeyRow

__all__ = ["SqlKeyring"]


def _key(row: Row) -> KeyRow:
    return KeyRow(str(row["id"]), row["purpose"], str(row["state"]), base64.b64decode(row["wrapped"]),
                  str(row["kek_id"]), str(row["created_at"]))


class SqlKeyring:
    """The `cluster_keyring` and `cluster_keys` tables."""

    def __init__(self, sql: Sql) -> None:
        self._sql = sql

    def state(self, *, hold: bool = False) -> KeyringState | None:
        """The keyring's state row (None: this registry has no cluster keys). With `hold`, a
        rotation on another node waits until this transaction ends (PostgreSQL's FOR SHARE;
        SQLite's write transactions are one at a time already)."""
        lock = " FOR SHARE" if hold and self._sql.dialect == "postgresql" else ""
        rows = self._sql.execute(f"SELECT * FROM cluster_keyring WHERE id = 1{lock}")
        if not rows:
            return None
        row = rows[0]
        return KeyringState(int(row["version"]), str(row["kek_id"]), str(row["created_at"]), str(row["updated_at"]))

    def hold_current(self, purpose: str) -> str | None:
        """Hold the keyring (see `state`) and answer the id of `purpose`'s current key (None: no keyring)."""
        if self.state(hold=True) is None:
            return None
        rows = self._sql.execute("SELECT id FROM cluster_keys WHERE purpose = :p AND state = 'current'",
                                 {"p": purpose})
        return str(rows[0]["id"]) if rows else None

    def create(self, kek_id: str, at: str) -> None:
        """The state row at version 1; Conflict when another node made it first."""
        self._sql.execute("INSERT INTO cluster_keyring (id, version, kek_id, created_at, updated_at)"
                          " VALUES (1, 1, :k, :at, :at)", {"k": kek_id, "at": at})

    def advance(self, version: int, kek_id: str, at: str) -> bool:
        """Move the keyring from `version` to the next; False when another change came first."""
        rows = self._sql.execute("UPDATE cluster_keyring SET version = version + 1, kek_id = :k, updated_at = :at"
                                 " WHERE id = 1 AND version = :v RETURNING version",
                                 {"k": kek_id, "at": at, "v": version})
        return bool(rows)

    def list_keys(self) -> list[KeyRow]:
        """Every wrapped key, current ones first, then by age (newest first)."""
        rows = self._sql.execute("SELECT * FROM cluster_keys ORDER BY purpose,"
                                 " CASE state WHEN 'current' THEN 0 ELSE 1 END, created_at DESC, id")
        return [_key(r) for r in rows]

    def add(self, key: KeyRow) -> None:
        self._sql.execute("INSERT INTO cluster_keys (id, purpose, state, wrapped, kek_id, created_at)"
                          " VALUES (:id, :p, :s, :w, :k, :at)",
                          {"id": key.id, "p": key.purpose, "s": key.state,
                           "w": base64.b64encode(key.wrapped).decode("ascii"), "k": key.kek_id,
                           "at": key.created_at})

    def rewrap(self, key_id: str, wrapped: bytes, kek_id: str) -> None:
        self._sql.execute("UPDATE cluster_keys SET wrapped = :w, kek_id = :k WHERE id = :id",
                          {"w": base64.b64encode(wrapped).decode("ascii"), "k": kek_id, "id": key_id})

    def set_state(self, key_id: str, state: str) -> None:
        self._sql.execute("UPDATE cluster_keys SET state = :s WHERE id = :id", {"s": state, "id": key_id})

    def delete(self, key_id: str) -> None:
        self._sql.execute("DELETE FROM cluster_keys WHERE id = :id", {"id": key_id})
