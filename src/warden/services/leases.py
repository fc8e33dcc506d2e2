"""Holding workspace leases (core/leases) in the registry, the same on SQLite and PostgreSQL.

`hold(name, mode, op)` is a context manager: it takes the lease by compare-and-set (retrying
when another writer changed the row in between), renews it from a daemon thread while the
operation works, and releases it at the end. Work that must be atomic with taking or giving
back the lease (a run's audit intent and outcome) runs in the same transaction through `on_take`
and `on_release`. An exclusive holder that must first stop runs in its way (archive, destroy,
suspend) passes `drain`: it announces itself ("draining": no new run may start), calls `drain`,
and takes the lease once the runs are gone, or gives up with Locked after `wait` seconds.
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta

from warden.core import leases, locks, stops
from warden.core.errors import Locked, Unavailable
from warden.core.leases import Holder, LeaseState
from warden.core.locks import TerminalLock
from warden.core.ports import Clock, Processes, Registry, Tx
from warden.services import later

__all__ = ["Lease", "LeaseService"]

TTL = timedelta(seconds=60)
_CAS_TRIES = 50


@dataclass
class Lease:
    """A lease this process holds: its holder id and the fencing number it was granted with."""

    workspace: str
    holder: Holder
    mode: str
    fence: int


class LeaseService:
    """Workspace leases of this node's processes."""

    def __init__(self, registry: Registry, processes: Processes, clock: Clock, node: str, *,
                 ttl: timedelta = TTL, terminal: str | None = None) -> None:
        self._registry = registry
        # The terminal this process acts for (None: a server's bots): a terminal's lock
        # (core/locks.py) refuses every other one.
        self.terminal = terminal
        self._processes = processes
        self._clock = clock
        self.node = node
        self.ttl = ttl
        self._lock = threading.Lock()
        self._held: dict[str, str] = {}  # holder id → workspace, of the leases this process holds
        self._renewing = False  # a renewal of them is due (services/later)

    # -- the model's view of liveness -------------------------------------------------------
    def _alive(self, holder: Holder) -> bool | None:
        if holder.node != self.node:
            return None  # another machine's process: only its expiry ends it
        return self._processes.alive(holder.pid, holder.start or None)

    def holder(self, op: str) -> Holder:
        pid = os.getpid()
        return Holder(os.urandom(8).hex(), self.node, pid, self._processes.start_time(pid) or 0, op)

    # -- compare-and-set loop ------------------------------------------------------------------
    def _change(self, name: str, change: Callable[[LeaseState], LeaseState | None],
                extra: Callable[[Tx, LeaseState], None] | None = None) -> LeaseState | None:
        """Apply `change` to the lease row by compare-and-set (with `extra` in the same
        transaction); the new state, or None when `change` said there is nothing to do."""
        for attempt in range(_CAS_TRIES):
            with self._registry.transaction() as tx:
                state, version = tx.leases.read(name)
                new = change(state)
                if new is None:
                    return None
                if tx.leases.write(new, version):
                    if extra is not None:
                        extra(tx, new)
                    return new
            time.sleep(min(0.001 * 2 ** attempt, 0.05))  # another writer won this round
        raise Locked(f"the lease of workspace {name!r} changes too fast to take; try again", rule="lease.contended")

    def state(self, name: str) -> LeaseState:
        with self._registry.transaction(write=False) as tx:
            state, _ = tx.leases.read(name)
        return leases.live(state, self._clock(), self._alive)

    def check(self, tx: Tx, lease: Lease) -> None:
        """Raise Locked unless `lease` is still held with its fencing number (call inside the
        transaction of a state write: a holder presumed dead must not write over its successor)."""
        state, _ = tx.leases.read(lease.workspace)
        mine = any(h.holder.id == lease.holder.id for h in state.held)
        if not mine or (lease.mode == "exclusive" and state.fence != lease.fence):
            raise Locked(f"workspace {lease.workspace!r} was taken over while {lease.holder.op} ran "
                         "(this process was presumed dead); nothing more was changed", rule="lease.lost")

    # -- holding -------------------------------------------------------------------------------
    @contextlib.contextmanager
    def hold(self, name: str, mode: str, op: str, *, drain: Callable[[], object] | None = None,
             wait: float = 15.0, on_take: Callable[[Tx, Lease], None] | None = None,
             on_release: Callable[[Tx, BaseException | None], None] | None = None) -> Iterator[Lease]:
        """Hold the lease of workspace `name` ("exclusive" or "shared") while the block runs.
        `on_release(tx, ended)` writes in the release's transaction; `ended` is what ended the hold
        (None: the block's normal end), a stop held back during the take included."""
        holder = self.holder(op)
        lease = Lease(name, holder, mode, 0)

        def take(state: LeaseState, as_mode: leases.Mode) -> LeaseState:
            now = self._clock()
            locks.check(state.lock, name, self.terminal, now, self._lock_alive)
            if state.lock is not None and state.lock.terminal == self.terminal:
                state = state._replace(lock=state.lock.renewed(now))  # its holder's use keeps it
            return leases.acquire(state, holder, as_mode, now, self.ttl, self._alive)

        def taken(tx: Tx, state: LeaseState) -> None:
            lease.fence = state.fence
            if on_take is not None:
                on_take(tx, lease)

        # Taken and given back whole, with their on_take and on_release writes (a run's intent and
        # outcome): a person's stop then is raised once the lease is held (and so given back) or
        # once it is given back (core/stops.py).
        whole = stops.Whole()
        # Until the take commits nothing is written: a stop while it waits for the registry's
        # lock (another process holds it) ends the command there, not once that one lets go.
        whole.unwritten = True
        if mode == "exclusive" and drain is not None:
            self._change(name, lambda s: take(s, "draining"))
            try:
                drain()
                deadline = time.monotonic() + wait
                while True:
                    try:
                        with whole:
                            self._change(name, lambda s: take(s, "exclusive"), taken)
                        break
                    except Locked:
                        if time.monotonic() > deadline:
                            raise
                        time.sleep(0.05)
            except BaseException:
                self._release(name, holder.id, None)
                raise
        else:
            with whole:
                self._change(name, lambda s: take(s, "exclusive" if mode == "exclusive" else "shared"), taken)
        whole.unwritten = False
        ended: BaseException | None = None
        try:
            whole.raise_held()
            self._keep_renewed(name, holder.id)
            yield lease
        except BaseException as exc:
            # Told to on_release: a stop raised here, before the block began, is seen by no caller
            # before the release (a run's outcome was then never written, its intent left open).
            ended = exc
            raise
        finally:
            with self._lock:
                self._held.pop(holder.id, None)
            with whole:
                try:
                    self._release(name, holder.id, on_release, ended)
                except Unavailable:
                    if on_release is not None:
                        raise  # what the release was to write with it (a run's outcome) is not written
                    # Nothing rides on it: the block's work is done (a create committed "ready") or
                    # its own error goes on. A release the registry cannot take now (a full disk)
                    # is left to lapse, no longer renewed (its holder's end or its ttl frees it):
                    # saying the command failed for it was false.
            whole.raise_held()

    # -- terminal locks ------------------------------------------------------------------------
    def _lock_alive(self, lock: TerminalLock) -> bool | None:
        """Whether a lock's terminal lives: known only for a shell session on this node."""
        session = locks.session_of(lock.terminal)
        if session is None or lock.node != self.node:
            return None
        return self._processes.alive(session[0], session[1] or None)

    def live_lock(self, name: str) -> TerminalLock | None:
        lock = self.state(name).lock
        return lock if lock is not None and lock.live(self._clock(), self._lock_alive) else None

    def change_lock(self, name: str, change: Callable[[TerminalLock | None], TerminalLock | None]) -> None:
        """Set the lock of `name` to `change(the live lock or None)`, by compare-and-set."""
        def changed(state: LeaseState) -> LeaseState:
            now = self._clock()
            current = state.lock if state.lock is not None and state.lock.live(now, self._lock_alive) else None
            return state._replace(lock=change(current))

        self._change(name, changed)

    def _release(self, name: str, holder_id: str, on_release: Callable[[Tx, BaseException | None], None] | None,
                 ended: BaseException | None = None) -> None:
        extra = (lambda tx, _state: on_release(tx, ended)) if on_release is not None else None
        self._change(name, lambda s: leases.release(s, holder_id), extra)

    def _keep_renewed(self, name: str, holder_id: str) -> None:
        """Renew this lease every ttl/3 until it is released: one renewal, due every ttl/3 while
        this process holds any, renews them all (a run costs no thread of its own: services/later)."""
        with self._lock:
            self._held[holder_id] = name
            if not self._renewing:
                self._renewing = True
                later.call(self._period(), self._renew_held)

    def _period(self) -> float:
        return max(self.ttl.total_seconds() / 3, 0.05)

    def _renew_held(self) -> None:
        with self._lock:
            held = list(self._held.items())
        for holder_id, name in held:
            with contextlib.suppress(Exception):  # a missed renewal is retried; expiry is generous
                self._change(name, functools.partial(self._renewed, holder_id=holder_id))
        with self._lock:  # again while any is held; a lease taken after this sets it going again
            self._renewing = bool(self._held)
            if self._renewing:
                later.call(self._period(), self._renew_held)

    def _renewed(self, state: LeaseState, *, holder_id: str) -> LeaseState | None:
        return leases.renew(state, holder_id, self._clock(), self.ttl)
