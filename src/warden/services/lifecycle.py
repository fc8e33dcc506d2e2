"""Workspace lifecycle (seeds 000, 001): suspend, resume, archive, unarchive, cleanup, health.

    creating ─► ready ◄──► suspended
       │          │  ▲          │
       ▼          ▼  │          ▼
     broken ──► archived ◄──────┘      (destroy: from any status; archives first by default)

Suspend stops the workspace's sandboxed processes; resume checks health and repairs; archive
packs the folder (never the shared layers) into `$WARDEN_HOME/archives/NAME-TIME.tar.zst`
and frees the folder; unarchive restores it and re-links its layers.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from warden.core.durations import format_duration
from warden.core.errors import Conflict, NotFound
from warden.core.workspaces import WorkspaceRecord, check_transition

if TYPE_CHECKING:
    from warden.bootstrap import App
    from warden.services.health import HealthService
    from warden.services.leases import Lease

__all__ = ["LifecycleService"]


class LifecycleService:
    """Lifecycle operations on top of the workspace registry, layers and the sandbox."""

    def __init__(self, app: App) -> None:
        self._app = app
        self._ws = app.workspaces

    @property
    def health_service(self) -> HealthService:
        from warden.services.health import HealthService

        return HealthService(self._ws, self._app.layers)

    # -- suspend / resume ------------------------------------------------------------------
    def suspend(self, name: str, *, actor: str = "user") -> dict[str, Any]:
        """Stop every process of the workspace and mark it suspended."""
        from warden.adapters.processes import stop_processes

        first = self._ws.get(name)
        if first.status == "suspended":
            return {"name": name, "status": "suspended", "stopped": []}
        check_transition(name, first.status, "suspended")
        stopped: list[int] = []
        with self._ws.lease(name, "exclusive", "suspend",
                            drain=lambda: stopped.extend(stop_processes(first.path))) as lease:
            record = self._ws.get(name)
            if record.status == "suspended":
                return {"name": name, "status": "suspended", "stopped": stopped}
            check_transition(name, record.status, "suspended")
            stopped += stop_processes(record.path)
            self._ws.set_status(name, "suspended", actor=actor, detail={"stopped": len(stopped)},
                                expected=record, lease=lease)
        return {"name": name, "status": "suspended", "stopped": sorted(set(stopped))}

    def resume(self, name: str, *, actor: str = "user") -> dict[str, Any]:
        """Check health, repair what is wrong, and mark the workspace ready (or broken)."""
        with self._ws.lease(name, "exclusive", "resume") as lease:
            return self._resume_held(name, lease, actor)

    def _resume_held(self, name: str, lease: Lease | None, actor: str) -> dict[str, Any]:
        record = self._ws.get(name)
        if record.status == "archived":
            raise Conflict(f"workspace {name!r} is archived; `warden unarchive {name}` brings it back")
        if record.status == "creating":
            raise Conflict(f"workspace {name!r} is still being created; wait for it")
        report = self.health_service.check(record)
        repaired = None
        if not report["healthy"]:
            repaired = self.repair_record(record, lease)
            report = repaired["health"]
        status = "ready" if report["healthy"] else "broken"
        self._ws.set_status(name, status, actor=actor, action="workspace.resume",
                            detail={"issues": report["issues"]}, expected=record, lease=lease)
        self._ws.touch(name)
        return {"name": name, "status": status, "health": report,
                "repaired": repaired["fixed"] if repaired else [],
                "failed": repaired["failed"] if repaired else []}

    # -- health ----------------------------------------------------------------------------
    def health(self, name: str, *, repair: bool = False, actor: str = "user") -> dict[str, Any]:
        """`warden health NAME [--repair]`."""
        if not repair:
            return self.health_service.check(self._ws.get(name))
        # Exclusive: a create, archive or run in progress is not repaired under its feet (a live
        # create holds the lease; a dead one's lease is taken over).
        with self._ws.lease(name, "exclusive", "repair") as lease:
            return self._repair_held(name, lease, actor)

    def _repair_held(self, name: str, lease: Lease | None, actor: str) -> dict[str, Any]:
        record = self._ws.get(name)
        if record.status == "archived":
            raise Conflict(f"workspace {name!r} is archived; `warden unarchive {name}` it first")
        if record.meta.get("blob") == "pending":
            raise Conflict(f"workspace {name!r} was being created from a project blob when its creator "
                           f"stopped, so its files are incomplete; `warden destroy {name} --no-archive "
                           "--yes` and create it again")
        result = self.repair_record(record, lease)
        health = result["health"]
        if record.status in ("broken", "creating") and health["healthy"]:
            self._ws.set_status(name, "ready", actor=actor, action="workspace.repair",
                                detail={"fixed": result["fixed"]}, expected=record, lease=lease)
            health["status"] = "ready"
        else:
            self._app.audit.record(actor=actor, action="workspace.repair", target=name,
                                   result="ok" if health["healthy"] else "partial",
                                   detail={"fixed": result["fixed"], "failed": result["failed"]})
        return {**health, "fixed": result["fixed"], "failed": result["failed"]}

    def repair_record(self, record: WorkspaceRecord, lease: Lease | None = None) -> dict[str, Any]:
        """Repair `record`; `lease` is the exclusive lease the caller holds on it, which the
        reinstalls run under (they could not take a lease of their own beside it)."""
        return self.health_service.repair(record, install=self._installer(lease))

    def _installer(self, lease: Lease | None) -> Any:
        from warden.services.installs import InstallService

        service = InstallService(self._app)
        if not service.available():
            return None

        def install(record: WorkspaceRecord, packages: list[str], node: bool) -> None:
            service.install_record(record, packages, node=node, persist=False, lease=lease)

        return install

    # -- archive / unarchive -----------------------------------------------------------------
    def archive(self, name: str, *, actor: str = "user") -> dict[str, Any]:
        """Pack the workspace into archives/ and free its folder."""
        from warden.adapters.processes import stop_processes

        first = self._ws.get(name)
        if first.status == "archived":
            return {"name": name, "status": "archived", "archive": first.meta.get("archive")}
        check_transition(name, first.status, "archived")
        with self._ws.lease(name, "exclusive", "archive", drain=lambda: stop_processes(first.path)) as lease:
            return self._archive_held(name, lease, actor)

    def _archive_held(self, name: str, lease: Lease | None, actor: str) -> dict[str, Any]:
        from warden.adapters.processes import stop_processes

        # Read again under the lease: a second archive that waited finds the first one's result.
        record = self._ws.get(name)
        if record.status == "archived":
            return {"name": name, "status": "archived", "archive": record.meta.get("archive")}
        check_transition(name, record.status, "archived")
        path = Path(record.path)
        archive = None
        size = 0
        if path.is_dir():
            stop_processes(record.path)
            target = self._ws.archive_folder(record)
            archive, size = str(target), target.stat().st_size
        meta = {**record.meta, "archive": archive, "status_before_archive": record.status}
        self._ws.set_status(name, "archived", meta=meta, actor=actor, detail={"archive": archive, "size": size},
                            expected=record, lease=lease)
        self._ws.trash(path)
        return {"name": name, "status": "archived", "archive": archive, "size": size}

    def unarchive(self, name: str, *, actor: str = "user") -> dict[str, Any]:
        """Restore an archived workspace's folder, re-link its layers, and mark it ready."""
        with self._ws.lease(name, "exclusive", "unarchive") as lease:
            return self._unarchive_held(name, lease, actor)

    def _unarchive_held(self, name: str, lease: Lease | None, actor: str) -> dict[str, Any]:
        from warden.adapters.archive import BlobLimits, unpack_tree

        try:
            record = self._ws.get(name)
        except NotFound:
            record = self._ws.restore_destroyed(name, actor=actor)  # destroyed, but archived first
        if record.status != "archived":
            raise Conflict(f"workspace {name!r} is {record.status}, not archived")
        archive = record.meta.get("archive")
        path = Path(record.path)
        if not archive or not Path(str(archive)).is_file():
            raise NotFound(f"the archive of {name!r} ({archive}) is gone; `warden destroy {name} --no-archive --yes`"
                           " removes the entry")
        if path.exists():
            raise Conflict(f"folder {path} exists; move it away before unarchiving {name!r}")
        path.parent.mkdir(parents=True, exist_ok=True)
        staging = path.parent / f".unarchive-{name}"
        if staging.exists():
            self._ws.trash(staging)
        staging.mkdir(mode=0o755)
        try:
            unpack_tree(Path(str(archive)), staging, BlobLimits(max_bytes=1 << 50, max_files=1 << 30,
                                                                allow_links_out=True, allow_protected=True))
            staging.rename(path)
        except BaseException:
            self._ws.trash(staging)
            raise
        meta = {k: v for k, v in record.meta.items() if k not in ("archive", "status_before_archive")}
        self._ws.set_status(name, "ready", meta=meta, actor=actor, action="workspace.unarchive",
                            detail={"archive": archive}, expected=record, lease=lease)
        repaired = self.repair_record(self._ws.get(name), lease)
        status = "ready" if repaired["health"]["healthy"] else "broken"
        if status != "ready":
            self._ws.set_status(name, status, actor=actor, action="workspace.unarchive",
                                detail={"failed": repaired["failed"]})
        Path(str(archive)).unlink(missing_ok=True)
        self._ws.touch(name)
        return {"name": name, "status": status, "path": str(path), "repaired": repaired["fixed"],
                "failed": repaired["failed"]}

    # -- cleanup ---------------------------------------------------------------------------
    def cleanup(self, older_than: timedelta, *, dry_run: bool = False, actor: str = "user") -> dict[str, Any]:
        """Archive workspaces idle longer than `older_than` (destroy temporary ones), and expired ones."""
        now = self._app.clock()
        cutoff = now - older_than
        actions: list[dict[str, Any]] = []
        for record in self._ws.list():
            idle = _parse(record.last_accessed) < cutoff
            expired = record.expires_at is not None and _parse(record.expires_at) < now
            if not (idle or expired) or record.status == "creating":
                continue
            reason = "expired" if expired else "idle"
            if record.type == "temporary":
                action = "destroy"
            elif record.status == "archived":
                continue
            elif record.status == "broken" and not Path(record.path).exists():
                action = "destroy"
            else:
                action = "archive"
            actions.append({"name": record.name, "action": action, "reason": reason,
                            "last_accessed": record.last_accessed})
        if not dry_run:
            for item in actions:
                try:
                    if item["action"] == "archive":
                        item["archive"] = self.archive(item["name"], actor=actor)["archive"]
                    else:
                        self._ws.destroy(item["name"], actor=actor, archive=False)
                    item["done"] = True
                except Exception as exc:  # one bad workspace must not stop the sweep
                    item["done"] = False
                    item["error"] = getattr(exc, "message", str(exc))
            self._app.layers.store.sweep()
        # As the user writes a DURATION ("7d"), never timedelta's "7 days, 0:00:00".
        return {"dry_run": dry_run, "older_than": format_duration(older_than),
                "older_than_s": int(older_than.total_seconds()), "actions": actions}

    # -- snapshots (layers) in use -----------------------------------------------------------
    def layers_in_use(self) -> dict[str, list[str]]:
        """layer id → names of the workspaces (any status) that use it."""
        from warden.services.workspaces import layer_ids

        used: dict[str, list[str]] = {}
        for record in self._ws.list():
            for layer_id in layer_ids(record):
                used.setdefault(layer_id, []).append(record.name)
        return used


def _parse(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp)
