"""Workspace lifecycle: suspend, resume, archive, unarchive, cleanup, health.

    creating ─► ready ◄──► suspended
       │          │  ▲          │
       ▼          ▼  │          ▼
     broken ──► archived ◄──────┘      (destroy: from any status; archives first by default)

Suspend stops the workspace's sandboxed processes; resume checks health and repairs; archive
packs the folder (never the shared layers) into `$WARDEN_HOME/archives/NAME-TIME.tar.zst`
and frees the folder; unarchive restores it and re-links its layers.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from warden.core.durations import format_duration
from warden.core.errors import Conflict, NotFound, WardenError
from warden.core.workspaces import WorkspaceRecord, check_transition

if TYPE_CHECKING:
    from warden.core.ports import Clock, Processes, Unarchiver
    from warden.services.audit import AuditLog
    from warden.services.health import HealthReport, HealthService, Installer, RepairResult
    from warden.services.installs import InstallService
    from warden.services.layers import LayerService
    from warden.services.leases import Lease
    from warden.services.workspaces import WorkspaceService

__all__ = ["Archived", "Cleanup", "CleanupAction", "LifecycleService", "Repaired", "Resumed", "Suspended",
           "Unarchived"]


# -- results -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Suspended:
    name: str
    stopped: tuple[int, ...]  # the pids stopped

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "status": "suspended", "stopped": list(self.stopped)}


@dataclass(frozen=True)
class Resumed:
    name: str
    status: str  # ready, or broken when repair could not make it healthy
    health: HealthReport
    repaired: tuple[str, ...]
    failed: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "status": self.status, "health": self.health.to_json(),
                "repaired": list(self.repaired), "failed": list(self.failed)}


@dataclass(frozen=True)
class Repaired:
    """`warden health NAME --repair`: the health after, what was fixed and what could not be."""

    health: HealthReport
    fixed: tuple[str, ...]
    failed: tuple[str, ...]

    @property
    def healthy(self) -> bool:
        return self.health.healthy

    @property
    def usable(self) -> bool:
        return self.health.usable

    def to_json(self) -> dict[str, Any]:
        return {**self.health.to_json(), "fixed": list(self.fixed), "failed": list(self.failed)}


@dataclass(frozen=True)
class Archived:
    name: str
    archive: str | None  # None: there was no folder to pack
    size: int | None = None  # None: it was archived already

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"name": self.name, "status": "archived", "archive": self.archive}
        if self.size is not None:
            data["size"] = self.size
        return data


@dataclass(frozen=True)
class Unarchived:
    name: str
    status: str  # ready, or broken when repair could not make it healthy
    path: str
    repaired: tuple[str, ...]
    failed: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "status": self.status, "path": self.path, "repaired": list(self.repaired),
                "failed": list(self.failed)}


@dataclass(frozen=True)
class CleanupAction:
    """One workspace cleanup archives or destroys, and (unless a dry run) how it went."""

    name: str
    action: str  # archive or destroy
    reason: str  # idle or expired
    last_accessed: str
    archive: str | None = None  # where it was archived (None too when there was no folder)
    done: bool | None = None  # None: not tried (a dry run)
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"name": self.name, "action": self.action, "reason": self.reason,
                                "last_accessed": self.last_accessed}
        if self.action == "archive" and self.done:
            data["archive"] = self.archive
        if self.done is not None:
            data["done"] = self.done
        if self.error is not None:
            data["error"] = self.error
        return data


@dataclass(frozen=True)
class Cleanup:
    dry_run: bool
    older_than: timedelta
    actions: tuple[CleanupAction, ...]

    def to_json(self) -> dict[str, Any]:
        # As the user writes a DURATION ("7d"), never timedelta's "7 days, 0:00:00".
        return {"dry_run": self.dry_run, "older_than": format_duration(self.older_than),
                "older_than_s": int(self.older_than.total_seconds()),
                "actions": [action.to_json() for action in self.actions]}


# -- the service -----------------------------------------------------------------------------------
class LifecycleService:
    """Lifecycle operations on top of the workspace registry, layers and the sandbox."""

    def __init__(self, *, workspaces: WorkspaceService, audit: AuditLog, processes: Processes,
                 health: Callable[[], HealthService], installs: Callable[[], InstallService],
                 layers: Callable[[], LayerService], unarchiver: Unarchiver, clock: Clock) -> None:
        self._ws = workspaces
        self._audit = audit
        self._processes = processes
        self._health = health
        self._installs = installs
        self._layers = layers
        self._unarchiver = unarchiver
        self._clock = clock

    # -- suspend / resume ------------------------------------------------------------------
    def suspend(self, name: str, *, actor: str = "user") -> Suspended:
        """Stop every process of the workspace and mark it suspended."""
        first = self._ws.get(name)
        if first.status == "suspended":
            return Suspended(name, ())
        check_transition(name, first.status, "suspended")
        stopped: list[int] = []
        with self._ws.lease(name, "exclusive", "suspend",
                            drain=lambda: stopped.extend(self._processes.stop_processes(first.path))) as lease:
            record = self._ws.get(name)
            if record.status == "suspended":
                return Suspended(name, tuple(stopped))
            check_transition(name, record.status, "suspended")
            stopped += self._processes.stop_processes(record.path)
            self._ws.set_status(name, "suspended", actor=actor, detail={"stopped": len(stopped)},
                                expected=record, lease=lease)
        return Suspended(name, tuple(sorted(set(stopped))))

    def resume(self, name: str, *, actor: str = "user") -> Resumed:
        """Check health, repair what is wrong, and mark the workspace ready (or broken)."""
        with self._ws.lease(name, "exclusive", "resume") as lease:
            return self._resume_held(name, lease, actor)

    def _resume_held(self, name: str, lease: Lease | None, actor: str) -> Resumed:
        record = self._ws.get(name)
        if record.status == "archived":
            raise Conflict(f"workspace {name!r} is archived; `warden unarchive {name}` brings it back")
        if record.status == "creating":
            raise Conflict(f"workspace {name!r} is still being created; wait for it")
        report = self._health().check(record)
        if record.meta.get("adopted"):
            # An adopted folder has no environment of Warden's to rebuild: nothing is written into
            # it; it is ready again as it is.
            self._ws.set_status(name, "ready", actor=actor, action="workspace.resume",
                                detail={"adopted": True}, expected=record, lease=lease)
            return Resumed(name, "ready", report, (), ())
        repaired = None
        if not report.healthy:
            repaired = self.repair_record(record, lease)
            report = repaired.health
        status = "ready" if report.healthy else "broken"
        self._ws.set_status(name, status, actor=actor, action="workspace.resume",
                            detail={"issues": report.issues}, expected=record, lease=lease)
        self._ws.touch(name)
        return Resumed(name, status, report, tuple(repaired.fixed) if repaired else (),
                       tuple(repaired.failed) if repaired else ())

    # -- health ----------------------------------------------------------------------------
    def health(self, name: str, *, repair: bool = False, actor: str = "user") -> HealthReport | Repaired:
        """`warden health NAME [--repair]`."""
        if not repair:
            return self._health().check(self._ws.get(name))
        if self._ws.get(name).meta.get("adopted"):
            raise Conflict(f"workspace {name!r} is an adopted folder: Warden writes no environment into it, so "
                           "there is nothing of its own to repair")
        # Exclusive: a create, archive or run in progress is not repaired under its feet (a live
        # create holds the lease; a dead one's lease is taken over).
        with self._ws.lease(name, "exclusive", "repair") as lease:
            return self._repair_held(name, lease, actor)

    def _repair_held(self, name: str, lease: Lease | None, actor: str) -> Repaired:
        record = self._ws.get(name)
        if record.status == "archived":
            raise Conflict(f"workspace {name!r} is archived; `warden unarchive {name}` it first")
        if record.meta.get("blob") == "pending":
            raise Conflict(f"workspace {name!r} was being created from a project blob when its creator "
                           f"stopped, so its files are incomplete; `warden destroy {name} --no-archive "
                           "--yes` and create it again")
        result = self.repair_record(record, lease)
        health = result.health
        if record.status in ("broken", "creating") and health.healthy:
            self._ws.set_status(name, "ready", actor=actor, action="workspace.repair",
                                detail={"fixed": result.fixed}, expected=record, lease=lease)
            health = dataclasses.replace(health, status="ready")
        else:
            self._audit.record_made(actor=actor, action="workspace.repair", target=name,
                                    result="ok" if health.healthy else "partial",
                                    detail={"fixed": result.fixed, "failed": result.failed})
        return Repaired(health, tuple(result.fixed), tuple(result.failed))

    def repair_record(self, record: WorkspaceRecord, lease: Lease | None = None) -> RepairResult:
        """Repair `record`; `lease` is the exclusive lease the caller holds on it, which the
        reinstalls run under (they could not take a lease of their own beside it)."""
        return self._health().repair(record, install=self._installer(lease))

    def _installer(self, lease: Lease | None) -> Installer | None:
        service = self._installs()
        if not service.available():
            return None

        def install(record: WorkspaceRecord, packages: Sequence[str], node: bool) -> None:
            service.install_record(record, packages, node=node, persist=False, lease=lease)

        return install

    # -- archive / unarchive -----------------------------------------------------------------
    def archive(self, name: str, *, actor: str = "user", progress: bool = False) -> Archived:
        """Pack the workspace into archives/ and free its folder (`progress`: a bar on stderr)."""
        first = self._ws.get(name)
        if first.status == "archived":
            if not self._left_behind(first):
                return Archived(name, _archive_of(first))
        else:
            check_transition(name, first.status, "archived")
        with self._ws.lease(name, "exclusive", "archive",
                            drain=lambda: self._processes.stop_processes(first.path)) as lease:
            return self._archive_held(name, lease, actor, progress=progress)

    def _archive_held(self, name: str, lease: Lease | None, actor: str, *, progress: bool = False) -> Archived:
        # Read again under the lease: a second archive that waited finds the first one's result.
        record = self._ws.get(name)
        if record.meta.get("adopted"):
            raise Conflict(f"workspace {name!r} is an adopted folder: Warden never packs or moves it "
                           f"(`warden destroy {name} --yes` forgets it and leaves its files)")
        if record.status == "archived":
            if self._left_behind(record):
                # An archive stopped (kill -9) after its status write and before the folder went:
                # the archive holds all of it, so the folder goes now, as it would have.
                self._ws.trash(record.path)
            return Archived(name, _archive_of(record))
        check_transition(name, record.status, "archived")
        archive = None
        size = 0
        if self._ws.folders.present(record.path):
            self._processes.stop_processes(record.path)
            packed = self._ws.shelf.pack(record, progress=progress)
            archive, size = packed.path, packed.size
        meta = {**record.meta, "archive": archive, "status_before_archive": record.status}
        try:
            self._ws.set_status(name, "archived", meta=meta, actor=actor, detail={"archive": archive, "size": size},
                                expected=record, lease=lease)
        except BaseException:
            if archive is not None:
                self._drop_unrecorded(name, archive)
            raise
        self._ws.trash(record.path)
        return Archived(name, archive, size)

    def _drop_unrecorded(self, name: str, archive: str) -> None:
        """Remove `archive`, packed by an archive whose status write failed (a full disk, the row
        changed, the lease lost), unless the row names it after all (the write committed before
        its failure): named by no row, it stayed in archives/ for good, taking the very space
        whose lack stopped the archive. The folder it copies is still there."""
        try:
            if self._ws.get(name).meta.get("archive") == archive:
                return
        except NotFound:
            pass  # no row names it either
        except WardenError:
            return  # the registry cannot say: kept, as every archive whose fate is unknown
        with contextlib.suppress(OSError):
            self._ws.shelf.drop(archive)

    def _left_behind(self, record: WorkspaceRecord) -> bool:
        """Whether archived `record` still has its own folder beside an archive that holds it."""
        archive = _archive_of(record)
        return bool(archive) and self._ws.shelf.exists(str(archive)) and self._ws.folders.holds(record)

    def unarchive(self, name: str, *, actor: str = "user") -> Unarchived:
        """Restore an archived workspace's folder, re-link its layers, and mark it ready."""
        with self._ws.lease(name, "exclusive", "unarchive") as lease:
            return self._unarchive_held(name, lease, actor)

    def _unarchive_held(self, name: str, lease: Lease | None, actor: str) -> Unarchived:
        try:
            record = self._ws.get(name)
        except NotFound:
            record = self._ws.restore_destroyed(name, actor=actor)  # destroyed, but archived first
        if record.status != "archived":
            raise Conflict(f"workspace {name!r} is {record.status}, not archived")
        archive = _archive_of(record)
        # The workspace's own folder may be back already: an unarchive stopped (kill -9) after its
        # rename into place and before its status write, or an archive after its status write and
        # before the folder went. Either way the folder holds the archive's content (or newer): it
        # is taken as restored, where refusing ("move it away") left the workspace stuck archived.
        if not self._ws.folders.holds(record):
            if not archive or not self._ws.shelf.exists(archive):
                raise NotFound(f"the archive of {name!r} ({archive}) is gone; `warden destroy {name} --no-archive "
                               "--yes` removes the entry")
            try:
                self._unarchiver.restore(archive, record.path)
            except FileExistsError:
                raise Conflict(f"folder {record.path} exists; move it away before unarchiving {name!r}") from None
        meta = {k: v for k, v in record.meta.items() if k not in ("archive", "status_before_archive")}
        self._ws.set_status(name, "ready", meta=meta, actor=actor, action="workspace.unarchive",
                            detail={"archive": archive}, expected=record, lease=lease)
        repaired = self.repair_record(self._ws.get(name), lease)
        status = "ready" if repaired.health.healthy else "broken"
        if status != "ready":
            self._ws.set_status(name, status, actor=actor, action="workspace.unarchive",
                                detail={"failed": repaired.failed})
        if archive:
            self._unarchiver.discard(archive)
        self._ws.touch(name)
        return Unarchived(name, status, record.path, tuple(repaired.fixed), tuple(repaired.failed))

    # -- cleanup ---------------------------------------------------------------------------
    def cleanup(self, older_than: timedelta, *, dry_run: bool = False, actor: str = "user") -> Cleanup:
        """Archive workspaces idle longer than `older_than` (destroy temporary ones), and expired ones."""
        planned = self._cleanup_plan(older_than)
        if dry_run:
            return Cleanup(True, older_than, planned)
        done = tuple(self._clean(action, actor) for action in planned)
        self._layers().store.sweep()
        return Cleanup(False, older_than, done)

    def _cleanup_plan(self, older_than: timedelta) -> tuple[CleanupAction, ...]:
        now = self._clock()
        cutoff = now - older_than
        actions = []
        for record in self._ws.list():
            idle = _parse(record.last_accessed) < cutoff
            expired = record.expires_at is not None and _parse(record.expires_at) < now
            if not (idle or expired) or record.status == "creating" or record.meta.get("adopted"):
                continue
            if record.type == "temporary":
                action = "destroy"
            elif record.status == "archived":
                continue
            elif record.status == "broken" and not self._ws.folders.taken(record.path):
                action = "destroy"
            else:
                action = "archive"
            actions.append(CleanupAction(record.name, action, "expired" if expired else "idle",
                                         record.last_accessed))
        return tuple(actions)

    def _clean(self, action: CleanupAction, actor: str) -> CleanupAction:
        try:
            if action.action == "archive":
                action = dataclasses.replace(action, archive=self.archive(action.name, actor=actor).archive)
            else:
                self._ws.destroy(action.name, actor=actor, archive=False)
        except Exception as exc:  # one bad workspace must not stop the sweep
            return dataclasses.replace(action, done=False, error=getattr(exc, "message", str(exc)))
        return dataclasses.replace(action, done=True)

    # -- snapshots (layers) in use -----------------------------------------------------------
    def layers_in_use(self) -> dict[str, list[str]]:
        """layer id → names of the workspaces (any status) that use it."""
        from warden.services.folders import layer_ids

        used: dict[str, list[str]] = {}
        for record in self._ws.list():
            for layer_id in layer_ids(record):
                used.setdefault(layer_id, []).append(record.name)
        return used


def _archive_of(record: WorkspaceRecord) -> str | None:
    archive = record.meta.get("archive")
    return str(archive) if archive else None


def _parse(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp)
