"""The janitor: keeps a busy home clean on its own (`warden janitor`, and inside `warden serve`).

One pass: what crashes left behind (the sweeper), the cleanup rules (core/janitor.py: idle,
expired temporary and bot workspaces archived or destroyed), approval requests past their time,
grants revoked or expired a day ago purged, and the disk of the home measured against
`cleanup.disk_alert_percent`. One janitor acts at a time: a pass holds the exclusive lease of
the name `@janitor` (no workspace can have it), so two at once — two servers on one
PostgreSQL, a person's `warden janitor` beside `warden serve` — never act twice; the second
says so and does nothing. Every act is audited; `dry_run` plans and changes nothing.
"""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from warden.core.errors import Locked, WardenError
from warden.core.janitor import Chore, JanitorRules, plan

if TYPE_CHECKING:
    from warden.core.ports import Registry
    from warden.services.approvals import ApprovalService
    from warden.services.audit import AuditLog
    from warden.services.instances import InstanceService
    from warden.services.leases import Lease, LeaseService
    from warden.services.lifecycle import LifecycleService
    from warden.services.sweeper import Sweeper
    from warden.services.workspaces import WorkspaceService

__all__ = ["JANITOR_LEASE", "JanitorReport", "JanitorService"]

JANITOR_LEASE = "@janitor"  # not a workspace name: the lease row of the janitor's leadership
GRANT_GRACE = timedelta(days=1)  # an ended grant stays listed (`warden grants`) this long


@dataclass
class JanitorReport:
    dry_run: bool
    ran: bool = True  # False: another janitor was at work
    chores: list[dict[str, Any]] = field(default_factory=list)
    approvals_expired: list[str] = field(default_factory=list)
    grants_purged: list[str] = field(default_factory=list)
    disk_percent: float | None = None
    disk_alert: bool = False
    swept: dict[str, Any] | None = None
    instances_dead: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class JanitorService:
    def __init__(self, *, registry: Registry, workspaces: WorkspaceService, lifecycle: Callable[[], LifecycleService],
                 sweeper: Callable[[], Sweeper], approvals: Callable[[], ApprovalService], leases: LeaseService,
                 audit: AuditLog, clock: Callable[[], datetime], rules: JanitorRules, disk_alert_percent: int,
                 home: Path, instances: Callable[[], InstanceService] | None = None) -> None:
        self._registry = registry
        self._instances = instances
        self._workspaces = workspaces
        self._lifecycle = lifecycle
        self._sweeper = sweeper
        self._approvals = approvals
        self._leases = leases
        self._audit = audit
        self._clock = clock
        self.rules = rules
        self.disk_alert_percent = disk_alert_percent
        self._home = home

    def run(self, *, dry_run: bool = False) -> JanitorReport:
        """One pass; `ran` False when another janitor holds the leadership."""
        report = JanitorReport(dry_run)
        try:
            with self._leases.hold(JANITOR_LEASE, "exclusive", "janitor") as lease:
                self._lease = lease
                self._pass(report)
        except Locked:
            report.ran = False
        finally:
            self._lease = None
        return report

    _lease: Lease | None = None

    def _still_leader(self) -> None:
        """Locked unless this janitor still holds the leadership with its fencing number: one
        presumed dead (paused past its lease) and succeeded by another stops before it acts."""
        if self._lease is not None:
            with self._registry.transaction(write=False) as tx:
                self._leases.check(tx, self._lease)

    def _busy(self, names: list[str]) -> set[str]:
        """Which of `names` have something running (a run in progress, a background process)."""
        busy = set()
        with self._registry.transaction(write=False) as tx:
            for name in names:
                if tx.runs.of_workspace(name) or any(p.status in ("starting", "running")
                                                     for p in tx.processes.of_workspace(name)):
                    busy.add(name)
        return busy

    def _pass(self, report: JanitorReport) -> None:
        now = self._clock()
        if self._instances is not None:  # dead instances (any node's) released: the leader's job
            self._still_leader()
            report.instances_dead = [i.id for i in self._instances().reap(dry_run=report.dry_run)]
        self._still_leader()
        report.swept = self._sweeper().sweep(dry_run=report.dry_run).to_json()
        # A node sweeps only its own workspaces: another's folder is not on this machine.
        chores = plan([r for r in self._workspaces.list() if self._workspaces.here(r)], now, self.rules)
        busy = self._busy([c.workspace for c in chores])
        for chore in chores:
            if chore.workspace not in busy:
                if not report.dry_run:
                    self._still_leader()
                report.chores.append(chore.to_json() if report.dry_run else self._do(chore))
        if not report.dry_run:
            self._still_leader()
            report.approvals_expired = self._approvals().expire()
            with self._registry.transaction() as tx:  # with its audit row, or not at all
                report.grants_purged = tx.grants.purge(now - GRANT_GRACE)
                if report.grants_purged:
                    self._audit.record(actor="janitor", action="grant.purge", target="grants", decision="allow",
                                       rule="janitor.grants", result="ok", detail={"accessors": report.grants_purged},
                                       tx=tx)
        usage = shutil.disk_usage(self._home)
        report.disk_percent = round(100.0 * usage.used / usage.total, 1) if usage.total else None
        report.disk_alert = report.disk_percent is not None and report.disk_percent >= self.disk_alert_percent
        if report.disk_alert and not report.dry_run:
            self._audit.record(actor="janitor", action="janitor.disk_alert", target=str(self._home), decision="none",
                               rule="cleanup.disk_alert_percent", result="alert",
                               detail={"percent": report.disk_percent, "limit": self.disk_alert_percent})

    def _do(self, chore: Chore) -> dict[str, Any]:
        done = chore.to_json()
        try:
            current = self._workspaces.get(chore.workspace)
            if current.id != chore.record_id:
                return {**done, "done": False, "error": "made again meanwhile: left alone"}
            if chore.action != "idle":
                # Looked at again right before acting: used or busy since the plan, it stays.
                still = plan([current], self._clock(), self.rules)
                if [c.action for c in still] != [chore.action] or self._busy([current.name]):
                    return {**done, "done": False, "error": "used meanwhile: left alone"}
            if chore.action == "archive":
                self._lifecycle().archive(chore.workspace, actor="janitor")
            elif chore.action == "destroy":
                self._workspaces.destroy(chore.workspace, actor="janitor", archive=False)
            else:
                if current.meta.get("idle_since") == chore.since:
                    return {**done, "done": True, "new": False}  # said at an earlier pass
                # In one transaction with a look at its last use: a run that used it meanwhile wins,
                # and the meta written is the row's own (plus the mark), not an older copy. Its event
                # in it too: written apart, a stop or a kill between them left the mark, and every
                # later pass took it for said while the log never said it.
                with self._registry.transaction() as tx:
                    row = tx.workspaces.get(current.name)
                    said = (row is not None and row.id == current.id and row.last_accessed == current.last_accessed
                            and tx.workspaces.compare_and_set(current.name, current.id, row.status,
                                                              {"meta": {**row.meta, "idle_since": chore.since}}))
                    if said:
                        self._audit.record(actor="janitor", action="workspace.idle", target=chore.workspace,
                                           decision="none", rule=chore.reason, result="idle",
                                           detail={"since": chore.since}, tx=tx)
        except WardenError as exc:  # one workspace in use or broken must not stop the pass
            return {**done, "done": False, "error": exc.message}
        return {**done, "done": True}
