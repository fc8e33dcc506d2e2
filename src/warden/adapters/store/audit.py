"""The `audit_events` table: the hash chain is extended here, one appender at a time."""

from __future__ import annotations

from warden.adapters.store.db import Row, Sql
from warden.core.audit import GENESIS, AuditEvent, StoredEvent, detail_text, event_hash

__all__ = ["SqlAudit"]

# Any constant shared by every node: PostgreSQL's transaction-scoped advisory lock on it makes
# appenders on several machines take turns, as the chain needs one writer at a time. Held to the
# end of the transaction, it is one lock over every appender: a transaction appends after its
# other writes, never before one (a row another appender holds while it waits for this lock is
# a deadlock; services/live.py `_stop`, services/runs_in_progress.py `mark_lost`).
_APPEND_LOCK = 7263901


def _stored(row: Row) -> StoredEvent:
    return StoredEvent(seq=int(row["seq"]), at=row["at"], actor=row["actor"], action=row["action"],
                       target=row["target"], decision=row["decision"], rule=row["rule"], result=row["result"],
                       detail=row["detail"], prev_hash=row["prev_hash"], hash=row["hash"])


class SqlAudit:
    """The `audit_events` table (core.ports.AuditTable)."""

    def __init__(self, sql: Sql) -> None:
        self._sql = sql

    def append(self, event: AuditEvent) -> AuditEvent:
        if self._sql.dialect == "postgresql":
            self._sql.execute("SELECT pg_advisory_xact_lock(:lock)", {"lock": _APPEND_LOCK})
        # On SQLite the write transaction (BEGIN IMMEDIATE) already holds the database lock.
        last = self.head()
        seq, prev = (last[0] + 1, last[1]) if last else (1, GENESIS)
        digest = event_hash(event, seq, prev)
        self._sql.execute(
            "INSERT INTO audit_events (seq, at, actor, action, target, decision, rule, result,"
            " detail, prev_hash, hash) VALUES (:seq, :at, :actor, :action, :target, :decision,"
            " :rule, :result, :detail, :prev, :hash)",
            {"seq": seq, "at": event.at, "actor": event.actor, "action": event.action,
             "target": event.target, "decision": event.decision, "rule": event.rule,
             "result": event.result, "detail": detail_text(event.detail), "prev": prev, "hash": digest})
        return AuditEvent(**{**event.__dict__, "seq": seq, "prev_hash": prev, "hash": digest})

    def head(self) -> tuple[int, str] | None:
        rows = self._sql.execute("SELECT seq, hash FROM audit_events ORDER BY seq DESC LIMIT 1")
        return (int(rows[0]["seq"]), str(rows[0]["hash"])) if rows else None

    def newest(self, *, target: str | None, limit: int) -> list[StoredEvent]:
        if target is None:
            rows = self._sql.execute("SELECT * FROM audit_events ORDER BY seq DESC LIMIT :n", {"n": limit})
        else:
            # `W` and its sub-targets (`W:path`), never another workspace whose name starts with W.
            rows = self._sql.execute(
                "SELECT * FROM audit_events WHERE target = :t OR target LIKE :p ESCAPE '!'"
                " ORDER BY seq DESC LIMIT :n",
                {"t": target, "p": f"{_like_escaped(target)}:%", "n": limit})
        return [_stored(r) for r in rows]

    def page(self, *, after: int | None, limit: int) -> list[StoredEvent]:
        if after is None:
            rows = self._sql.execute("SELECT * FROM audit_events ORDER BY seq LIMIT :n", {"n": limit})
        else:
            rows = self._sql.execute("SELECT * FROM audit_events WHERE seq > :after ORDER BY seq LIMIT :n",
                                     {"after": after, "n": limit})
        return [_stored(r) for r in rows]


def _like_escaped(text: str) -> str:
    """`text` matched literally by LIKE … ESCAPE '!' (names may hold `_`, LIKE's one-character wildcard)."""
    return text.replace("!", "!!").replace("%", "!%").replace("_", "!_")
