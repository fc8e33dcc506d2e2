"""The audit log service: append hash-chained events, list them, verify the chain."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Generator, Iterator, Mapping
from datetime import datetime
from typing import Any

from warden.adapters.store.db import Database, Row, Tx
from warden.core.audit import (
    GENESIS,
    AuditEvent,
    ChainBreak,
    check_anchor,
    event_hash,
    parse_detail,
    scrub,
    verify_chain,
)

__all__ = ["AuditLog"]


# Rows `verify` reads per query: memory stays flat however long the log grows.
VERIFY_BATCH = 1000


def _from_row(row: Row, *, strict: bool = False) -> AuditEvent:
    return AuditEvent(
        seq=int(row["seq"]), at=row["at"], actor=row["actor"], action=row["action"],
        target=row["target"], decision=row["decision"], rule=row["rule"], result=row["result"],
        detail=parse_detail(row["detail"]) if strict else json.loads(row["detail"]),
        prev_hash=row["prev_hash"], hash=row["hash"],
    )


class AuditLog:
    """Append-only, tamper-evident record of every decision and operation."""

    def __init__(self, db: Database, clock: Callable[[], datetime]) -> None:
        self._db = db
        self._clock = clock

    def record(self, *, actor: str, action: str, target: str, decision: str = "none",
               rule: str = "", result: str = "ok", detail: Mapping[str, Any] | None = None,
               tx: Tx | None = None) -> AuditEvent:
        """Append one event; inside `tx` when the caller's change and its record must land together."""
        event = AuditEvent(at=self._clock().isoformat(timespec="microseconds"), actor=actor,
                           action=action, target=target, decision=decision, rule=rule,
                           result=result, detail=scrub(detail or {}))
        if tx is not None:
            return self._append(tx, event)
        with self._db.transaction() as own:
            return self._append(own, event)

    def _append(self, tx: Tx, event: AuditEvent) -> AuditEvent:
        if tx.dialect == "postgresql":
            # Serialise appenders across machines: the chain needs one writer at a time.
            tx.execute("SELECT pg_advisory_xact_lock(7263901)")
        last = tx.execute("SELECT seq, hash FROM audit_events ORDER BY seq DESC LIMIT 1")
        seq = int(last[0]["seq"]) + 1 if last else 1
        prev = str(last[0]["hash"]) if last else GENESIS
        digest = event_hash(event, seq, prev)
        tx.execute(
            "INSERT INTO audit_events (seq, at, actor, action, target, decision, rule, result,"
            " detail, prev_hash, hash) VALUES (:seq, :at, :actor, :action, :target, :decision,"
            " :rule, :result, :detail, :prev, :hash)",
            {"seq": seq, "at": event.at, "actor": event.actor, "action": event.action,
             "target": event.target, "decision": event.decision, "rule": event.rule,
             "result": event.result,
             "detail": json.dumps(event.detail, sort_keys=True, default=str, ensure_ascii=False),
             "prev": prev, "hash": digest},
        )
        return AuditEvent(**{**event.__dict__, "seq": seq, "prev_hash": prev, "hash": digest})

    def list(self, *, target: str | None = None, limit: int = 50) -> list[AuditEvent]:
        """The newest `limit` events (oldest first), optionally only those about `target`."""
        with self._db.transaction(write=False) as tx:
            if target is None:
                rows = tx.execute("SELECT * FROM audit_events ORDER BY seq DESC LIMIT :n", {"n": limit})
            else:
                rows = tx.execute(
                    "SELECT * FROM audit_events WHERE target = :t OR target LIKE :p"
                    " ORDER BY seq DESC LIMIT :n", {"t": target, "p": f"{target}:%", "n": limit})
        return [_from_row(r) for r in reversed(rows)]

    def verify(self, anchor: tuple[int, str] | None = None) -> tuple[int, ChainBreak | None]:
        """How many rows were checked and the first broken one, if any; with `anchor` (a head
        recorded earlier, see `head`), also that it is still there unchanged.

        Rows are streamed in pages (keyset by seq, one read transaction), never all at once."""
        count = 0
        unreadable: ChainBreak | None = None
        at_anchor: list[AuditEvent] = []

        def events(rows: Iterator[Row]) -> Iterator[AuditEvent]:
            nonlocal count, unreadable
            for row in rows:
                seq = int(row["seq"])
                if count == 0 and seq != 1:
                    unreadable = ChainBreak(1, "row 1 is missing (deleted)")
                    return
                try:
                    event = _from_row(row, strict=True)
                except ValueError as exc:  # bad JSON, a duplicate key: not what Warden wrote
                    count += 1
                    unreadable = ChainBreak(seq, f"its stored detail is not what Warden writes ({exc}; edited)")
                    return
                count += 1
                if anchor is not None and seq == anchor[0]:
                    at_anchor.append(event)
                yield event

        with contextlib.closing(self._rows_in_order()) as rows:
            broken = verify_chain(events(rows))
        broken = broken or unreadable
        if broken is None and anchor is not None:
            broken = check_anchor(at_anchor, *anchor)
        return count, broken

    def _rows_in_order(self) -> Generator[Row, None, None]:
        """Every row, oldest first, VERIFY_BATCH at a time (keyset pagination, no OFFSET)."""
        with self._db.transaction(write=False) as tx:
            rows = tx.execute("SELECT * FROM audit_events ORDER BY seq LIMIT :n", {"n": VERIFY_BATCH})
            while rows:
                yield from rows
                if len(rows) < VERIFY_BATCH:
                    return
                rows = tx.execute("SELECT * FROM audit_events WHERE seq > :after ORDER BY seq LIMIT :n",
                                  {"after": rows[-1]["seq"], "n": VERIFY_BATCH})

    def head(self) -> tuple[int, str] | None:
        """The newest event's seq and hash: keep it elsewhere to catch deleted newest rows later."""
        with self._db.transaction(write=False) as tx:
            rows = tx.execute("SELECT seq, hash FROM audit_events ORDER BY seq DESC LIMIT 1")
        return (int(rows[0]["seq"]), str(rows[0]["hash"])) if rows else None
