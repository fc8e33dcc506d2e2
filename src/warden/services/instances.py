"""Instances and heartbeats (core/nodes.py): every server, daemon, shell and long command of a
node registers itself, renews a heartbeat every `node.heartbeat_interval`, and leaves on a clean
exit. One that stops beating (killed, its machine gone) is found dead — by the janitor, or by
the next instance that starts — and what it held is released and audited: its leases and its
terminal's lock, its runs in progress (lost), and the live sandboxes it started (stopped on its
own node; on a dead node, their rows forgotten and their processes marked lost).
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING

from warden.core import nodes
from warden.core.errors import Unavailable
from warden.core.nodes import Instance, NodeView
from warden.services import later

if TYPE_CHECKING:
    from warden.core.ports import Clock, Processes, Registry, Tx
    from warden.services.audit import AuditLog
    from warden.services.live import LiveSandboxService

__all__ = ["InstanceService", "NodeSettings"]

# Compare-and-set tries on one lease row while releasing a dead instance's hold on it.
_CAS_TRIES = 20
_JOIN_S = 5.0  # seconds a leaving process waits for its heartbeat thread to finish a registry write


@dataclass(frozen=True)
class NodeSettings:
    interval: timedelta  # node.heartbeat_interval
    window: timedelta    # node.heartbeat_window: no heartbeat this long = dead


class InstanceService:
    """The instances of the cluster, seen from node `node`."""

    def __init__(self, registry: Registry, audit: AuditLog, clock: Clock, processes: Processes, node: str,
                 settings: NodeSettings, live: Callable[[], LiveSandboxService] | None = None) -> None:
        self._registry = registry
        self._audit = audit
        self._clock = clock
        self._processes = processes
        self.node = node
        self.settings = settings
        self._live = live
        self.current: Instance | None = None  # this process's, while registered

    # -- this process ------------------------------------------------------------------------
    def join(self, kind: str, *, url: str | None = None, terminal: str | None = None) -> Instance:
        """Register this process as an instance of `kind` (one registry write); the caller beats
        (`beat`) and leaves (`leave`). The home's daemon does so from its own loop: no thread."""
        if kind not in nodes.KINDS:
            raise ValueError(kind)
        now = self._clock().isoformat()
        pid = os.getpid()
        instance = Instance("ins_" + os.urandom(8).hex(), self.node, kind, pid,
                            self._processes.start_time(pid) or 0, now, now, url, terminal)
        with self._registry.transaction() as tx:
            tx.instances.insert(instance)
        self.current = instance
        return instance

    def leave(self, instance: Instance) -> None:
        """Unregister `instance` (a clean exit); a failure leaves a row found dead later, by its pid."""
        if self.current is not None and self.current.id == instance.id:
            self.current = None
        with contextlib.suppress(Exception), self._registry.transaction() as tx:
            tx.instances.delete(instance.id)

    @contextlib.contextmanager
    def registered(self, kind: str, *, url: str | None = None, terminal: str | None = None) -> Iterator[Instance]:
        """Register this process as an instance of `kind` and keep its heartbeat while the block
        runs; dead instances are released first (a server or daemon starting is a good time)."""
        if kind not in nodes.KINDS:
            raise ValueError(kind)
        with contextlib.suppress(Exception):  # a failed look must not keep a server from starting
            self.reap()
        instance = self.join(kind, url=url, terminal=terminal)
        stop = threading.Event()
        beater = threading.Thread(target=self._beat_loop, args=(instance, stop), name="warden-heartbeat",
                                  daemon=True)
        beater.start()
        try:
            yield instance
        finally:
            stop.set()
            beater.join(_JOIN_S)  # no beat may register it again after it left
            self.leave(instance)

    @contextlib.contextmanager
    def registered_after(self, delay: timedelta, kind: str, *, terminal: str | None = None) -> Iterator[None]:
        """Register this process as an instance of `kind` only once the block has run `delay` (a
        long command): a short one costs a due time set and cancelled (services/later), no
        thread of its own and no registry write."""
        stop = threading.Event()
        joined: list[Instance] = []
        began = threading.Event()  # the registration started (it cannot be cancelled then)
        ended = threading.Event()

        def register() -> None:
            began.set()
            try:
                if stop.is_set():
                    return
                try:
                    joined.append(self.join(kind, terminal=terminal))
                except Exception:
                    return  # a locked or lost registry: the command goes on unregistered
                self._beat_loop(joined[0], stop)
            finally:
                ended.set()

        cancel = later.call(delay.total_seconds(), register)
        try:
            yield
        finally:
            stop.set()
            cancel()
            # A registration under way finishes first, so it is not left behind; one stuck on a
            # locked registry past _JOIN_S is left, and found dead by its pid later.
            if began.is_set():
                ended.wait(_JOIN_S)
            if joined:
                self.leave(joined[0])

    def _beat_loop(self, instance: Instance, stop: threading.Event) -> None:
        period = max(self.settings.interval.total_seconds(), 0.05)
        while not stop.wait(period):
            with contextlib.suppress(Exception):  # a missed beat is retried; the window is generous
                self.beat(instance, stop=stop)

    def beat(self, instance: Instance, *, stop: threading.Event | None = None) -> None:
        """Renew `instance`'s heartbeat; registered again if it was presumed dead meanwhile (it
        lives), unless it is leaving (`stop` set)."""
        now = self._clock().isoformat()
        with self._registry.transaction() as tx:
            if not tx.instances.beat(instance.id, now) and not (stop is not None and stop.is_set()):
                tx.instances.insert(instance._replace(heartbeat_at=now))

    def of_process(self, pid: int) -> Instance | None:
        """This node's registered instance of the running process `pid`, its start time checked (a
        row a dead process left under a pid used again is not it); None: it has none."""
        start = self._processes.start_time(pid)
        if not start:
            return None
        return next((i for i in self.instances() if i.node == self.node and i.pid == pid and i.pid_start == start),
                    None)

    def running_here(self, kind: str) -> list[Instance]:
        """This node's registered instances of `kind` whose process still runs (the one it names,
        its start time checked)."""
        return [i for i in self.instances() if i.node == self.node and i.kind == kind and self._alive(i)]

    # -- the cluster -------------------------------------------------------------------------
    def instances(self) -> list[Instance]:
        with self._registry.transaction(write=False) as tx:
            return tx.instances.list_all()

    def nodes(self, known: tuple[str, ...] = ()) -> list[NodeView]:
        """The `nodes` view: every node with instances (or `known`), live or not."""
        return nodes.nodes_view(self.instances(), self._clock(), self.settings.window, (self.node, *known))

    def live_nodes(self) -> dict[str, str | None]:
        """The live nodes and their newest server's API URL (None: no server there)."""
        return {v.node: v.url for v in nodes.nodes_view(self.instances(), self._clock(), self.settings.window)
                if v.live}

    def api_of(self, node: str) -> str:
        """The API URL of `node`'s live server, or Unavailable naming the node."""
        live = self.live_nodes()
        if node not in live:
            raise Unavailable(f"node {node!r} is unavailable (no heartbeat within "
                              f"{self.settings.window.total_seconds():g} s); try again when it is back",
                              rule="node.down")
        url = live[node]
        if url is None:
            raise Unavailable(f"node {node!r} runs no `warden serve` to take the request; start one there",
                              rule="node.no_server")
        return url

    def _alive(self, instance: Instance) -> bool:
        return self._processes.alive(instance.pid, instance.pid_start or None)

    def reap(self, *, dry_run: bool = False) -> list[Instance]:
        """Find dead instances and release what they held (audited); the instances found dead."""
        now = self._clock()
        found = nodes.dead_instances(self.instances(), now, self.settings.window, self.node, self._alive)
        if dry_run:
            return found
        reaped = []
        for instance in found:
            with self._registry.transaction() as tx:
                if not tx.instances.delete(instance.id):
                    continue  # another reaper took it
                released = self._release(tx, instance)
                self._audit.record(actor="janitor", action="instance.dead", target=instance.node, decision="none",
                                   rule="node.heartbeat_window", result="released",
                                   detail={**instance.to_json(), **released}, tx=tx)
            reaped.append(instance)
        for instance in reaped:
            self._stop_sandboxes(instance)
        self.forget_nonces()
        return reaped

    def forget_nonces(self) -> int:
        """Forget the nonces of node-to-node requests too old to be taken again (their timestamp
        is past the skew a receiver allows): each janitor pass, never per request."""
        with self._registry.transaction() as tx:
            return tx.instances.forget_nonces((self._clock() - 2 * nodes.SKEW).isoformat())

    def _release(self, tx: Tx, instance: Instance) -> dict[str, object]:
        """In `tx`: the dead instance's leases and terminal lock released, its runs marked lost."""
        names, locks_freed = [], []
        for name in tx.leases.names():
            held, lock = self._release_lease(tx, name, instance)
            if held:
                names.append(name)
            if lock:
                locks_freed.append(name)
        # Each run removed before any is audited, and audited only by the transaction that removed
        # it (a run starting on this node meanwhile marks the dead ones lost too: services/
        # runs_in_progress.mark_lost, which says why in that order).
        lost = [run for run in tx.runs.of_node(instance.node)
                if run.pid == instance.pid and run.pid_start in (0, instance.pid_start) and tx.runs.delete(run.run_id)]
        for run in lost:
            self._audit.record(actor=run.actor, action="run.lost", target=run.workspace, decision="allow",
                               rule="node.heartbeat_window", result="lost",
                               detail={"run_id": run.run_id, "started_at": run.started_at, "pid": run.pid,
                                       "node": run.node, "instance": instance.id}, tx=tx)
        return {"leases_released": names, "locks_released": locks_freed, "runs_lost": [r.run_id for r in lost]}

    @staticmethod
    def _release_lease(tx: Tx, name: str, instance: Instance) -> tuple[bool, bool]:
        """In `tx`: what the dead `instance` held of the lease of `name` released; (whether it held
        it, whether its terminal's lock on it went). By compare-and-set, read again when another
        writer changed the row meanwhile: on PostgreSQL each statement sees what was committed
        before it, and a live run's renewal or release between the read and the write made the
        write miss, leaving the dead holder in place (SQLite's write transaction lets no one in)."""
        from warden.core import leases

        for _ in range(_CAS_TRIES):
            state, version = tx.leases.read(name)
            mine = [h for h in state.held if h.holder.node == instance.node and h.holder.pid == instance.pid
                    and h.holder.start in (0, instance.pid_start)]
            lock = state.lock
            lock_gone = (lock is not None and instance.terminal is not None and lock.node == instance.node
                         and lock.terminal == instance.terminal)
            if not mine and not lock_gone:
                return False, False
            new = state
            for held in mine:
                new = leases.release(new, held.holder.id)
            if lock_gone:
                new = new._replace(lock=None)
            if tx.leases.write(new, version):
                return bool(mine), lock_gone
        return False, False

    def _stop_sandboxes(self, instance: Instance) -> None:
        """The live sandboxes `instance` started: stopped on this node; on another node that is down
        (nobody there can), their rows forgotten and their running processes marked lost (the node's
        sweeper kills what is left of them, unregistered, when it comes back)."""
        with self._registry.transaction(write=False) as tx:
            started = [s for s in tx.sandboxes.of_node(instance.node) if s.meta.get("instance") == instance.id]
        if not started:
            return
        if instance.node == self.node:
            if self._live is not None:
                for sandbox in started:
                    self._live().stop(sandbox, f"the Warden process that started it ({instance.kind}, pid "
                                               f"{instance.pid}) died", actor="janitor")
            return
        if instance.node in self.live_nodes():
            return  # its node lives: that node's own janitor stops them (no node touches another's)
        with self._registry.transaction() as tx:
            for sandbox in started:
                if not tx.sandboxes.delete(sandbox.id):
                    continue
                ended = []
                for process in tx.processes.of_sandbox(sandbox.id):
                    if process.running:
                        tx.processes.finish(process.id, status="lost", exit_code=None, signal=None,
                                            timed_out=False, ended_at=self._clock().isoformat())
                        ended.append(process.id)
                self._audit.record(actor="janitor", action="sandbox.stop", target=sandbox.workspace,
                                   decision="none", rule="node.heartbeat_window", result="lost",
                                   detail={"sandbox": sandbox.id, "node": sandbox.node,
                                           "reason": f"node {sandbox.node} stopped beating",
                                           "processes_lost": ended}, tx=tx)
