"""Terminals' locks on workspaces: take, renew, give back, take over, list (core/locks.py).

The lock lives on the workspace's lease row, so the lease service (services/leases.py) holds
it against every other terminal and every bot; this service is the person's side of it, with
an audit event for each change (a takeover names whom it took the lock from).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

from warden.core.errors import Conflict, InvalidInput, Locked
from warden.core.locks import TerminalLock
from warden.services.audit import AuditLog
from warden.services.leases import LeaseService
from warden.services.workspaces import WorkspaceService

__all__ = ["LockService"]

DEFAULT_TTL = timedelta(hours=2)


def _or_default(ttl: timedelta | None) -> timedelta:
    return DEFAULT_TTL if ttl is None else ttl  # a zero ttl is refused, not defaulted


class LockService:
    def __init__(self, leases: LeaseService, workspaces: WorkspaceService, audit: AuditLog,
                 clock: Callable[[], datetime]) -> None:
        self._leases = leases
        self._workspaces = workspaces
        self._audit = audit
        self._clock = clock

    def _terminal(self) -> str:
        if self._leases.terminal is None:
            raise InvalidInput("a lock belongs to a terminal; this process acts for none")
        return self._leases.terminal

    def lock(self, name: str, *, ttl: timedelta | None = None, reason: str = "") -> TerminalLock:
        """Lock `name` to this terminal (or renew this terminal's lock); Locked when another holds it."""
        terminal = self._terminal()
        self._workspaces.get(name)
        made: list[TerminalLock] = []

        def change(current: TerminalLock | None) -> TerminalLock:
            if current is not None and current.terminal != terminal:
                raise Locked(f"workspace {name!r} is locked by terminal {current.terminal} until "
                             f"{current.expires:%Y-%m-%d %H:%M:%S} UTC; `warden takeover {name}` takes it over",
                             rule="lock.terminal")
            lock = TerminalLock.new(terminal, self._leases.node, self._clock(), _or_default(ttl), reason)
            if current is not None:
                lock = TerminalLock(terminal, lock.node, current.since, lock.expires, lock.ttl_s, reason)
            made[:] = [lock]
            return lock

        self._leases.change_lock(name, change)
        self._audit.record_made(actor="user", action="workspace.lock", target=name, decision="allow", rule="lock.take",
                           result="ok", detail={"terminal": terminal, "expires": made[0].expires.isoformat(),
                                                "reason": reason})
        return made[0]

    def unlock(self, name: str) -> TerminalLock:
        """Give back this terminal's lock on `name`."""
        terminal = self._terminal()
        had: list[TerminalLock] = []

        def change(current: TerminalLock | None) -> TerminalLock | None:
            if current is None:
                raise Conflict(f"workspace {name!r} is not locked", rule="lock.none")
            if current.terminal != terminal:
                raise Locked(f"workspace {name!r} is locked by terminal {current.terminal}, not this one; "
                             f"`warden takeover {name}` takes it over", rule="lock.terminal")
            had[:] = [current]
            return None

        self._leases.change_lock(name, change)
        self._audit.record_made(actor="user", action="workspace.unlock", target=name, decision="allow",
                           rule="lock.give", result="ok", detail={"terminal": terminal})
        return had[0]

    def takeover(self, name: str, *, ttl: timedelta | None = None, reason: str = "") -> tuple[TerminalLock,
                                                                                              TerminalLock | None]:
        """Take `name`'s lock for this terminal, from whichever terminal held it (audited)."""
        terminal = self._terminal()
        self._workspaces.get(name)
        taken: list[TerminalLock | None] = []
        made: list[TerminalLock] = []

        def change(current: TerminalLock | None) -> TerminalLock:
            taken[:] = [current]
            made[:] = [TerminalLock.new(terminal, self._leases.node, self._clock(), _or_default(ttl), reason)]
            return made[0]

        self._leases.change_lock(name, change)
        previous = taken[0]
        self._audit.record_made(actor="user", action="workspace.takeover", target=name, decision="allow",
                           rule="lock.takeover", result="ok",
                           detail={"terminal": terminal, "from": previous.terminal if previous else None})
        return made[0], previous

    def locks(self) -> list[tuple[str, TerminalLock]]:
        """Every live lock: (workspace, lock)."""
        found = []
        for record in self._workspaces.list():
            lock = self._leases.live_lock(record.name)
            if lock is not None:
                found.append((record.name, lock))
        return found
