"""Checkpoints of whole workspaces, rollbacks, and the versions Warden's file API keeps.

`warden checkpoint NAME` saves the workspace's content (core/checkpoints.py says what that is)
into the store (adapters/versions.py); `warden rollback NAME ID [--path P]` brings it back,
first saving the workspace as it is now (so a rollback can itself be rolled back: STYLE's
"destructive operations back up first"). Overwrites and deletes through the file API keep the
previous content as a version of that path (`warden fs NAME versions PATH`, `… restore PATH`).

Leases: a checkpoint only reads, so it holds the workspace's shared lease (runs and writes may
go on; it records what it read); a rollback holds the exclusive one (no run or write changes the
tree under it; a running command makes it wait, then refuse with `locked`). The store's own
lock (flock) orders checkpoints, rollbacks and version writes of one workspace among themselves.
Everything a checkpoint or rollback does is audited.
"""

from __future__ import annotations

import builtins
import contextlib
import os
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime
from typing import TYPE_CHECKING

from warden.core import stops
from warden.core.checkpoints import Entry, Manifest, Version, check_id, normalize_scope, plan_rollback, retain
from warden.core.errors import Conflict, InvalidInput, NotFound, Terminated, TooLarge, Unavailable, WardenError
from warden.core.paths import canonical
from warden.core.ports import VersionStore
from warden.core.quota import FREE_KEY
from warden.core.settings import Settings
from warden.core.workspaces import WorkspaceRecord
from warden.services.audit import AuditLog

if TYPE_CHECKING:
    from warden.services.leases import LeaseService
    from warden.services.quota import QuotaService
    from warden.services.workspaces import WorkspaceService

__all__ = ["CheckpointService", "WorkspaceVersions"]

# A workspace in these states has no whole folder to save or restore.
_UNAVAILABLE = {"creating": "is still being created", "archived": "is archived; unarchive it first"}
KEEP_KEY = "versions.keep"
SIZE_KEY = "versions.max_size"


def _new_id() -> str:
    return os.urandom(5).hex()


class CheckpointService:
    """Checkpoints, rollbacks and kept versions of workspaces."""

    def __init__(self, store: VersionStore, workspaces: WorkspaceService, audit: AuditLog, settings: Settings,
                 clock: Callable[[], datetime], *, leases: Callable[[], LeaseService] | None = None,
                 quota: QuotaService | None = None, new_id: Callable[[], str] = _new_id,
                 now_ns: Callable[[], int] = time.time_ns) -> None:
        self.store = store
        self._workspaces = workspaces
        self._audit = audit
        self._settings = settings
        self._clock = clock
        self._leases = leases
        self._quota = quota
        self._new_id = new_id
        self._now_ns = now_ns
        self.rollback_wait = 15.0  # seconds a rollback waits for runs and writes in flight

    # -- plumbing ----------------------------------------------------------------------------------
    def _record(self, workspace: str | WorkspaceRecord) -> WorkspaceRecord:
        record = self._workspaces.get(workspace) if isinstance(workspace, str) else workspace
        if record.status in _UNAVAILABLE:
            raise Conflict(f"workspace {record.name} {_UNAVAILABLE[record.status]}")
        return record

    @contextlib.contextmanager
    def _lease(self, name: str, mode: str, op: str) -> Iterator[None]:
        if self._leases is None:
            yield
            return
        if mode == "exclusive":
            # As lifecycle changes do: announce it (no new run or write starts), wait for those in
            # flight (a checkpoint, a file write, a short command) to end, else refuse with Locked.
            # Nothing is stopped: a long run is the person's to end first.
            with self._leases().hold(name, mode, op, drain=lambda: None, wait=self.rollback_wait):
                yield
            return
        with self._leases().hold(name, mode, op):
            yield

    def _lock(self, record: WorkspaceRecord) -> contextlib.AbstractContextManager[None]:
        return self.store.lock(record.name, record.id, record.path)

    def _budget(self, record: WorkspaceRecord) -> int | None:
        """The bytes the store may still grow by for this workspace (workspace.max_disk counts the
        workspace's files and what its store keeps together); None without a quota."""
        if self._quota is None:
            return None
        self._quota.check_free()
        return max(0, self._quota.limits().max_bytes - self._quota.usage(record.path).bytes)

    def _live_digests(self, record: WorkspaceRecord, versions: list[Version]) -> set[str]:
        live = {v.digest for v in versions}
        for manifest in self.store.manifests(record.name, record.id):
            live.update(e.digest for e in manifest.entries if e.kind == "file")
        return live

    # -- checkpoints -------------------------------------------------------------------------------
    def create(self, workspace: str | WorkspaceRecord, message: str = "", actor: str = "user") -> Manifest:
        """Save the workspace's content now as a checkpoint (the service other features call
        before `install`, `git pull` and approved operations)."""
        record = self._record(workspace)
        if len(message) > 1000 or "\0" in message:
            raise InvalidInput("a checkpoint message is at most 1000 characters, without NUL; shorten it")
        try:
            with self._lease(record.name, "shared", "checkpoint"), self._lock(record):
                manifest = self._capture(record, message, actor)
        except WardenError as exc:
            self._audit.record(actor=actor, action="checkpoint.create", target=record.name, result=exc.code,
                               rule=exc.rule or "", detail={"message": message, "error": exc.message})
            raise
        try:
            self._audit.record(actor=actor, action="checkpoint.create", target=record.name, result="ok",
                               detail={k: v for k, v in manifest.summary().items() if k != "workspace"})
        except WardenError:
            # No checkpoint without its audit row (its write failed on a full disk): the command
            # said "no space left" while the checkpoint was there, listed and rolled back to.
            with self._lock(record):
                self.store.drop_manifest(record.name, manifest.id)
                with contextlib.suppress(WardenError, OSError):
                    self._collect(record)  # else a later collection (a `checkpoint drop`) frees its objects
            raise
        return manifest

    def _capture(self, record: WorkspaceRecord, message: str, actor: str, *, reuse: bool = False,
                 bounded: bool = True) -> Manifest:
        """Capture under the store's lock: objects first, the manifest last. With `reuse`, a tree
        the newest checkpoint already holds as it is gives that checkpoint, not a new one; unless
        `bounded`, workspace.max_disk does not refuse it, only the room left above
        workspace.min_free on the home's filesystem does (counted as it is written: a check at
        the start alone let one save of a full workspace fill that filesystem)."""
        previous = self.store.manifests(record.name, record.id)
        known = {e.path: e for e in previous[-1].entries} if previous else {}
        if self.store.begin_capture(record.name):
            self._collect(record)  # the last capture was killed: its objects are named by no manifest
        try:
            room = self._quota.room() if not bounded and self._quota is not None else None
            budget = self._budget(record) if bounded else room
            captured = self.store.capture(record.name, record.path, known=known, budget=budget,
                                          now_ns=self._now_ns())
        except TooLarge:
            # Objects placed before the refusal are named by no manifest: free them now.
            self._collect(record)
            self.store.end_capture(record.name)
            if bounded:
                raise
            raise Unavailable(f"no space left on the filesystem of Warden's home to save {record.name} as it is "
                              f"now before the rollback: it needs more than the {room:,} bytes there above "
                              f"{FREE_KEY}; nothing was changed; free disk space there (`warden checkpoints "
                              f"{record.name} --drop ID` frees old checkpoints), or lower {FREE_KEY}",
                              rule=FREE_KEY) from None
        if reuse and previous and _same_content(previous[-1].entries, captured.entries):
            self.store.end_capture(record.name)
            return previous[-1]
        manifest = Manifest(id=self._unique_id({m.id for m in previous}), workspace=record.name,
                            workspace_id=record.id, created_at=self._clock().isoformat(timespec="milliseconds"),
                            message=message, actor=actor, entries=tuple(captured.entries),
                            added_bytes=captured.added_bytes)
        self.store.save_manifest(record.name, manifest)
        self.store.end_capture(record.name)
        return manifest

    def _collect(self, record: WorkspaceRecord) -> int:
        """Remove objects no checkpoint or version names; the bytes freed."""
        freed = self.store.collect(record.name,
                                   self._live_digests(record, self.store.versions(record.name, record.id)))
        self.store.measure(record.name)
        return freed

    def _unique_id(self, taken: set[str]) -> str:
        for _ in range(10):
            found = self._new_id()
            if found not in taken:
                return found
        raise Conflict("could not pick a new checkpoint id; try again")

    def list(self, workspace: str | WorkspaceRecord) -> list[Manifest]:
        """The workspace's checkpoints, oldest first."""
        record = self._workspaces.get(workspace) if isinstance(workspace, str) else workspace
        return self.store.manifests(record.name, record.id)

    def get(self, workspace: str | WorkspaceRecord, checkpoint: str) -> Manifest:
        """Checkpoint `checkpoint` (its id, or a unique prefix of it)."""
        record = self._workspaces.get(workspace) if isinstance(workspace, str) else workspace
        return self._find(record, check_id(checkpoint))

    def _find(self, record: WorkspaceRecord, wanted: str) -> Manifest:
        found = [m for m in self.store.manifests(record.name, record.id) if m.id.startswith(wanted)]
        if not found:
            raise NotFound(f"workspace {record.name} has no checkpoint {wanted}; `warden checkpoints "
                           f"{record.name}` lists them")
        if len(found) > 1 and not any(m.id == wanted for m in found):
            raise InvalidInput(f"{wanted} names {len(found)} checkpoints of {record.name}; give more of the id")
        return next((m for m in found if m.id == wanted), found[0])

    def rollback(self, workspace: str | WorkspaceRecord, checkpoint: str, *, path: str | None = None,
                 actor: str = "user") -> dict[str, object]:
        """Bring the workspace's content (or only `path` and what is beneath it) back to checkpoint
        `checkpoint`; what was there is saved first as a checkpoint of its own."""
        record = self._record(workspace)
        wanted = check_id(checkpoint)
        scope = normalize_scope(path)
        detail: dict[str, object] = {"checkpoint": wanted, "path": "/" + (scope or "")}
        try:
            with self._lease(record.name, "exclusive", "rollback"), self._lock(record):
                target = self._find(record, wanted)
                detail["checkpoint"] = target.id
                # Not refused by workspace.max_disk: a workspace a bot filled up is just when a
                # rollback is needed (`checkpoints --drop` frees this save when it is not wanted).
                before = self._capture(record, f"before rollback to {target.id}", actor, reuse=True,
                                       bounded=False)
                detail["saved_as"] = before.id
                plan = plan_rollback(self.store.scan(record.path, scope), target.entries, scope,
                                     {e.path: e.digest for e in before.entries if e.kind == "file"})
                self.store.apply(record.name, record.path, plan)
                detail.update(plan.counts())
        except WardenError as exc:
            self._audit.record(actor=actor, action="checkpoint.rollback", target=record.name, result=exc.code,
                               rule=exc.rule or "", detail={**detail, "error": exc.message})
            raise
        except BaseException as exc:
            # A person's stop as the files were being written (or once they were): they changed,
            # and the log said nothing of it. Said "interrupted", with what it was saved as.
            stop = stops.carried(exc)
            if stop is None:
                raise
            by = stop.name if isinstance(stop, Terminated) else "SIGINT"
            with stops.Whole(), contextlib.suppress(WardenError):
                self._audit.record(actor=actor, action="checkpoint.rollback", target=record.name,
                                   result="interrupted", detail={**detail, "interrupted_by": by})
            raise
        done: dict[str, object] = {"workspace": record.name, **detail}
        try:
            self._audit.record(actor=actor, action="checkpoint.rollback", target=record.name, result="ok",
                               detail=detail)
            self._workspaces.touch(record.name)
        except WardenError as exc:
            # The files are back already (undoing that on a full disk would fail the same way):
            # saying "failed" was false. It is said as done, with what the audit log lacks.
            done["warning"] = f"rolled back, but not in the audit log: {exc.message}"
        return done

    def drop(self, workspace: str | WorkspaceRecord, checkpoints: Sequence[str], actor: str = "user",
             ) -> dict[str, object]:
        """Delete checkpoints (ids or unique prefixes) and the content only they held."""
        record = self._workspaces.get(workspace) if isinstance(workspace, str) else workspace
        wanted = [check_id(c) for c in checkpoints]
        with self._lock(record):
            found = [self._find(record, c) for c in wanted]  # all or nothing: a bad id drops none
            for manifest in found:
                self.store.drop_manifest(record.name, manifest.id)
            freed = self._collect(record)
        ids = sorted({m.id for m in found})
        self._audit.record_made(actor=actor, action="checkpoint.drop", target=record.name, result="ok",
                                detail={"checkpoints": ids, "freed": freed})
        return {"workspace": record.name, "dropped": ids, "freed": freed}

    # -- versions of single paths -------------------------------------------------------------------
    def for_files(self, record: WorkspaceRecord, actor: str) -> WorkspaceVersions:
        """What the file API of workspace `record` uses to keep and find versions."""
        return WorkspaceVersions(self, record, actor)

    def keep(self, record: WorkspaceRecord, path: str, op: str, actor: str) -> builtins.list[Version]:
        """Keep the regular files at workspace path `path` (a file, or those under a folder about
        to be deleted) as versions, then apply `versions.keep` and `versions.max_size`."""
        keep = self._settings.get_int(KEEP_KEY)
        max_size = self._settings.get_size(SIZE_KEY)
        if keep <= 0 or max_size <= 0:
            return []
        with self._lock(record):
            found = self.store.keep_file(record.name, record.path, path, max_bytes=max_size)
            if not found:
                return []
            when = self._clock().isoformat(timespec="milliseconds")
            new = [Version(self._new_id(), rel, when, actor, op, size, digest, mode)
                   for rel, size, digest, mode in found]
            kept, dropped = retain([*self.store.versions(record.name, record.id), *new], keep, max_size)
            self.store.save_versions(record.name, kept)
            if dropped:
                self.store.collect(record.name, self._live_digests(record, kept))
                self.store.measure(record.name)
        dropped_ids = {v.id for v in dropped}
        return [v for v in new if v.id not in dropped_ids]

    def versions(self, record: WorkspaceRecord, path: str) -> builtins.list[Version]:
        """Kept versions of workspace path `path` (and, for a folder, of the files that were under
        it), newest first."""
        rel = canonical(path)
        prefix = rel.rstrip("/") + "/"
        return [v for v in reversed(self.store.versions(record.name, record.id))
                if v.path == rel or v.path.startswith(prefix)]

    def content(self, record: WorkspaceRecord, path: str, version: str | None, *, max_bytes: int,
                ) -> tuple[Version, bytes]:
        """A kept version of `path` (the newest when `version` is None) and its bytes."""
        rel = canonical(path)
        mine = [v for v in reversed(self.store.versions(record.name, record.id)) if v.path == rel]
        if version is not None:
            wanted = check_id(version)
            mine = [v for v in mine if v.id.startswith(wanted)]
        if not mine:
            raise NotFound(f"no kept version of {rel} in workspace {record.name}"
                           + (f" with id {version}" if version else "")
                           + f"; `warden fs {record.name} versions {rel}` lists them")
        chosen = mine[0]
        return chosen, self.store.read_object(record.name, chosen.digest, max_bytes=max_bytes)

    # -- the workspace's end, and the quota ---------------------------------------------------------------
    def forget(self, record: WorkspaceRecord, actor: str = "user") -> bool:
        """Drop a destroyed workspace's checkpoints and versions (its archive, if any, keeps its
        last state)."""
        try:
            removed = self.store.remove(record.name)
        except OSError as exc:  # the workspace is gone all the same; say what was left behind
            self._audit.record(actor=actor, action="checkpoint.forget", target=record.name, result="internal",
                               detail={"error": str(exc)})
            return False
        if removed:
            self._audit.record_made(actor=actor, action="checkpoint.forget", target=record.name, result="ok")
        return removed


def _same_content(a: Sequence[Entry], b: Sequence[Entry]) -> bool:
    """Whether two checkpoints hold the same tree (stat stamps aside)."""
    def key(entries: Sequence[Entry]) -> list[tuple[str, str, int, str, str]]:
        return [(e.path, e.kind, e.mode, e.digest, e.target) for e in entries]

    return len(a) == len(b) and key(a) == key(b)


class WorkspaceVersions:
    """Versions of one workspace for the file API (services/files.py): keep before a change, list,
    and read back."""

    def __init__(self, service: CheckpointService, record: WorkspaceRecord, actor: str) -> None:
        self._service = service
        self._record = record
        self._actor = actor

    def keep(self, path: str, op: str) -> builtins.list[Version]:
        return self._service.keep(self._record, path, op, self._actor)

    def list(self, path: str) -> builtins.list[Version]:
        return self._service.versions(self._record, path)

    def content(self, path: str, version: str | None, max_bytes: int) -> tuple[Version, bytes]:
        return self._service.content(self._record, path, version, max_bytes=max_bytes)
