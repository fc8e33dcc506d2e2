"""Safe file operations on one workspace: canonicalise, decide, ask, open safely, audit.

Paths are workspace-relative (`/` is the workspace root; zones are its top-level
directories). Each call: `canonical()` → the workspace policy (lists, system paths,
protected files, zones) → the approval gate for `ask` → the safe file layer beneath the
workspace's directory descriptor → one audit event with the rule that decided.

Approval: a zone's `ask` needs a person. The service takes an `approver` callable; the CLI
and the Python API run as the local person, so they pass `approve_local_user`. A bot's service
gets the approvals queue's (services/approvals.py): the operation is stored and answered
Pending; without an approver it is Denied.

Versions: a write over a file and a delete first keep what is there as a version in Warden's
store (`versions`, services/checkpoints.py); `list_versions` and `restore_version` read them back.
A move that replaces a file should call `_keep(root, destination, "move")` the same way.
"""

from __future__ import annotations

import builtins
import contextlib
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from warden.core.errors import Conflict, Denied, NotFound, Pending, TooLarge, WardenError
from warden.core.paths import canonical, segments
from warden.core.policy import WRITE_OPS, PathDecision, WorkspacePolicy
from warden.core.ports import FileEntry, GitDefuser, SafeRoots, WorkspaceRoot
from warden.core.workspaces import WorkspaceRecord
from warden.core.zones import Zone
from warden.services.audit import AuditLog
from warden.services.sandbox_paths import SandboxPaths

if TYPE_CHECKING:
    from warden.core.checkpoints import Version
    from warden.core.quota import Usage
    from warden.services.checkpoints import WorkspaceVersions
    from warden.services.leases import LeaseService
    from warden.services.quota import QuotaService

__all__ = ["ApprovalRequest", "Approver", "FileService", "approve_local_user"]

T = TypeVar("T")


@dataclass(frozen=True)
class ApprovalRequest:
    """What a person is asked to consent to."""

    actor: str
    workspace: str
    op: str
    path: str
    zone: str | None
    rule: str
    content: bytes | None = None  # a write's bytes: what a person approves is exactly what lands
    recursive: bool = False
    destination: str | None = None  # a move's new path (`path` is its source)
    source_sha256: str | None = None  # a move's file as asked: carried out only while it is the same
    # The other zones that ask for this operation: a move's destination beside its source, the
    # zones beneath a deleted folder. Its answer needs `approve` over each, not only over `zone`.
    also_zones: tuple[str, ...] = ()


# True (or the answer's name, for the audit event) to go ahead, False to refuse; an approver
# that cannot answer now (the approvals queue) raises Pending instead.
Approver = Callable[[ApprovalRequest], bool | str]


def approve_local_user(request: ApprovalRequest) -> bool:
    """The person running the CLI or the Python API is the one who would be asked: yes."""
    return True


# Statuses whose folder may be missing or half-made.
_UNAVAILABLE = {"creating": "is still being created", "archived": "is archived; unarchive it first"}


class FileService:
    """File operations on one workspace for one actor."""

    def __init__(self, record: WorkspaceRecord, *, paths: SandboxPaths, audit: AuditLog, roots: SafeRoots,
                 git: GitDefuser, max_bytes: int, actor: str = "user", approver: Approver | None = None,
                 session: str | None = None,
                 scope: Mapping[str, Zone] | None = None, use_openat2: bool | None = None,
                 quota: QuotaService | None = None, leases: LeaseService | None = None,
                 status_of: Callable[[str], str | None] | None = None,
                 versions: WorkspaceVersions | None = None,
                 touch: Callable[[str], None] | None = None) -> None:
        # A change through the file API is use of the workspace (the janitor's idle rule),
        # recorded at most once a minute per service: not one registry write per file.
        self._touch = touch
        self._touched_at = -1e9
        self.record = record
        # Overwrites and deletes keep the previous content here first (services/checkpoints.py).
        self.versions = versions
        self._roots = roots
        self._git = git
        self._leases = leases
        self._status_of = status_of
        self._paths = paths
        self._audit = audit
        self.max_bytes = max_bytes
        self.actor = actor
        self.approver = approver
        self.session = session
        self.scope = scope
        self._use_openat2 = use_openat2
        self._policy: WorkspacePolicy | None = None
        self._stamp: object = None
        self.quota = quota
        self._usage: Usage | None = None  # one walk per service (per request), kept up to date
        # Per thread: one service serves a bot's concurrent requests (interfaces/http/files.py).
        self._batch = threading.local()

    # -- plumbing --------------------------------------------------------------------------
    def policy(self) -> WorkspacePolicy:
        """The current decider; rebuilt when a policy file (lists, zones) changed on disk."""
        current = self._paths.fingerprint(self.record, self.session)
        if self._policy is None or current != self._stamp:
            self._policy = self._paths.workspace_policy(self.record, self.session, self.scope)
            self._stamp = current
        return self._policy

    def decide(self, path: str, op: str) -> PathDecision:
        """The decision for `op` on workspace path `path`, without doing it."""
        return self.policy().decide(canonical(path), op)

    @contextlib.contextmanager
    def one_event(self, op: str, path: str) -> Iterator[None]:
        """Many reads as one audit event (`fs.OP` on `path`, with how many were made and refused):
        a search over thousands of files is one thing a bot did, and must not drown the log."""
        counts = {"reads": 0, "refused": 0}
        self._batch.counts = counts
        try:
            yield
        finally:
            self._batch.counts = None
            self._audit.record(actor=self.actor, action=f"fs.{op}", target=f"{self.record.name}:{path}",
                               decision="allow", rule="read (many)", result="ok", detail=counts)

    def _audit_event(self, op: str, rel: str, decision: PathDecision | None, result: str,
                     detail: Mapping[str, Any] | None = None, *, made: bool = False) -> None:
        """One `fs.OP` event; `made`: of a change already made (AuditLog.record_made)."""
        counts = getattr(self._batch, "counts", None)
        if counts is not None and op in ("read", "list", "stat", "exists"):
            counts["reads" if result == "ok" else "refused"] += 1
            return
        record = self._audit.record_made if made else self._audit.record
        record(actor=self.actor, action=f"fs.{op}", target=f"{self.record.name}:{rel}",
               decision=decision.decision if decision else "none",
               rule=decision.rule if decision else "", result=result, detail=detail)

    def _do(self, op: str, path: str, work: Callable[[WorkspaceRoot, str], T],
            detail: Callable[[T], Mapping[str, Any]] | None = None, *, action: str | None = None,
            content: bytes | None = None, recursive: bool = False,
            decide: Callable[[str], PathDecision] | None = None, destination: str | None = None) -> T:
        rel = path
        decision: PathDecision | None = None
        try:
            rel = canonical(path)
            if self.record.status in _UNAVAILABLE:
                raise Conflict(f"workspace {self.record.name} {_UNAVAILABLE[self.record.status]}")
            decision = decide(rel) if decide is not None else self.policy().decide(rel, op)
            if not decision.allowed:
                hint = "; a zone's rules are set in the workspace's .warden/zones.yaml" if decision.zone else ""
                raise Denied(f"{op} {rel} in workspace {self.record.name} refused ({decision.rule}){hint}",
                             rule=decision.rule)
            if decision.approval == "ask":
                decision = self._ask(op, rel, decision, content, recursive, destination)
            if op in WRITE_OPS or op == "move":
                # A shared lease: no archive, destroy or create changes the workspace under a write.
                with self._write_lease(op):
                    result = self._work(work, rel)
                    if op in ("write", "mkdir"):
                        self._defuse_git(rel, op)
                self._used()
            else:
                result = self._work(work, rel)
        except Pending as exc:
            self._audit_event(op, rel, PathDecision(True, exc.rule or "approval.pending", approval="ask",
                                                    zone=decision.zone if decision else None),
                              exc.code, {"approval": exc.approval.get("id")})
            raise
        except WardenError as exc:
            if exc.rule and (decision is None or decision.allowed):
                # The file layer refused (a link, a FIFO, a hard link): that is the deciding rule.
                decision = PathDecision(False, exc.rule, zone=decision.zone if decision else None)
            self._audit_event(action or op, rel if isinstance(rel, str) else repr(rel), decision, exc.code,
                              {"error": exc.message})
            raise
        # A change is made (undoing it would need the disk or registry that just failed): a row
        # that fails after it is said, not raised. A read changed nothing: refused as any read.
        self._audit_event(action or op, rel, decision, "ok", detail(result) if detail else None,
                          made=op in WRITE_OPS or op == "move")
        return result

    def _used(self) -> None:
        if self._touch is not None and time.monotonic() - self._touched_at >= 60:
            self._touched_at = time.monotonic()
            with contextlib.suppress(WardenError):  # a locked registry: the next change says it
                self._touch(self.record.name)

    def _work(self, work: Callable[[WorkspaceRoot, str], T], rel: str) -> T:
        with self._roots.open(self.record.path, max_bytes=self.max_bytes, use_openat2=self._use_openat2) as root:
            return work(root, rel)

    @contextlib.contextmanager
    def _write_lease(self, op: str) -> Iterator[None]:
        if self._leases is None:
            yield
            return
        with self._leases.hold(self.record.name, "shared", f"fs.{op}"):
            status = (self._status_of(self.record.name) if self._status_of else None) or self.record.status
            if status in _UNAVAILABLE:
                raise Conflict(f"workspace {self.record.name} {_UNAVAILABLE[status]}")
            yield

    def _defuse_git(self, rel: str, op: str) -> None:
        """A write can complete a folder that git would take for a repository (HEAD and refs):
        the folders along the path are checked, and such a folder's HEAD set aside."""
        parts = segments(rel)
        folders = ["/".join(parts[:i]) for i in range(len(parts) + (op == "mkdir"))]
        moved = self._git.defuse(self.record.path, folders)
        if moved:
            self._audit.record_made(actor=self.actor, action="git.quarantine", target=self.record.name,
                                    decision="deny", rule="git.control_files", result="moved",
                                    detail={"moved": list(moved)})

    def _ask(self, op: str, rel: str, decision: PathDecision, content: bytes | None,
             recursive: bool, destination: str | None = None) -> PathDecision:
        # The rule as the person reads it in `warden approvals`: what asks, not what allows.
        why = f"ask: zone {decision.zone} asks a person before a {op}" if decision.zone else decision.rule
        pinned = self._pin_move(rel) if op == "move" and self.approver is not None else None
        request = ApprovalRequest(self.actor, self.record.name, op, rel, decision.zone, why, content, recursive,
                                  destination, pinned, self._also_asking(op, rel, decision.zone, destination))
        if self.approver is None:
            raise Denied(f"{op} {rel} in workspace {self.record.name} needs approval ({decision.rule}, "
                         "approval ask) and no one can answer; ask the workspace owner",
                         rule=f"deny: {decision.rule.removeprefix('allow: ')} needs approval")
        answer = self.approver(request)
        if not answer:
            raise Denied(f"{op} {rel} in workspace {self.record.name} was not approved",
                         rule=f"deny: {decision.rule.removeprefix('allow: ')} not approved")
        by = answer if isinstance(answer, str) else self.actor
        return PathDecision(True, f"{decision.rule}; approved by {by}", approval="preApproved",
                            zone=decision.zone)

    def _also_asking(self, op: str, rel: str, zone: str | None, destination: str | None) -> tuple[str, ...]:
        """The zones other than `zone` that ask a person for this operation. One request names one
        zone, and an approver given `approve` over that zone alone answered for the others too: a
        move from one `ask` zone into another landed a file in a zone it answers nothing for."""
        policy = self.policy()
        asking: list[str] = []
        if op == "move" and destination is not None:
            made = policy.decide(canonical(destination), "write")
            if made.approval == "ask" and made.zone:
                asking.append(made.zone)
        if op in ("delete", "move"):
            asking += [z.name for z in policy.zones_below(rel) if z.approval.for_op("delete") == "ask"]
        return tuple(sorted({z for z in asking if z != zone}))

    # -- reads -----------------------------------------------------------------------------
    def read_bytes(self, path: str, *, room: Callable[[int], None] | None = None) -> bytes:
        """The bytes of a file; `room(size)` is told its size before they are read (and may refuse)."""
        return self._do("read", path, lambda root, rel: root.read_bytes(rel, room=room), lambda d: {"size": len(d)})

    def open_read(self, path: str, *, room: Callable[[int], None] | None = None) -> tuple[int, int]:
        """(A descriptor of a file, its size), for one read audited now and done by the caller
        piece by piece (it closes the descriptor): the HTTP content route."""
        return self._do("read", path, lambda root, rel: root.open_file(rel, room=room), lambda r: {"size": r[1]})

    def read_pieces(self, path: str, take: Callable[[bytes, int], bool], *, piece: int = 1 << 20) -> int:
        """A file's bytes handed to `take(piece, size)` a piece at a time until it returns False
        (one read, audited once): what a reader that keeps only a part holds, whatever the size."""
        return self._do("read", path, lambda root, rel: root.read_pieces(rel, take, piece=piece),
                        lambda n: {"size": n})

    def read_text(self, path: str, encoding: str = "utf-8") -> str:
        """The text of a file."""
        return self._do("read", path, lambda root, rel: root.read_text(rel, encoding),
                        lambda d: {"chars": len(d)})

    def list(self, path: str = "/") -> list[FileEntry]:
        """The entries of a directory (a restricted actor sees only its zones at `/`)."""
        entries = self._do("list", path, lambda root, rel: list(root.list(rel)), lambda d: {"entries": len(d)})
        if self.scope is not None and canonical(path) == "/":
            visible = {segments(zone.path)[0] for zone in self.scope.values()}
            entries = [e for e in entries if e.name in visible]
        return entries

    def stat(self, path: str) -> FileEntry:
        """What a path is (links reported as links)."""
        return self._do("stat", path, lambda root, rel: root.stat(rel))

    def exists(self, path: str) -> bool:
        """Whether a path names an entry."""
        return self._do("exists", path, lambda root, rel: root.exists(rel))

    # -- writes ----------------------------------------------------------------------------
    def write_bytes(self, path: str, data: bytes) -> int:
        """Replace a file with `data` (missing parent directories are created); returns its size."""
        if len(data) > self.max_bytes:
            rule = "deny: size over sandbox.max_file_size_mb"
            self._audit_event("write", path, PathDecision(False, rule), "invalid", {"size": len(data)})
            raise TooLarge(f"{len(data)} bytes is over the limit of {self.max_bytes} bytes "
                           "(sandbox.max_file_size_mb); write a smaller file or raise the limit", rule=rule)

        kept: builtins.list[Version] = []

        def work(root: WorkspaceRoot, rel: str) -> int:
            growth = self._check_quota(root, rel, len(data))
            kept.extend(self._keep(root, rel, "write"))
            size = root.write_bytes(rel, data)
            self._grew(growth)
            return size

        return self._do("write", path, work, lambda n: {"size": n, **_kept_detail(kept)}, content=data)

    def _keep(self, root: WorkspaceRoot, rel: str, op: str) -> builtins.list[Version]:
        """Keep what `rel` holds now as a version before `op` replaces or removes it."""
        if self.versions is None:
            return []
        try:
            old = root.stat(rel)
        except WardenError:
            return []
        if old.type != "file" and not (op == "delete" and old.type == "dir"):
            return []  # a link keeps nothing; a write onto a folder fails anyway
        return self.versions.keep(rel, op)

    def list_versions(self, path: str) -> builtins.list[Version]:
        """Kept earlier contents of `path` (and of files that were under it), newest first."""
        if self.versions is None:
            return []
        versions = self.versions
        return self._do("read", path, lambda _root, rel: versions.list(rel),
                        lambda found: {"versions": len(found)}, action="versions")

    def restore_version(self, path: str, version: str | None = None) -> Version:
        """Write a kept version of `path` back (the newest when `version` is None); what `path`
        holds now is kept as a version in its turn."""
        if self.versions is None:
            raise NotFound("this workspace keeps no versions")
        chosen, data = self.versions.content(canonical(path), version, self.max_bytes)
        self.write_bytes(path, data)
        self._audit_event("restore", canonical(path), None, "ok", {"version": chosen.id, "size": chosen.size},
                          made=True)
        return chosen

    def _check_quota(self, root: WorkspaceRoot, rel: str, size: int | None) -> tuple[int, int]:
        """(bytes, files) writing `size` bytes to `rel` (None: making folder `rel`) adds; TooLarge
        when that passes the workspace's quota, Unavailable when the home's disk is nearly full."""
        if self.quota is None:
            return 0, 0
        from warden.core.quota import file_charge

        self.quota.check_free()
        try:
            old: FileEntry | None = root.stat(rel)
        except WardenError:  # missing (or unusable: the write itself then says why)
            old = None
        add_files = 0 if old is not None else 1
        add_bytes = (0 if size is None else file_charge(size)) - (
            file_charge(old.size) if old is not None and old.type == "file" else 0)
        if self._usage is None:
            self._usage = self.quota.usage(self.record.path)
        what = f"writing {size} bytes to {rel}" if size is not None else f"making folder {rel}"
        self.quota.check_write(self.record.name, self._usage, add_bytes, add_files, what)
        return add_bytes, add_files

    def _grew(self, growth: tuple[int, int]) -> None:
        if self._usage is not None:
            self._usage = self._usage.plus(*growth)

    def write_text(self, path: str, text: str, encoding: str = "utf-8") -> int:
        """Replace a file with `text`."""
        return self.write_bytes(path, text.encode(encoding))

    def mkdir(self, path: str) -> bool:
        """Create a directory and its missing parents; False when it was already there."""
        def work(root: WorkspaceRoot, rel: str) -> bool:
            growth = self._check_quota(root, rel, None)
            made = root.mkdir(rel)
            self._grew(growth)
            return made

        return self._do("mkdir", path, work, lambda made: {"created": made})

    def delete(self, path: str, *, recursive: bool = False) -> str:
        """Remove a file, a link or a directory (non-empty ones only with `recursive`); returns its type."""
        kept: builtins.list[Version] = []

        def work(root: WorkspaceRoot, rel: str) -> str:
            if recursive or root.stat(rel).type != "dir":  # an empty folder's delete keeps nothing
                kept.extend(self._keep(root, rel, "delete"))
            return root.delete(rel, recursive=recursive)

        return self._do("delete", path, work,
                        lambda kind: {"type": kind, "recursive": recursive, **_kept_detail(kept)},
                        recursive=recursive)

    def _pin_move(self, rel: str) -> str:
        """The SHA-256 of the file a move asks to move: an approval carries out that move only while
        the file is what the person was shown (a folder, whose contents could change under the
        request, is not moved by approval: its files are, one by one)."""
        from warden.core.approvals import content_digest

        def pin(root: WorkspaceRoot, path: str) -> str:
            if root.stat(path).type != "file":
                raise Denied(f"move {path}: only a file's move can wait for a person's approval; move the files "
                             "in it one by one", rule="approval.move_folder")
            return content_digest(root.read_bytes(path))

        return self._work(pin, rel)

    def move(self, source: str, destination: str, *, sha256: str | None = None) -> str:
        """Rename `source` to `destination`, never over an existing entry; returns its type.

        A move removes a name and makes one, so the policy decides `delete` on the source and
        `write` on the destination, and both must allow it; an `ask` on either asks a person
        once, for the whole move. Parents of the destination are made when missing. With `sha256`
        (an approved move: the file as the person was shown it) the file must hold exactly those
        bytes, and lands as a new file (WorkspaceRoot.move says why)."""
        dst = canonical(destination)

        def decide(src: str) -> PathDecision:
            policy = self.policy()
            gone, made = policy.decide(src, "delete"), policy.decide(dst, "write")
            # A folder moved to `dst` fills every zone below `dst` too: each must take it as a
            # write would, with no person to ask (its files could not be shown one by one).
            below = [z for z in policy.zones_below(dst) if z.path != dst]
            for zone in below:
                inner = policy.decide(zone.path + "/_", "write")
                if not inner.allowed or inner.approval != "preApproved":
                    raise Denied(f"move {src} to {dst} in workspace {self.record.name} refused: it would fill "
                                 f"{zone.path}, where writes are not free ({inner.rule})", rule=inner.rule)
            for decision, what in ((gone, f"removing {src}"), (made, f"writing {dst}")):
                if not decision.allowed:
                    raise Denied(f"move {src} to {dst} in workspace {self.record.name} refused: {what} is not "
                                 f"allowed ({decision.rule})", rule=decision.rule)
            asked = gone if gone.approval == "ask" else made
            return PathDecision(True, f"{gone.rule}; {made.rule}", approval=asked.approval, zone=asked.zone)

        def work(root: WorkspaceRoot, src: str) -> str:
            kind = root.move(src, dst, sha256=sha256)
            # A moved folder can complete one that git would take for a repository (HEAD, refs).
            self._defuse_git(dst, "mkdir" if kind == "dir" else "write")
            return kind

        return self._do("move", source, work, lambda kind: {"destination": dst, "type": kind}, decide=decide,
                        destination=dst)


def _kept_detail(kept: list[Version]) -> dict[str, Any]:
    """The audit detail naming the versions a change kept."""
    if not kept:
        return {}
    if len(kept) == 1:
        return {"version": kept[0].id}
    return {"versions": len(kept)}
