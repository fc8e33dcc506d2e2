"""Terminal locks (pure): one terminal keeps a workspace to itself for a while (seed 000).

A lock names the terminal holding it, why, since when and until when. It lives on the
workspace's lease row (core/leases.py), so taking a lease and checking the lock are one
compare-and-set: while it is live, runs, file writes and lifecycle changes of every other
terminal are refused (`locked`), and so is every bot's request (no terminal is a bot's). Reads
are not changes and go on. The holding terminal's own commands renew it (a sliding expiry of
`ttl`); a lock whose terminal is a shell session that has ended on this node is over at once.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from warden.core.errors import InvalidInput, Locked

__all__ = ["MAX_REASON", "TerminalLock", "check", "session_of"]

MAX_REASON = 200
_SESSION = re.compile(r"^sid(\d{1,10})-(\d{1,20})$")


@dataclass(frozen=True)
class TerminalLock:
    terminal: str
    node: str
    since: datetime
    expires: datetime
    ttl_s: int
    reason: str = ""

    def live(self, now: datetime, alive: Callable[[TerminalLock], bool | None]) -> bool:
        """Still holding: before its expiry and its terminal not known to be gone."""
        return now < self.expires and alive(self) is not False

    def renewed(self, now: datetime) -> TerminalLock:
        return replace(self, expires=max(self.expires, now + timedelta(seconds=self.ttl_s)))

    def to_json(self) -> dict[str, object]:
        return {"terminal": self.terminal, "node": self.node, "since": self.since.isoformat(),
                "expires": self.expires.isoformat(), "ttl_s": self.ttl_s, "reason": self.reason}

    @classmethod
    def from_json(cls, doc: object) -> TerminalLock | None:
        if not isinstance(doc, Mapping):
            return None
        try:
            return cls(str(doc["terminal"]), str(doc["node"]), datetime.fromisoformat(str(doc["since"])),
                       datetime.fromisoformat(str(doc["expires"])), int(doc["ttl_s"]), str(doc.get("reason", "")))
        except (KeyError, TypeError, ValueError):
            return None  # unreadable: no lock (a lock fails open only to its own holder's ttl)

    @classmethod
    def new(cls, terminal: str, node: str, now: datetime, ttl: timedelta, reason: str) -> TerminalLock:
        if not timedelta(seconds=1) <= ttl <= timedelta(days=30):
            raise InvalidInput("a lock's --ttl is between 1s and 30d (e.g. 2h)")
        if len(reason) > MAX_REASON or any(ord(c) < 32 for c in reason):
            raise InvalidInput(f"a lock's --reason is one line of at most {MAX_REASON} characters")
        return cls(terminal, node, now, now + ttl, int(ttl.total_seconds()), reason)


def session_of(terminal: str) -> tuple[int, int] | None:
    """(session leader pid, its start time) for a terminal named after its shell session."""
    found = _SESSION.match(terminal)
    return (int(found.group(1)), int(found.group(2))) if found else None


def check(lock: TerminalLock | None, workspace: str, terminal: str | None, now: datetime,
          alive: Callable[[TerminalLock], bool | None]) -> None:
    """Locked unless `terminal` (None: a bot, or a server on nobody's terminal) may change it."""
    if lock is None or not lock.live(now, alive) or lock.terminal == terminal:
        return
    why = f" ({lock.reason})" if lock.reason else ""
    until = f"{lock.expires:%Y-%m-%d %H:%M:%S} UTC"
    if terminal is None:  # a bot: nothing of the person's to run, only someone to ask
        raise Locked(f"workspace {workspace!r} is locked by its person's terminal{why} until {until}; "
                     "try again later or ask them to unlock it", rule="lock.terminal")
    raise Locked(f"workspace {workspace!r} is locked by terminal {lock.terminal}{why} until {until}; "
                 f"wait, ask there for `warden unlock {workspace}`, or take it over with `warden takeover "
                 f"{workspace}`", rule="lock.terminal")
