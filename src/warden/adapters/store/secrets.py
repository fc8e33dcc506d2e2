"""Secret rows: AES-GCM ciphertext, nonce and key id (base64 text, portable across databases)."""

from __future__ import annotations

import base64
from dataclasses import dataclass

from warden.adapters.keystore import Sealed
from warden.adapters.store.db import Row, Tx

__all__ = ["SecretRow", "all_rows", "delete", "get", "names", "upsert"]


@dataclass(frozen=True)
class SecretRow:
    name: str
    sealed: Sealed
    created_at: str
    updated_at: str

    def to_json(self) -> dict[str, object]:
        """What may be shown about a secret: never its value or ciphertext."""
        return {"name": self.name, "key_id": self.sealed.key_id, "created": self.created_at,
                "updated": self.updated_at}


def _row(row: Row) -> SecretRow:
    sealed = Sealed(base64.b64decode(row["ciphertext"]), base64.b64decode(row["nonce"]), row["key_id"])
    return SecretRow(row["name"], sealed, row["created_at"], row["updated_at"])


def upsert(tx: Tx, name: str, sealed: Sealed, at: str) -> bool:
    """Insert or replace the secret `name`; True when it is new."""
    values = {"name": name, "c": base64.b64encode(sealed.ciphertext).decode("ascii"),
              "n": base64.b64encode(sealed.nonce).decode("ascii"), "k": sealed.key_id, "at": at}
    updated = tx.execute("UPDATE secrets SET ciphertext = :c, nonce = :n, key_id = :k, updated_at = :at"
                         " WHERE name = :name RETURNING name", values)
    if updated:
        return False
    tx.execute("INSERT INTO secrets (name, ciphertext, nonce, key_id, created_at, updated_at)"
               " VALUES (:name, :c, :n, :k, :at, :at)", values)
    return True


def get(tx: Tx, name: str) -> SecretRow | None:
    rows = tx.execute("SELECT * FROM secrets WHERE name = :n", {"n": name})
    return _row(rows[0]) if rows else None


def all_rows(tx: Tx) -> list[SecretRow]:
    return [_row(r) for r in tx.execute("SELECT * FROM secrets ORDER BY name")]


def names(tx: Tx) -> list[str]:
    return [str(r["name"]) for r in tx.execute("SELECT name FROM secrets ORDER BY name")]


def delete(tx: Tx, name: str) -> bool:
    return bool(tx.execute("DELETE FROM secrets WHERE name = :n RETURNING name", {"n": name}))
