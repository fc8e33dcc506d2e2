"""Instance rows (core/nodes.py) and the nonces of node-to-node requests, in the registry."""

from __future__ import annotations

from warden.adapters.store.db import Row, Sql
from warden.core.nodes import Instance

__all__ = ["SqlInstances"]

_COLUMNS = Instance._fields


def _instance(row: Row) -> Instance:
    return Instance(**{c: row[c] for c in _COLUMNS})


class SqlInstances:
    """The `instances` and `node_nonces` tables (core.ports.InstanceTable)."""

    def __init__(self, sql: Sql) -> None:
        self._sql = sql

    def insert(self, instance: Instance) -> None:
        self._sql.execute(f"INSERT INTO instances ({', '.join(_COLUMNS)}) VALUES "
                          f"({', '.join(':' + c for c in _COLUMNS)})", instance._asdict())

    def beat(self, instance_id: str, at: str) -> bool:
        """Renew the heartbeat; False when the row is gone (found dead and released meanwhile)."""
        return bool(self._sql.execute("UPDATE instances SET heartbeat_at = :at WHERE id = :id RETURNING id",
                                      {"at": at, "id": instance_id}))

    def delete(self, instance_id: str) -> bool:
        return bool(self._sql.execute("DELETE FROM instances WHERE id = :id RETURNING id", {"id": instance_id}))

    def list_all(self) -> list[Instance]:
        return [_instance(r) for r in self._sql.execute("SELECT * FROM instances ORDER BY node, started_at")]

    def remember_nonce(self, nonce: str, at: str) -> bool:
        """Keep `nonce`; False when it was seen before (a replay)."""
        # ON CONFLICT, not a caught error: on PostgreSQL a failed statement aborts the transaction.
        return bool(self._sql.execute("INSERT INTO node_nonces (nonce, seen_at) VALUES (:nonce, :at) "
                                      "ON CONFLICT (nonce) DO NOTHING RETURNING nonce", {"nonce": nonce, "at": at}))

    def forget_nonces(self, before: str) -> int:
        return len(self._sql.execute("DELETE FROM node_nonces WHERE seen_at < :before RETURNING nonce",
                                     {"before": before}))
