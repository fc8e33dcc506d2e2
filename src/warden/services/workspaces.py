"""Workspace use cases: create from a template, look up, list, destroy.

Creation order (seed 001): the registry row is claimed first (`creating`, with this
process's pid and start time), then the folder, metadata, thin venv, node_modules and
project files are written, `.workspace_configured` last and atomically, and only then the
row becomes `ready`. A process killed anywhere in between leaves a `creating` row whose
process is gone; the next command that reads it marks it `broken` (repairable with
`warden health NAME --repair`, removable with `warden destroy`). No SQLAlchemy and no YAML
on this path: layers and template resolution are cached on disk.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import subprocess
import threading
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from warden.adapters.atomic import write_atomic
from warden.adapters.processes import alive, start_time
from warden.adapters.store import workspaces as rows
from warden.adapters.store.db import Database, Tx
from warden.core.errors import Conflict, InvalidInput, NotFound
from warden.core.workspaces import WorkspaceRecord, check_name, check_type
from warden.services.audit import AuditLog

if TYPE_CHECKING:
    from warden.core.settings import Settings
    from warden.services.layers import LayerService, Resolution
    from warden.services.leases import Lease, LeaseService
    from warden.services.quota import QuotaService

RECORD_SUFFIX = ".record.json"

__all__ = ["CONFIGURED_MARKER", "METADATA_FILE", "WorkspaceService", "remove_in_background"]

METADATA_FILE = ".workspace.json"
CONFIGURED_MARKER = ".workspace_configured"
TRASH = ".trash"
_HOST = os.uname().nodename  # what socket.gethostname() returns, without importing socket
_GITIGNORE = ".venv/\nnode_modules/\n__pycache__/\n"
Records = list[WorkspaceRecord]


def layer_ids(record: WorkspaceRecord) -> list[str]:
    """The env layers a workspace uses (from its registry row)."""
    value = record.meta.get("layers")
    return [str(v) for v in value] if isinstance(value, list | tuple) else []


def remove_in_background(path: Path) -> None:
    """Delete `path` (already renamed out of the way) without waiting for it."""
    try:
        proc = subprocess.Popen(["rm", "-rf", "--", str(path)], stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    except OSError:
        import shutil

        shutil.rmtree(path, ignore_errors=True)
        return
    # Reap it in a long-lived process (the API server); a CLI just exits and init reaps it.
    threading.Thread(target=proc.wait, daemon=True).start()


def _missing_part(record: WorkspaceRecord) -> str | None:
    """What a ready workspace lacks that it cannot run without (a few stat calls), or None."""
    if not os.path.isdir(record.path):
        return "workspace folder missing"
    if record.meta.get("python_venv") and not os.path.isdir(os.path.join(record.path, ".venv")):
        return "Python venv missing"
    ro_paths = record.meta.get("ro_paths")
    for layer in ro_paths if isinstance(ro_paths, list) else ():
        if isinstance(layer, str) and not os.path.isdir(layer):
            return f"env layer or interpreter {layer} missing"
    return None


class WorkspaceService:
    def __init__(self, db: Database, audit: AuditLog, root_dir: Path, clock: Callable[[], datetime],
                 *, layers: Callable[[], LayerService] | None = None, settings: Settings | None = None,
                 archives: Path | None = None, quota: Callable[[], QuotaService] | None = None,
                 leases: Callable[[], LeaseService] | None = None) -> None:
        self._db = db
        self._leases = leases
        self._quota = quota
        self.archives_dir = archives or root_dir.parent / "archives"
        self._audit = audit
        self.root_dir = root_dir
        self._clock = clock
        self._layers = layers
        self._settings = settings

    @property
    def layers(self) -> LayerService:
        if self._layers is None:
            raise RuntimeError("WorkspaceService was built without layers")
        return self._layers()

    def lease(self, name: str, mode: str, op: str, *, drain: Callable[[], object] | None = None,
              ) -> contextlib.AbstractContextManager[Lease | None]:
        """Hold workspace `name`'s lease (services/leases) for `op`; a no-op without a lease service."""
        if self._leases is None:
            return contextlib.nullcontext()
        return self._leases().hold(name, mode, op, drain=drain)

    def _check_lease(self, tx: Tx, lease: Lease | None) -> None:
        if lease is not None and self._leases is not None:
            self._leases().check(tx, lease)

    # -- queries -------------------------------------------------------------------------
    def get(self, name: str) -> WorkspaceRecord:
        check_name(name)
        with self._db.transaction(write=False) as tx:
            record = rows.get(tx, name)
        if record is None:
            raise NotFound(f"no workspace named {name!r}: `warden list` shows the workspaces")
        return self._reconcile([record])[0]

    def list(self, *, status: str | None = None, kind: str | None = None) -> Records:
        with self._db.transaction(write=False) as tx:
            records = rows.list_all(tx)
        records = self._reconcile(records)
        return [r for r in records if (status is None or r.status == status) and (kind is None or r.type == kind)]

    def _reconcile(self, records: Records) -> Records:
        """Mark as `broken` the rows whose state is a lie: `creating` with its creator dead (a
        crash mid-create), `ready`/`suspended` with the folder gone from this machine."""
        out = []
        for record in records:
            why = None
            if record.status == "creating" and self._creator_dead(record):
                why = "creator process gone"
            elif record.status in ("ready", "suspended") and record.meta.get("host") in (None, _HOST):
                why = _missing_part(record)
            if why is None:
                out.append(record)
                continue
            with self._db.transaction() as tx:
                tx.execute("UPDATE workspaces SET status = 'broken' WHERE name = :name AND status = :status",
                           {"name": record.name, "status": record.status})
                self._audit.record(actor="warden", action="workspace.broken", target=record.name, result=why,
                                   detail={"pid": record.meta.get("pid"), "path": record.path}, tx=tx)
                fresh = rows.get(tx, record.name)
            if fresh is not None:
                out.append(fresh)
        return out

    @staticmethod
    def _creator_dead(record: WorkspaceRecord) -> bool:
        meta = record.meta
        if meta.get("host") not in (None, _HOST):
            return False  # another machine's create: only it can tell
        pid = meta.get("pid")
        if not isinstance(pid, int):
            return True
        started = meta.get("pid_start")
        return not alive(pid, started if isinstance(started, int) else None)

    # -- create ----------------------------------------------------------------------------
    def create(self, name: str, *, kind: str = "user", ttl: timedelta | None = None,
               actor: str = "user", template: str | None = None, python: str | None = None,
               node: str | None = None, blob: bytes | None = None, progress: bool = False) -> WorkspaceRecord:
        """Make a ready workspace from a template (building its layers first if needed)."""
        check_name(name)
        check_type(kind)
        self._check_free(name)
        if ttl is not None and ttl <= timedelta(0):
            # Refused, not read as "never expires": that is what leaving the ttl out means.
            raise InvalidInput("ttl must be longer than zero (e.g. 30m, 7d); leave it out for a "
                               "workspace that never expires")
        if actor != "user":
            # A destroyed workspace's archive keeps its name for its owner: a bot that took the
            # name could destroy its own copy and have `warden unarchive NAME` restore that instead.
            others = sorted(owner for owner in self._archived_owners(name) if owner != actor)
            if others:
                raise Conflict(f"the name {name!r} belongs to an archived workspace of {others[0]}; "
                               "pick another name")
        resolution = self.layers.resolve(template, python=python, node=node)
        infos = self.layers.ensure(resolution, progress=progress)
        now = self._clock()
        path = self.root_dir / name
        meta = self.env_meta(resolution, infos, path)
        if ttl:
            from warden.core.durations import format_duration

            meta["ttl"] = format_duration(ttl)
        record = WorkspaceRecord(
            id="ws_" + os.urandom(8).hex(), name=name, path=str(path), type=kind,
            status="creating", created_at=now.isoformat(), last_accessed=now.isoformat(),
            template=resolution.template.name, layer_id=next(iter(resolution.layer_ids), None),
            expires_at=(now + ttl).isoformat() if ttl else None, created_by=actor,
            meta={**meta, "pid": os.getpid(), "pid_start": start_time(os.getpid()), "host": _HOST,
                  # What a finished workspace must contain that repair cannot rebuild: a blob's
                  # files. "pending" until the unpack completed, so repair can tell half-done.
                  **({"blob": "pending"} if blob is not None else {})})
        with self.lease(name, "exclusive", "create") as lease:
            return self._create_claimed(record, lease, path, blob, resolution, infos, meta, now, actor, kind)

    def _check_free(self, name: str) -> None:
        """Refuse a taken name before the slow part of create (a layer build takes seconds).
        Only a courtesy: the row insert under the name's lease stays the real claim."""
        with self._db.transaction(write=False) as tx:
            taken = rows.get(tx, name) is not None
        if taken:
            raise Conflict(f"workspace {name!r} already exists; pick another name or `warden destroy` it first")
        if os.path.lexists(self.root_dir / name):
            raise Conflict(f"folder {self.root_dir / name} already exists but is not a registered "
                           "workspace; move it away or pick another name")

    def _create_claimed(self, record: WorkspaceRecord, lease: Lease | None, path: Path, blob: bytes | None,
                        resolution: Resolution, infos: dict[str, dict[str, Any]], meta: dict[str, Any],
                        now: datetime, actor: str, kind: str) -> WorkspaceRecord:
        name = record.name
        # The row is the claim: two creators of one name race on the UNIQUE constraint (and on
        # the name's lease, which destroy, archive and repair need too while this runs).
        with self._db.transaction() as tx:
            rows.insert(tx, record)
        made = False
        try:
            self.root_dir.mkdir(parents=True, exist_ok=True)
            try:
                path.mkdir(mode=0o755)
            except FileExistsError:
                raise Conflict(f"folder {path} already exists but is not a registered "
                               "workspace; move it away or pick another name") from None
            made = True
            unpacked = self._unpack(blob, path) if blob is not None else None
            self._write_metadata(record)
            self.populate(path, resolution, infos)
            write_atomic(path / CONFIGURED_MARKER, now.isoformat().encode())
        except BaseException as exc:
            with self._db.transaction() as tx:
                rows.delete(tx, name, record_id=record.id)  # ours only, never a later creator's row
                self._audit.record(actor=actor, action="workspace.create", target=name,
                                   result=getattr(exc, "code", "internal"), tx=tx)
            if made:
                self.trash(path)
            raise
        final = {**meta}
        if unpacked:
            final["blob"] = unpacked
        with self._db.transaction() as tx:
            self._check_lease(tx, lease)
            if not rows.compare_and_set(tx, name, record.id, "creating", {"status": "ready", "meta": final}):
                raise Conflict(f"workspace {name!r} changed while it was being created; `warden info "
                               f"{name}` shows what it is now")
            self._audit.record(actor=actor, action="workspace.create", target=name,
                               detail={"type": kind, "template": record.template, "layers": meta["layers"],
                                       "blob": unpacked}, tx=tx)
        return WorkspaceRecord(**{**record.__dict__, "status": "ready", "meta": final})

    @staticmethod
    def env_meta(resolution: Resolution, infos: dict[str, dict[str, Any]], path: Path) -> dict[str, Any]:
        """What the registry keeps about a workspace's environment (also what runs mount read-only)."""
        ro_paths: list[str] = []
        meta: dict[str, Any] = {"layers": resolution.layer_ids, "python_venv": None,
                                "template_source": resolution.template.source}
        if resolution.python:
            interp = resolution.python["interpreter"]
            meta["python_venv"] = str(path / ".venv")
            meta["python"] = interp["version"]
            ro_paths.append(interp["prefix"])
        if "python" in infos:
            ro_paths.append(str(Path(infos["python"]["site_packages"]).parents[3]))
        if resolution.node:
            meta["node"] = resolution.node["runtime"]["version"]
        if "node" in infos:
            ro_paths.append(str(Path(infos["node"]["node_modules"]).parent))
        meta["ro_paths"] = ro_paths
        return meta

    def populate(self, path: Path, resolution: Resolution, infos: dict[str, dict[str, Any]]) -> Sequence[str]:
        """Write the env and project files of a template into `path`; returns what was written.

        Files a blob brought (pyproject.toml, package.json, .gitignore) are kept.
        """
        from warden.adapters.envs.fdtree import open_tree
        from warden.adapters.envs.node_layer import link_node_modules
        from warden.adapters.envs.thin_venv import write_thin_venv

        done = []
        if resolution.python:
            interp = resolution.python["interpreter"]
            py = infos.get("python", {})
            write_thin_venv(path, interpreter=interp["executable"], version=interp["version"],
                            layer_site=py.get("site_packages"), scripts=py.get("scripts"))
            done.append(".venv")
        if "node" in infos:
            link_node_modules(path, infos["node"])
            done.append("node_modules")
        with open_tree(path) as tree:
            pyproject = resolution.pyproject()
            if pyproject is not None:
                tree.write("pyproject.toml", pyproject, exclusive=True)
            package = resolution.package_json()
            if package is not None:
                tree.write("package.json", package, exclusive=True)
                lock = infos.get("node", {}).get("node_modules")
                if lock and os.path.exists(Path(lock).parent / "package-lock.json"):
                    tree.write("package-lock.json", (Path(lock).parent / "package-lock.json").read_bytes(),
                               exclusive=True)
            tree.write(".gitignore", _GITIGNORE, exclusive=True)
        return done

    def _unpack(self, blob: bytes, path: Path) -> dict[str, int]:
        from warden.adapters.archive import BlobLimits, unpack_blob

        limits = BlobLimits()
        if self._settings is not None:
            limits = BlobLimits(self._settings.get_size("workspace.blob_max_size"),
                                self._settings.get_int("workspace.blob_max_files"))
        if self._quota is not None:
            # The disk quota counts what the blob takes on disk (whole blocks per file and folder).
            quota = self._quota()
            quota.check_free()
            room, used = quota.limits(), quota.usage(str(path))
            limits = dataclasses.replace(limits, disk_bytes=room.max_bytes - used.bytes,
                                         disk_files=room.max_files - used.files)
        counts = unpack_blob(blob, path, limits)
        from warden.adapters.gitguard import GitGuard

        # `.git` entries were refused; a folder the blob shaped like a repository (HEAD and refs)
        # loses its HEAD before anyone's git can take it for one.
        moved = GitGuard(str(path)).defuse().quarantined
        if moved:
            counts = {**counts, "git_quarantined": len(moved)}
        return counts

    # -- destroy ---------------------------------------------------------------------------
    def destroy(self, name: str, *, actor: str = "user", archive: bool = True) -> dict[str, Any]:
        """Archive (unless told not to), drop the row, and move the folder to the trash at once."""
        from warden.adapters.processes import stop_processes

        first = self.get(name)
        with self.lease(name, "exclusive", "destroy", drain=lambda: stop_processes(first.path)) as lease:
            return self._destroy_held(name, lease, actor=actor, archive=archive)

    def _destroy_held(self, name: str, lease: Lease | None, *, actor: str, archive: bool) -> dict[str, Any]:
        from warden.adapters.processes import stop_processes

        record = self.get(name)  # again, under the lease: what is destroyed is what is there now
        path = Path(record.path)
        archived = record.meta.get("archive")
        if path.is_dir():
            stop_processes(str(path))
            if archive:
                archived = str(self.archive_folder(record))
                # The registry row goes; a copy beside the archive lets `warden unarchive NAME`
                # bring the workspace back (archives/ is Warden's own, never a bot's).
                write_atomic(Path(archived + RECORD_SUFFIX),
                             json.dumps(dataclasses.asdict(record), default=str).encode(), mode=0o600)
        elif archive and isinstance(archived, str) and Path(archived).is_file():
            # Already archived: its archive stays, and so must the way back to it.
            write_atomic(Path(archived + RECORD_SUFFIX),
                         json.dumps(dataclasses.asdict(record), default=str).encode(), mode=0o600)
        from warden.adapters.store import grants as grant_rows

        with self._db.transaction() as tx:
            self._check_lease(tx, lease)
            # Grants die with their workspace, in the same transaction (a later workspace of the
            # same name is a different workspace).
            live = [g.accessor for g in grant_rows.grants_of_workspace(tx, name, live_only=True)]
            revoked = grant_rows.revoke_grants(tx, live, self._clock())
            rows.delete(tx, name, record_id=record.id)
            self._audit.record(actor=actor, action="workspace.destroy", target=name,
                               detail={"archive": archived if archive else None, "grants_revoked": revoked},
                               tx=tx)
        self.trash(path)
        return {"name": name, "destroyed": True, "archive": archived if archive else None}

    def _destroyed_archives(self, name: str) -> tuple[Path, ...]:
        """The record files of `name`'s destroyed-and-archived copies, oldest first."""
        pattern = re.compile(re.escape(name) + r"-\d{8}T\d{6}-[0-9a-f]{4}\.tar\.zst" + re.escape(RECORD_SUFFIX))
        return tuple(sorted(p for p in self.archives_dir.glob(f"{name}-*{RECORD_SUFFIX}")
                            if pattern.fullmatch(p.name)))

    def _archived_owners(self, name: str) -> set[str]:
        owners = set()
        for sidecar in self._destroyed_archives(name):
            try:
                owners.add(str(json.loads(sidecar.read_text()).get("created_by") or "user"))
            except (OSError, ValueError, AttributeError):
                owners.add("user")  # unreadable: assume the person's, the safe side
        return owners

    def restore_destroyed(self, name: str, *, actor: str = "user") -> WorkspaceRecord:
        """Re-register the newest archived copy of destroyed workspace `name` (status archived)."""
        check_name(name)
        found = self._destroyed_archives(name)
        if not found:
            raise NotFound(f"no workspace named {name!r} and no archive of one: `warden list` shows the workspaces")
        sidecar = found[-1]
        archive = str(sidecar)[: -len(RECORD_SUFFIX)]
        data = json.loads(sidecar.read_text())
        meta = {**data.get("meta", {}), "archive": archive, "status_before_archive": "ready"}
        record = WorkspaceRecord(**{**data, "status": "archived", "meta": meta})
        with self._db.transaction() as tx:
            rows.insert(tx, record)
            self._audit.record(actor=actor, action="workspace.restore", target=name,
                               detail={"archive": archive}, tx=tx)
        sidecar.unlink()
        return record

    def archive_folder(self, record: WorkspaceRecord) -> Path:
        """Pack the workspace folder (not its layers) to `archives/NAME-TIME.tar.zst`."""
        from warden.adapters.archive import pack_tree

        stamp = self._clock().strftime("%Y%m%dT%H%M%S")
        # A home that never archived before (or another node's, on a shared registry) has none yet.
        self.archives_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        target = self.archives_dir / f"{record.name}-{stamp}-{os.urandom(2).hex()}.tar.zst"
        limit = self._settings.get_size("workspace.archive_max_size") if self._settings is not None else None
        pack_tree(Path(record.path), target, max_bytes=limit)
        return target

    def trash(self, path: Path) -> None:
        """Rename the folder into the trash (instant) and delete it in the background."""
        if not path.exists() and not path.is_symlink():
            return
        # Beside the folder, not under this node's root: a rename never crosses filesystems, and
        # a workspace made under another root (another node's, a changed sandbox.root_dir) works.
        trash = path.parent / TRASH
        trash.mkdir(mode=0o700, exist_ok=True)
        target = trash / f"{path.name}-{os.urandom(4).hex()}"
        os.rename(path, target)
        remove_in_background(target)

    def touch(self, name: str) -> None:
        with self._db.transaction() as tx:
            rows.update(tx, name, {"last_accessed": self._clock().isoformat()})

    def set_status(self, name: str, status: str, *, meta: dict[str, Any] | None = None,
                   actor: str = "user", action: str | None = None, detail: dict[str, Any] | None = None,
                   expected: WorkspaceRecord | None = None, lease: Lease | None = None) -> None:
        """Change a row's status (and meta) with its audit event, in one transaction; with
        `expected`, only if the row is still that workspace in that status (compare-and-set)."""
        changes: dict[str, object] = {"status": status}
        if meta is not None:
            changes["meta"] = meta
        with self._db.transaction() as tx:
            self._check_lease(tx, lease)
            if expected is None:
                rows.update(tx, name, changes)
            elif not rows.compare_and_set(tx, name, expected.id, expected.status, changes):
                raise Conflict(f"workspace {name!r} changed meanwhile (it was {expected.status}); "
                               f"`warden info {name}` shows what it is now")
            self._audit.record(actor=actor, action=action or f"workspace.{status}", target=name,
                               detail=detail or {}, tx=tx)

    def _write_metadata(self, record: WorkspaceRecord) -> None:
        """Seed 000's `.workspace.json` (no access key in it: tokens live hashed in the registry)."""
        write_atomic(Path(record.path) / METADATA_FILE, metadata_json(record))


def metadata_json(record: WorkspaceRecord) -> bytes:
    """The bytes of `.workspace.json` for `record`."""
    meta = record.meta
    metadata = {
        "id": record.id, "name": record.name, "path": record.path,
        "created": record.created_at, "isolated": True, "type": record.type,
        "template": record.template, "layer_id": record.layer_id, "layers": meta.get("layers", []),
        "expires": record.expires_at, "ttl": meta.get("ttl"), "python_venv": meta.get("python_venv"),
        "python": meta.get("python"), "node": meta.get("node"),
    }
    return (json.dumps(metadata, indent=2) + "\n").encode("utf-8")
