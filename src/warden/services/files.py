"""Safe file operations on one workspace: canonicalise, decide, ask, open safely, audit.

Paths are workspace-relative (`/` is the workspace root; zones are its top-level
directories). Each call: `canonical()` → the workspace policy (lists, system paths,
protected files, zones) → the approval gate for `ask` → the safe file layer beneath the
workspace's directory descriptor → one audit event with the rule that decided.

Approval: a zone's `ask` needs a person. The service takes an `approver` callable; the CLI
and the Python API run as the local person, so they pass `approve_local_user`. A bot (no
approver yet) gets Denied "needs approval" until the approvals feature plugs one in.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from warden.adapters.safefs import Entry, SafeRoot
from warden.core.errors import Conflict, Denied, TooLarge, WardenError
from warden.core.paths import canonical, segments
from warden.core.policy import Decision, WorkspacePolicy
from warden.core.workspaces import WorkspaceRecord
from warden.core.zones import Zone
from warden.services.audit import AuditLog
from warden.services.sandbox_paths import SandboxPaths

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


Approver = Callable[[ApprovalRequest], bool]


def approve_local_user(request: ApprovalRequest) -> bool:
    """The person running the CLI or the Python API is the one who would be asked: yes."""
    return True


# Statuses whose folder may be missing or half-made.
_UNAVAILABLE = {"creating": "is still being created", "archived": "is archived; unarchive it first"}


class FileService:
    """File operations on one workspace for one actor."""

    def __init__(self, record: WorkspaceRecord, *, paths: SandboxPaths, audit: AuditLog, max_bytes: int,
                 actor: str = "user", approver: Approver | None = None, session: str | None = None,
                 scope: Mapping[str, Zone] | None = None, use_openat2: bool | None = None) -> None:
        self.record = record
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

    # -- plumbing --------------------------------------------------------------------------
    def policy(self) -> WorkspacePolicy:
        """The current decider; rebuilt when a policy file (lists, zones) changed on disk."""
        current = self._paths.fingerprint(self.record, self.session)
        if self._policy is None or current != self._stamp:
            self._policy = self._paths.workspace_policy(self.record, self.session, self.scope)
            self._stamp = current
        return self._policy

    def decide(self, path: str, op: str) -> Decision:
        """The decision for `op` on workspace path `path`, without doing it."""
        return self.policy().decide(canonical(path), op)

    def _audit_event(self, op: str, rel: str, decision: Decision | None, result: str,
                     detail: Mapping[str, Any] | None = None) -> None:
        self._audit.record(actor=self.actor, action=f"fs.{op}", target=f"{self.record.name}:{rel}",
                           decision=decision.decision if decision else "none",
                           rule=decision.rule if decision else "", result=result, detail=detail)

    def _do(self, op: str, path: str, work: Callable[[SafeRoot, str], T],
            detail: Callable[[T], Mapping[str, Any]] | None = None) -> T:
        rel = path
        decision: Decision | None = None
        try:
            rel = canonical(path)
            if self.record.status in _UNAVAILABLE:
                raise Conflict(f"workspace {self.record.name} {_UNAVAILABLE[self.record.status]}")
            decision = self.policy().decide(rel, op)
            if not decision.allowed:
                raise Denied(f"{op} {rel} in workspace {self.record.name} refused ({decision.rule})",
                             rule=decision.rule)
            if decision.approval == "ask":
                decision = self._ask(op, rel, decision)
            with SafeRoot.open(self.record.path, max_bytes=self.max_bytes, use_openat2=self._use_openat2) as root:
                result = work(root, rel)
        except WardenError as exc:
            if exc.rule and (decision is None or decision.allowed):
                # The file layer refused (a link, a FIFO, a hard link): that is the deciding rule.
                decision = Decision(False, exc.rule, zone=decision.zone if decision else None)
            self._audit_event(op, rel if isinstance(rel, str) else repr(rel), decision, exc.code,
                              {"error": exc.message})
            raise
        self._audit_event(op, rel, decision, "ok", detail(result) if detail else None)
        return result

    def _ask(self, op: str, rel: str, decision: Decision) -> Decision:
        request = ApprovalRequest(self.actor, self.record.name, op, rel, decision.zone, decision.rule)
        if self.approver is None:
            raise Denied(f"{op} {rel} in workspace {self.record.name} needs approval ({decision.rule}, "
                         "approval ask) and no one can answer; ask the workspace owner",
                         rule=f"deny: {decision.rule.removeprefix('allow: ')} needs approval")
        if not self.approver(request):
            raise Denied(f"{op} {rel} in workspace {self.record.name} was not approved",
                         rule=f"deny: {decision.rule.removeprefix('allow: ')} not approved")
        return Decision(True, f"{decision.rule}; approved by {self.actor}", "preApproved", decision.zone)

    # -- reads -----------------------------------------------------------------------------
    def read_bytes(self, path: str) -> bytes:
        """The bytes of a file."""
        return self._do("read", path, lambda root, rel: root.read_bytes(rel), lambda d: {"size": len(d)})

    def read_text(self, path: str, encoding: str = "utf-8") -> str:
        """The text of a file."""
        return self._do("read", path, lambda root, rel: root.read_text(rel, encoding),
                        lambda d: {"chars": len(d)})

    def list(self, path: str = "/") -> list[Entry]:
        """The entries of a directory (a restricted actor sees only its zones at `/`)."""
        entries = self._do("list", path, lambda root, rel: root.list(rel), lambda d: {"entries": len(d)})
        if self.scope is not None and canonical(path) == "/":
            visible = {segments(zone.path)[0] for zone in self.scope.values()}
            entries = [e for e in entries if e.name in visible]
        return entries

    def stat(self, path: str) -> Entry:
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
            self._audit_event("write", path, Decision(False, rule), "invalid", {"size": len(data)})
            raise TooLarge(f"{len(data)} bytes is over the limit of {self.max_bytes} bytes "
                           "(sandbox.max_file_size_mb); write a smaller file or raise the limit", rule=rule)
        return self._do("write", path, lambda root, rel: root.write_bytes(rel, data), lambda n: {"size": n})

    def write_text(self, path: str, text: str, encoding: str = "utf-8") -> int:
        """Replace a file with `text`."""
        return self.write_bytes(path, text.encode(encoding))

    def mkdir(self, path: str) -> bool:
        """Create a directory and its missing parents; False when it was already there."""
        return self._do("mkdir", path, lambda root, rel: root.mkdir(rel), lambda made: {"created": made})

    def delete(self, path: str, *, recursive: bool = False) -> str:
        """Remove a file, a link or a directory (non-empty ones only with `recursive`); returns its type."""
        return self._do("delete", path, lambda root, rel: root.delete(rel, recursive=recursive),
                        lambda kind: {"type": kind, "recursive": recursive})
