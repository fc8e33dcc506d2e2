"""The audit log service: append hash-chained events, list them, verify the chain."""

from __future__ import annotations

import builtins  # `list` below names the method
import logging
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from warden.core.audit import (
    AuditEvent,
    ChainBreak,
    StoredEvent,
    check_anchor,
    scrub,
    verify_chain,
)
from warden.core.errors import WardenError
from warden.core.ports import Clock, Registry, Tx

if TYPE_CHECKING:
    from datetime import datetime

__all__ = ["AuditLog", "unaudited"]


# Where a change made but not audited is said (stderr for the CLI, the server's log).
_log = logging.getLogger("warden.audit")


def unaudited(what: str, reason: str) -> None:
    """Say that `what` happened although its audit row could not be written (`reason`)."""
    _log.warning("warden: %s, but not in the audit log: %s", what, reason)


# Rows `verify` reads per query: memory stays flat however long the log grows.
VERIFY_BATCH = 1000


class AuditLog:
    """Append-only, tamper-evident record of every decision and operation."""

    def __init__(self, registry: Registry, clock: Clock) -> None:
        self._registry = registry
        self._clock = clock

    def record(self, *, actor: str, action: str, target: str, decision: str = "none",
               rule: str = "", result: str = "ok", detail: Mapping[str, Any] | None = None,
               tx: Tx | None = None) -> AuditEvent:
        """Append one event; inside `tx` when the caller's change and its record must land together."""
        event = AuditEvent(at=self._clock().isoformat(timespec="microseconds"), actor=actor,
                           action=action, target=target, decision=decision, rule=rule,
                           result=result, detail=scrub(detail or {}))
        if tx is not None:
            return tx.audit.append(event)
        with self._registry.transaction() as own:
            return own.audit.append(event)

    def record_made(self, **event: Any) -> AuditEvent | None:
        """The row of a change already made, that cannot be undone when its row fails (a full
        disk, a database gone): the failure is said as a warning line instead of raised, since
        saying the change failed would be false (and its caller would make it again)."""
        try:
            return self.record(**event)
        except WardenError as exc:
            unaudited(f"{event.get('action')} on {event.get('target')} is done", exc.message)
            return None

    def list(self, *, target: str | None = None, limit: int = 50) -> list[AuditEvent]:
        """The newest `limit` events (oldest first), optionally only those about `target`."""
        with self._registry.transaction(write=False) as tx:
            stored = tx.audit.newest(target=target, limit=limit)
        return [row.to_event() for row in reversed(stored)]

    def after(self, seq: int, *, target: str | None = None, limit: int = 500) -> builtins.list[AuditEvent]:
        """Events newer than `seq` (oldest first, at most `limit` rows read), optionally only
        those about `target` (the workspace and its sub-targets `W:path`): what a follower of
        the log has not seen yet."""
        with self._registry.transaction(write=False) as tx:
            stored = tx.audit.page(after=seq, limit=limit)
        events = [row.to_event() for row in stored]
        if target is not None:
            events = [e for e in events if e.target == target or e.target.startswith(target + ":")]
        return events

    def now(self) -> datetime:
        """The service's clock (a `--since` cut-off is measured from it)."""
        return self._clock()

    def verify(self, anchor: tuple[int, str] | None = None) -> tuple[int, ChainBreak | None]:
        """How many rows were checked and the first broken one, if any; with `anchor` (a head
        recorded earlier, see `head`), also that it is still there unchanged.

        Rows are streamed in pages (keyset by seq, one read transaction), never all at once."""
        count = 0
        unreadable: ChainBreak | None = None
        at_anchor: list[AuditEvent] = []

        def events(rows: Iterator[StoredEvent]) -> Iterator[AuditEvent]:
            nonlocal count, unreadable
            for row in rows:
                seq = row.seq
                if count == 0 and seq != 1:
                    unreadable = ChainBreak(1, "row 1 is missing (deleted)")
                    return
                try:
                    event = row.to_event(strict=True)
                except ValueError as exc:  # bad JSON, a duplicate key: not what Warden wrote
                    count += 1
                    unreadable = ChainBreak(seq, f"its stored detail is not what Warden writes ({exc}; edited)")
                    return
                count += 1
                if anchor is not None and seq == anchor[0]:
                    at_anchor.append(event)
                yield event

        with self._registry.transaction(write=False) as tx:
            broken = verify_chain(events(_in_order(tx)))
        broken = broken or unreadable
        if broken is None and anchor is not None:
            broken = check_anchor(at_anchor, *anchor)
        return count, broken

    def head(self) -> tuple[int, str] | None:
        """The newest event's seq and hash: keep it elsewhere to catch deleted newest rows later."""
        with self._registry.transaction(write=False) as tx:
            return tx.audit.head()


def _in_order(tx: Tx) -> Iterator[StoredEvent]:
    """Every event, oldest first, VERIFY_BATCH at a time (keyset pagination, one transaction)."""
    after: int | None = None
    while True:
        page = tx.audit.page(after=after, limit=VERIFY_BATCH)
        yield from page
        if len(page) < VERIFY_BATCH:
            return
        after = page[-1].seq
