"""Workspace leases (pure): who may change a workspace, or run in it, right now.

Every operation that changes a workspace's state or runs in it holds a lease on the workspace's
name: exclusive for lifecycle changes (create, archive, unarchive, destroy, suspend, resume,
repair), shared for runs, file writes and installs. A lease has a holder (node, pid and the
pid's start time, plus a random part), an expiry that the holder renews while it works, and the
workspace's fencing number, which grows with every exclusive grant: a holder that was presumed
dead and lost its lease finds the number changed at its next state write and stops.

The registry keeps one row per workspace name (adapters/store/leases); every change is a
compare-and-set on the fencing number, so two processes (or two machines on one PostgreSQL)
never both win. This module decides; it does no I/O and reads no clock.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Literal, NamedTuple

from warden.core.errors import Locked
from warden.core.locks import TerminalLock

__all__ = ["ENDING_OPS", "Held", "Holder", "LeaseState", "Mode", "acquire", "from_json", "live", "release", "renew",
           "to_json"]

# "draining": an exclusive holder-to-be that is stopping the runs in the way (archive, destroy,
# suspend): no new run may start meanwhile, and it becomes "exclusive" once they are gone.
Mode = Literal["exclusive", "shared", "draining"]
# The lifecycle operations that end a workspace's processes while their lease drains.
ENDING_OPS = ("suspend", "archive", "destroy")


class Holder(NamedTuple):
    """One lease holder: a process on a node, for one operation."""

    id: str            # unique per acquisition
    node: str
    pid: int
    start: int         # the pid's start time, so a reused pid is not mistaken for it
    op: str            # what it is doing, said to whoever is refused

    def to_json(self) -> dict[str, object]:
        return {"id": self.id, "node": self.node, "pid": self.pid, "start": self.start, "op": self.op}

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> Holder:
        return cls(str(data.get("id", "")), str(data.get("node", "")), _int(data.get("pid")),
                   _int(data.get("start")), str(data.get("op", "")))


def _int(value: object) -> int:
    return value if isinstance(value, int) else 0


class Held(NamedTuple):
    """A holder's hold on the lease: how, and until when unless renewed."""

    holder: Holder
    mode: Mode
    expires: str  # ISO-8601 UTC


class LeaseState(NamedTuple):
    """The lease row of one workspace name: its fencing number and current holders."""

    workspace: str
    fence: int = 0
    held: tuple[Held, ...] = ()
    lock: TerminalLock | None = None  # a terminal's lock (core/locks.py), kept on the same row

    def exclusive(self) -> Held | None:
        return next((h for h in self.held if h.mode == "exclusive"), None)


def live(state: LeaseState, now: datetime, alive: Callable[[Holder], bool | None]) -> LeaseState:
    """`state` without expired holders and holders known dead (`alive` False; None: unknown,
    e.g. a process on another node, which only expiry can end)."""
    kept = tuple(h for h in state.held
                 if datetime.fromisoformat(h.expires) > now and alive(h.holder) is not False)
    return state._replace(held=kept)


def acquire(state: LeaseState, holder: Holder, mode: Mode, now: datetime, ttl: timedelta,
            alive: Callable[[Holder], bool | None]) -> LeaseState:
    """The state with `holder` added, or Locked naming who holds the workspace and doing what."""
    current = live(state, now, alive)
    # A holder moving from draining to exclusive replaces its own entry.
    others = [h for h in current.held if h.holder.id != holder.id]
    # Runs share; a drainer waits out the runs (it stops them) but no other lifecycle change;
    # an exclusive holder is alone.
    blocking = others if mode == "exclusive" else [h for h in others if h.mode != "shared"]
    if blocking:
        other = next((h for h in blocking if h.mode != "shared"), blocking[0])
        what = "in use" if other.mode == "shared" else "busy"
        who = f"{other.holder.op} by pid {other.holder.pid}"
        if other.holder.node:
            who += f" on {other.holder.node}"
        raise Locked(f"workspace {state.workspace!r} is {what} ({who}); try again when it has finished",
                     rule=f"lease.{other.mode}")
    entry = Held(holder, mode, (now + ttl).isoformat())
    fence = current.fence + 1 if mode == "exclusive" else current.fence
    return current._replace(fence=fence, held=(*others, entry))


def renew(state: LeaseState, holder_id: str, now: datetime, ttl: timedelta) -> LeaseState | None:
    """The state with `holder_id`'s expiry pushed out, or None when it no longer holds a lease."""
    if not any(h.holder.id == holder_id for h in state.held):
        return None
    held = tuple(h._replace(expires=(now + ttl).isoformat()) if h.holder.id == holder_id else h
                 for h in state.held)
    return state._replace(held=held)


def release(state: LeaseState, holder_id: str) -> LeaseState:
    """The state without `holder_id` (unchanged when it held nothing)."""
    return state._replace(held=tuple(h for h in state.held if h.holder.id != holder_id))


def to_json(state: LeaseState) -> list[dict[str, object]]:
    return [{"holder": h.holder.to_json(), "mode": h.mode, "expires": h.expires} for h in state.held]


def from_json(workspace: str, fence: int, data: object) -> LeaseState:
    held: list[Held] = []
    if isinstance(data, list):
        for item in data:
            if isinstance(item, dict) and item.get("mode") in ("exclusive", "shared", "draining") \
                    and isinstance(item.get("expires"), str) and isinstance(item.get("holder"), dict):
                try:
                    datetime.fromisoformat(item["expires"])
                except ValueError:
                    continue
                held.append(Held(Holder.from_json(item["holder"]), item["mode"], item["expires"]))
    return LeaseState(workspace, fence, tuple(held))
