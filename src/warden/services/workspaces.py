"""Workspace use cases: create from a template, look up, list, destroy, restore a destroyed one.

Creation order: the registry row is claimed first (`creating`, with this
process's pid and start time), then the folder is set up (services/folders), `.workspace_configured`
last and atomically, and only then the row becomes `ready`. A process killed anywhere in
between leaves a `creating` row whose process is gone; the next command that reads it marks it
`broken` (repairable with `warden health NAME --repair`, removable with `warden destroy`). No
SQLAlchemy and no YAML on this path: layers and template resolution are cached on disk.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Callable, Collection
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from warden.core import stops
from warden.core.durations import format_duration
from warden.core.errors import Conflict, InvalidInput, NotFound, Unavailable, WardenError, classify
from warden.core.leases import ENDING_OPS
from warden.core.ports import Clock, Processes, Registry, Tx
from warden.core.workspaces import WorkspaceRecord, check_name, check_type
from warden.services.folders import (
    CONFIGURED_MARKER,
    METADATA_FILE,
    FolderService,
    env_meta,
    layer_ids,
    not_registered,
)

if TYPE_CHECKING:
    from warden.core.layers import EnvLayers
    from warden.services.archives import ArchiveShelf
    from warden.services.audit import AuditLog
    from warden.services.layers import LayerService, Resolution
    from warden.services.leases import Lease, LeaseService

__all__ = ["CONFIGURED_MARKER", "METADATA_FILE", "Destroyed", "WorkspaceService", "layer_ids"]

Records = list[WorkspaceRecord]


@dataclass(frozen=True)
class Destroyed:
    """What `warden destroy` did."""

    name: str
    archive: str | None

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "destroyed": True, "archive": self.archive}


class WorkspaceService:
    """The registry's workspaces, kept true to their folders on this machine."""

    def __init__(self, registry: Registry, audit: Callable[[], AuditLog], clock: Clock, *, root_dir: Path,
                 folders: Callable[[], FolderService], shelf: ArchiveShelf, processes: Processes, node: str,
                 layers: Callable[[], LayerService] | None = None,
                 leases: Callable[[], LeaseService] | None = None,
                 on_destroyed: Callable[[WorkspaceRecord, str], object] | None = None,
                 live_nodes: Callable[[], Collection[str]] | None = None,
                 stop_live: Callable[[str, str], object] | None = None) -> None:
        self._registry = registry
        # Stops this node's live sandboxes of a workspace (`stop_live(name, reason)`), recording
        # their processes killed: see `lease`.
        self._stop_live = stop_live
        # The nodes with a live instance now (services/instances): another node's workspace is
        # shown `unreachable` while its node is down.
        self._live_nodes = live_nodes
        # Called with the record and actor once a workspace is gone (its checkpoints and versions go too).
        self._on_destroyed = on_destroyed
        self._audit = audit  # built at first use too: a listing that finds nothing to mend writes no event
        self._clock = clock
        self.root_dir = root_dir
        self._folders = folders  # built at first use: listing workspaces needs none of it
        self.shelf = shelf
        self._processes = processes
        self._node = node
        self._layers = layers
        self._leases = leases

    @property
    def folders(self) -> FolderService:
        return self._folders()

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
        if drain is not None and op in ENDING_OPS and self._stop_live is not None:
            # The drain kills every process in the folder, background ones too; their rows stayed
            # "running", holding their bots' exec slots (api.max_execs_per_bot), until a later `ps`
            # or sweep collected them. The live service then records them killed (with why) and
            # stops what is left of their sandboxes, before the operation goes on. After the kill,
            # not before it: the kill's caller counts the processes it stopped (suspend says so).
            stop_live, kill = self._stop_live, drain

            def drain_live() -> None:
                kill()
                stop_live(name, f"the workspace's {op} ended it")

            drain = drain_live
        return self._leases().hold(name, mode, op, drain=drain)

    def _check_lease(self, tx: Tx, lease: Lease | None) -> None:
        if lease is not None and self._leases is not None:
            self._leases().check(tx, lease)

    # -- queries -------------------------------------------------------------------------
    @property
    def node(self) -> str:
        return self._node

    def get(self, name: str, *, anywhere: bool = False) -> WorkspaceRecord:
        """The workspace `name`. Another node's is Unavailable (no node touches another's folder)
        unless `anywhere` (to show it: then `unreachable` while its node is down)."""
        check_name(name)
        with self._registry.transaction(write=False) as tx:
            record = tx.workspaces.get(name)
        if record is None:
            raise NotFound(f"no workspace named {name!r}: `warden list` shows the workspaces")
        if not self.here(record):
            if not anywhere:
                raise Unavailable(f"workspace {name!r} is on node {record.node!r}, not this one ({self._node!r}): "
                                  "run the command there, or send it to any node's API (it forwards)",
                                  rule="node.elsewhere")
            return self._shown([record])[0]
        return self._reconcile([record])[0]

    def here(self, record: WorkspaceRecord) -> bool:
        """Whether `record`'s folder is on this node."""
        return (record.node or record.meta.get("host")) in (None, self._node)

    def list(self, *, status: str | None = None, kind: str | None = None) -> Records:
        """Every workspace of the cluster, by name (another node's `unreachable` while it is down)."""
        with self._registry.transaction(write=False) as tx:
            records = tx.workspaces.list_all()
        records = self._shown(self._reconcile(records))
        return [r for r in records if (status is None or r.status == status) and (kind is None or r.type == kind)]

    def _shown(self, records: Records) -> Records:
        """`records` with another node's workspaces marked `unreachable` while that node is down."""
        if self._live_nodes is None or all(self.here(r) for r in records):
            return records
        live = set(self._live_nodes())
        return [r if self.here(r) or r.node in live else dataclasses.replace(r, status="unreachable")
                for r in records]

    def _reconcile(self, records: Records) -> Records:
        """Mark as `broken` the rows whose state is a lie: `creating` with its creator dead (a
        crash mid-create), `ready`/`suspended` with the folder gone from this machine. A
        `creating` row whose creator is dead and whose folder is not there holds nothing: it goes."""
        out = []
        for record in records:
            why = None
            if record.status == "creating" and self._creator_dead(record):
                if not self.folders.taken(record.path) and self._abandoned(record):
                    continue
                why = "creator process gone"
            elif record.status in ("ready", "suspended") and self.here(record):
                why = self.folders.missing_part(record)
            if why is None:
                out.append(record)
                continue
            with self._registry.transaction() as tx:
                # Audited by the command whose compare-and-set made the change only: another one
                # that read the row before this write found it too, and changed nothing.
                if tx.workspaces.compare_and_set(record.name, record.id, record.status, {"status": "broken"}):
                    self._audit().record(actor="warden", action="workspace.broken", target=record.name,
                                         result=why, detail={"pid": record.meta.get("pid"), "path": record.path},
                                         tx=tx)
                fresh = tx.workspaces.get(record.name)
            if fresh is not None:
                out.append(fresh)
        return out

    def _abandoned(self, record: WorkspaceRecord) -> bool:
        """Remove the row of a create that ended with nothing made (its folder never made, or
        trashed as it failed while the row's removal could not be written: a full disk), audited;
        False if the row changed meanwhile."""
        with self._registry.transaction() as tx:
            # Still that creating row (compare-and-set), then gone, in one transaction.
            if not tx.workspaces.compare_and_set(record.name, record.id, "creating", {"status": "broken"}):
                return False
            tx.workspaces.delete(record.name, record_id=record.id)
            self._audit().record(actor="warden", action="workspace.create", target=record.name, result="abandoned",
                                 detail={"why": "its creator ended before it was made; nothing of it is left",
                                         "pid": record.meta.get("pid"), "path": record.path}, tx=tx)
        return True

    def _creator_dead(self, record: WorkspaceRecord) -> bool:
        meta = record.meta
        if not self.here(record):
            return False  # another machine's create: only it can tell
        pid = meta.get("pid")
        if not isinstance(pid, int):
            return True
        started = meta.get("pid_start")
        return not self._processes.alive(pid, started if isinstance(started, int) else None)

    # -- create ----------------------------------------------------------------------------
    def create(self, name: str, *, kind: str = "user", ttl: timedelta | None = None,
               actor: str = "user", template: str | None = None, python: str | None = None,
               node: str | None = None, blob: bytes | None = None, progress: bool = False,
               most: int | None = None) -> WorkspaceRecord:
        """Make a ready workspace from a template (building its layers first if needed). `most`:
        how many workspaces `actor` may have made (a bot's api.max_workspaces_per_bot), checked
        in the transaction that claims the name."""
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
            others = sorted(owner for owner in self.shelf.owners(name) if owner != actor)
            if others:
                raise Conflict(f"the name {name!r} belongs to an archived workspace of {others[0]}; "
                               "pick another name")
        resolution = self.layers.resolve(template, python=python, node=node)
        # Held from before they are found until the row names them: a prune in between took a
        # layer no row named yet, and the create said "created" of a broken workspace.
        with self.layers.store.hold(resolution.layer_ids):
            return self._create_on(name, resolution, kind=kind, ttl=ttl, actor=actor, blob=blob,
                                   progress=progress, most=most)

    def _create_on(self, name: str, resolution: Resolution, *, kind: str, ttl: timedelta | None, actor: str,
                   blob: bytes | None, progress: bool, most: int | None) -> WorkspaceRecord:
        layers = self.layers.ensure(resolution, progress=progress)
        now = self._clock()
        path = str(self.root_dir / name)
        meta = env_meta(resolution, layers, path)
        if ttl:
            meta["ttl"] = format_duration(ttl)
        pid = os.getpid()
        record = WorkspaceRecord(
            id="ws_" + os.urandom(8).hex(), name=name, path=path, type=kind,
            status="creating", created_at=now.isoformat(), last_accessed=now.isoformat(),
            template=resolution.template.name, layer_id=next(iter(resolution.layer_ids), None),
            expires_at=(now + ttl).isoformat() if ttl else None, created_by=actor, node=self._node,
            meta={**meta, "pid": pid, "pid_start": self._processes.start_time(pid), "host": self._node,
                  # What a finished workspace must contain that repair cannot rebuild: a blob's
                  # files. "pending" until the unpack completed, so repair can tell half-done.
                  **({"blob": "pending"} if blob is not None else {})})
        with self.lease(name, "exclusive", "create") as lease:
            return self._create_claimed(record, lease, blob, resolution, layers, meta, now, actor, kind, most)

    def adopt(self, folder: str, *, actor: str = "user", user_home: str | None = None,
              warden_home: str) -> WorkspaceRecord:
        """Register an existing folder as a `user` workspace in place (no copy, no env layer): the
        same policy, sandbox and protections apply, and Warden never moves or deletes its content
        (`destroy` forgets it unless told to delete; `archive` and the janitor leave it alone)."""
        import re

        from warden.core.workspaces import adoption_refusal

        path = os.path.realpath(folder)
        if not os.path.isdir(path):
            raise NotFound(f"no folder {folder}")
        records = self.list()
        others = [os.path.realpath(r.path) for r in records]
        why = adoption_refusal(path, warden_home=os.path.realpath(warden_home),
                               workspaces_root=os.path.realpath(self.root_dir), others=others,
                               user_home=os.path.realpath(user_home) if user_home else None)
        if why:
            raise InvalidInput(f"cannot adopt {folder}: {why}")
        base = re.sub(r"[^A-Za-z0-9._-]", "-", os.path.basename(path)).strip(".-_")[:50] or "folder"
        if not base[0].isalnum():
            base = "ws-" + base
        taken = {r.name for r in records}
        name = next(n for n in (base if i == 1 else f"{base}-{i}" for i in range(1, 1000)) if n not in taken)
        check_name(name)
        now = self._clock()
        record = WorkspaceRecord(id="ws_" + os.urandom(8).hex(), name=name, path=path, type="user", status="ready",
                                 created_at=now.isoformat(), last_accessed=now.isoformat(), created_by=actor,
                                 meta={"adopted": True, "host": self._node}, node=self._node)
        with self.lease(name, "exclusive", "adopt"), self._registry.transaction() as tx:
            if tx.workspaces.get(name) is not None:
                raise Conflict(f"workspace {name!r} was made meanwhile; try again")
            tx.workspaces.insert(record)
            self._audit().record(actor=actor, action="workspace.adopt", target=name, detail={"path": path}, tx=tx)
        return record

    def _check_free(self, name: str) -> None:
        """Refuse a taken name before the slow part of create (a layer build takes seconds).
        Only a courtesy: the row insert under the name's lease stays the real claim."""
        with self._registry.transaction(write=False) as tx:
            taken = tx.workspaces.get(name)
        if taken is not None and taken.status in ("broken", "creating"):
            # Most often what a killed create left: "already exists" named a workspace the person
            # was never told was created, and `warden list` alone said why it was in the way.
            if taken.status == "creating":
                raise Conflict(f"workspace {name!r} is being created by another command now; wait for it, or "
                               "pick another name", rule="workspace.exists")
            raise Conflict(f"workspace {name!r} exists but is broken (`warden health {name}` says why: a create "
                           f"that did not finish, say); `warden destroy {name}` removes it, or `warden health "
                           f"{name} --repair` mends it", rule="workspace.exists")
        if taken is not None:
            raise Conflict(f"workspace {name!r} already exists; pick another name or `warden destroy` it first",
                           rule="workspace.exists")
        if self.folders.taken(str(self.root_dir / name)):
            raise not_registered(str(self.root_dir / name))

    def _create_claimed(self, record: WorkspaceRecord, lease: Lease | None, blob: bytes | None,
                        resolution: Resolution, layers: EnvLayers, meta: dict[str, Any],
                        now: datetime, actor: str, kind: str, most: int | None) -> WorkspaceRecord:
        name, path = record.name, record.path
        # The row is the claim: two creators of one name race on the UNIQUE constraint (and on
        # the name's lease, which destroy, archive and repair need too while this runs); two of
        # one bot's creates at once, on its count taken in the same transaction.
        with self._registry.transaction() as tx:
            if most is not None:
                owned = tx.workspaces.count_created_by(actor)
                if owned >= most:
                    raise Conflict(f"this bot already has {owned} workspaces, the most it may "
                                   "(api.max_workspaces_per_bot); delete one first")
            tx.workspaces.insert(record)
        made = False
        try:
            self.folders.make(path)
            made = True
            unpacked = self.folders.unpack(blob, path) if blob is not None else None
            self.folders.write_metadata(record)
            self.folders.populate(path, resolution, layers)
            self.folders.mark_configured(path, now.isoformat())
        except BaseException as exc:
            self._unmake(record, made, exc, actor)
            raise
        final = {**meta}
        if unpacked:
            final["blob"] = unpacked
        try:
            with self._registry.transaction() as tx:
                self._check_lease(tx, lease)
                if not tx.workspaces.compare_and_set(name, record.id, "creating", {"status": "ready", "meta": final}):
                    raise Conflict(f"workspace {name!r} changed while it was being created; `warden info "
                                   f"{name}` shows what it is now")
                self._audit().record(actor=actor, action="workspace.create", target=name,
                                     detail={"type": kind, "template": record.template, "layers": meta["layers"],
                                             "blob": unpacked}, tx=tx)
        except Unavailable as exc:
            # Its folder whole, its row "creating": the write that says it is ready failed (no
            # room for it, the registry unreachable), and nothing of it was written. Undone as
            # any failed create, rather than left for the next command to find broken.
            self._unmake(record, True, exc, actor)
            raise
        return WorkspaceRecord(**{**record.__dict__, "status": "ready", "meta": final})

    def _unmake(self, record: WorkspaceRecord, made: bool, exc: BaseException, actor: str) -> None:
        """Undo a create that failed with `exc`: its folder, then its row, with the audit's outcome.
        The folder first, while the row still claims the name (a later creator's folder is never
        trashed here), and deleted at once: a create most often fails on a full disk, where the
        row's removal needs the room the half folder took. Before, that removal failed there
        and the half folder stayed. If the row still cannot go, it stays "creating" with no
        folder, and the next command finds its creator gone and removes it (`_abandoned`)."""
        if made:
            with contextlib.suppress(OSError):
                self.folders.trash(record.path, now=True)
        cause = classify(exc) if isinstance(exc, Exception) else None
        # What failed first is the one to say (no room, the registry locked, a stop): a failure
        # here follows from it.
        with contextlib.suppress(WardenError), self._registry.transaction() as tx:
            tx.workspaces.delete(record.name, record_id=record.id)  # ours only, never a later creator's row
            self._audit().record(actor=actor, action="workspace.create", target=record.name,
                                 result=cause.code if cause is not None else "internal", tx=tx)

    # -- destroy ---------------------------------------------------------------------------
    def destroy(self, name: str, *, actor: str = "user", archive: bool = True, delete: bool = False,
                progress: bool = False) -> Destroyed:
        """Archive (unless told not to), drop the row, and move the folder to the trash at once;
        an adopted folder is only forgotten (its files stay) unless `delete`."""
        first = self.get(name)
        with self.lease(name, "exclusive", "destroy",
                        drain=lambda: self._processes.stop_processes(first.path)) as lease:
            return self._destroy_held(name, lease, actor=actor, archive=archive, delete=delete, progress=progress)

    def _destroy_held(self, name: str, lease: Lease | None, *, actor: str, archive: bool,
                      delete: bool = False, progress: bool = False) -> Destroyed:
        record = self.get(name)  # again, under the lease: what is destroyed is what is there now
        archived = record.meta.get("archive")
        adopted = bool(record.meta.get("adopted"))
        packed: str | None = None  # an archive this destroy made
        try:
            if adopted:
                # An adopted folder is the person's: forgotten, never packed or moved (unless `delete`).
                self._processes.stop_processes(record.path)
                archive = False
            elif self.folders.present(record.path):
                self._processes.stop_processes(record.path)
                if archive:
                    archived = packed = self.shelf.pack(record, progress=progress).path
                    # The registry row goes; a copy beside the archive lets `warden unarchive NAME`
                    # bring the workspace back.
                    self.shelf.keep_record(archived, record)
            elif archive and isinstance(archived, str) and self.shelf.exists(archived):
                # Already archived: its archive stays, and so must the way back to it.
                self.shelf.keep_record(archived, record)
            kept = str(archived) if archive and archived is not None else None
            with self._registry.transaction() as tx:
                self._check_lease(tx, lease)
                # Grants die with their workspace, in the same transaction (a later workspace of
                # the same name is a different workspace).
                live = [g.accessor for g in tx.grants.of_workspace(name, live_only=True)]
                revoked = tx.grants.revoke(live, self._clock())
                tx.workspaces.delete(name, record_id=record.id)
                # Its id, and whether its folder goes: a destroy killed (-9) before the folder moved
                # is finished by the next sweep from this very event (services/sweeper.py).
                self._audit().record(actor=actor, action="workspace.destroy", target=name,
                                   detail={"archive": kept, "grants_revoked": revoked, "id": record.id,
                                           "folder_trashed": not adopted or delete}, tx=tx)
            # Inside the try: a stop from here on comes once the row's removal is committed.
            if not adopted or delete:
                self.folders.trash(record.path)
        except BaseException:
            if self._row_gone(record):
                # The row's removal was committed (a stop as it returned, or before the folder
                # moved): the folder goes with it. Left, it was no workspace's, and a create of
                # the name was refused until a person moved it away. Under the lease still: no
                # later workspace of the name has a folder there.
                if not adopted or delete:
                    with stops.Whole(), contextlib.suppress(OSError):
                        self.folders.trash(record.path)
            elif archive and isinstance(archived, str):
                self._undo_shelving(record, archived, packed=archived == packed)
            raise
        if self._on_destroyed is not None:
            self._on_destroyed(record, actor)
        return Destroyed(name, kept)

    def _row_gone(self, record: WorkspaceRecord) -> bool:
        """Whether `record`'s row is no longer in the registry (False when the registry cannot say)."""
        try:
            with self._registry.transaction(write=False) as tx:
                return tx.workspaces.get(record.name) is None
        except WardenError:
            return False

    def _undo_shelving(self, record: WorkspaceRecord, archive: str, *, packed: bool) -> None:
        """A destroy whose row removal failed (a full disk, the lease lost) takes back the copy of
        the row it kept beside `archive`, and the archive when it packed it: the workspace is
        still there, and `warden unarchive` listed a destroyed copy that never was (the archive's
        space lost with it). Only while the row is still that workspace."""
        try:
            if self.get(record.name).id != record.id:
                return
        except WardenError:
            return  # gone after all (or the registry cannot say): the way back stays
        with contextlib.suppress(OSError):
            self.shelf.take_back(archive, packed=packed)

    def restore_destroyed(self, name: str, *, actor: str = "user") -> WorkspaceRecord:
        """Re-register the newest archived copy of destroyed workspace `name` (status archived)."""
        check_name(name)
        found = self.shelf.destroyed(name)
        if not found:
            raise NotFound(f"no workspace named {name!r} and no archive of one: `warden list` shows the workspaces")
        sidecar = found[-1]
        archive, kept = self.shelf.read_record(sidecar)
        record = dataclasses.replace(kept, status="archived", node=self._node,  # its archive is on this node
                                     meta={**kept.meta, "archive": archive, "status_before_archive": "ready"})
        with self._registry.transaction() as tx:
            tx.workspaces.insert(record)
            self._audit().record(actor=actor, action="workspace.restore", target=name,
                               detail={"archive": archive}, tx=tx)
        self.shelf.forget(sidecar)
        return record

    def trash(self, path: Path | str) -> None:
        """Rename the folder into the trash (instant) and delete it in the background."""
        self.folders.trash(str(path))

    # -- status ----------------------------------------------------------------------------
    def touch(self, name: str) -> None:
        with self._registry.transaction() as tx:
            tx.workspaces.update(name, {"last_accessed": self._clock().isoformat()})

    def set_status(self, name: str, status: str, *, meta: dict[str, Any] | None = None,
                   actor: str = "user", action: str | None = None, detail: dict[str, Any] | None = None,
                   expected: WorkspaceRecord | None = None, lease: Lease | None = None) -> None:
        """Change a row's status (and meta) with its audit event, in one transaction; with
        `expected`, only if the row is still that workspace in that status (compare-and-set)."""
        changes: dict[str, object] = {"status": status}
        if meta is not None:
            changes["meta"] = meta
        with self._registry.transaction() as tx:
            self._check_lease(tx, lease)
            if expected is None:
                tx.workspaces.update(name, changes)
            elif not tx.workspaces.compare_and_set(name, expected.id, expected.status, changes):
                raise Conflict(f"workspace {name!r} changed meanwhile (it was {expected.status}); "
                               f"`warden info {name}` shows what it is now")
            self._audit().record(actor=actor, action=action or f"workspace.{status}", target=name,
                               detail=detail or {}, tx=tx)
