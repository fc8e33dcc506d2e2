"""Secret rows: AES-GCM ciphertext, nonce and key id (base64 text, portable across databases)."""

from __future__ import annotations

import base64

from warden.adapters.store.db import Row, Sql
from warden.core.secrets import Sealed, SecretRow

__all__ = ["SqlSecrets"]


def _row(row: Row) -> SecretRow:
    sealed = Sealed(base64.b64decode(row["ciphertext"]), base64.b64decode(row["nonce"]), row["key_id"])
    return SecretRow(row["name"], sealed, row["created_at"], row["updated_at"])


class SqlSecrets:
    """The `secrets` table (core.ports.SecretTable)."""

    def __init__(self, sql: Sql) -> None:
        self._sql = sql

    def upsert(self, name: str, sealed: Sealed, at: str) -> bool:
        """Insert or replace the secret `name`; True when it is new."""
        values = {"name": name, "c": base64.b64encode(sealed.ciphertext).decode("ascii"),
                  "n": base64.b64encode(sealed.nonce).decode("ascii"), "k": sealed.key_id, "at": at}
        # Insert first, by ON CONFLICT rather than a caught error (on PostgreSQL a failed statement
        # aborts the transaction): an update first, then an insert, failed with Conflict when
        # another process inserted the same new name between the two. The update waits for that
        # one's row; a row removed meanwhile is inserted again.
        while True:
            if self._sql.execute("INSERT INTO secrets (name, ciphertext, nonce, key_id, created_at, updated_at)"
                                 " VALUES (:name, :c, :n, :k, :at, :at) ON CONFLICT (name) DO NOTHING RETURNING name",
                                 values):
                return True
            if self._sql.execute("UPDATE secrets SET ciphertext = :c, nonce = :n, key_id = :k, updated_at = :at"
                                 " WHERE name = :name RETURNING name", values):
                return False

    def get(self, name: str) -> SecretRow | None:
        rows = self._sql.execute("SELECT * FROM secrets WHERE name = :n", {"n": name})
        return _row(rows[0]) if rows else None

    def list_all(self) -> list[SecretRow]:
        return [_row(r) for r in self._sql.execute("SELECT * FROM secrets ORDER BY name")]

    def names(self) -> list[str]:
        return [str(r["name"]) for r in self._sql.execute("SELECT name FROM secrets ORDER BY name")]

    def delete(self, name: str) -> bool:
        return bool(self._sql.execute("DELETE FROM secrets WHERE name = :n RETURNING name", {"n": name}))

    def hold_key(self) -> str | None:
        from warden.adapters.store.keyring import SqlKeyring

        return SqlKeyring(self._sql).hold_current("secrets")
