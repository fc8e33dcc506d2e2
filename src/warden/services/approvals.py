"""The approvals queue: a bot's `ask` operation waits, a person answers, Warden carries it out.

A bot's file operation in a zone whose approval is `ask` reaches `queue(principal)` (the file
service's approver for that bot): the request is stored with the bytes of a write and the bot is
answered `Pending` (HTTP 202 with the approval's id). A person answers with `warden approve|deny`,
or a bot holding the `approve` permission on that workspace over the API (never for its own
request). On approval, Warden checks the requesting grant again (still alive, still allowed to
write there), the stored bytes against their hash, the workspace policy as it is now, and then
does exactly the operation asked, through the file service, as the requester, with the answer
in its audit event. On denial or expiry nothing happens. Every move is compare-and-set on the
row's status (core/approvals.py), so two answers at once carry an operation out at most once.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, NoReturn

from warden.core.approvals import (
    ApprovalRecord,
    check_answer,
    check_approval_id,
    content_digest,
    new_approval_id,
    shown_status,
)
from warden.core.errors import Conflict, Denied, NotFound, Pending, TooLarge, WardenError
from warden.core.grants import alive, decide
from warden.services.audit import unaudited

if TYPE_CHECKING:
    from warden.core.ports import Registry
    from warden.core.workspaces import WorkspaceRecord
    from warden.core.zones import Zone
    from warden.services.audit import AuditLog
    from warden.services.auth import Principal
    from warden.services.files import ApprovalRequest, FileService
    from warden.services.grants import GrantService
    from warden.services.workspaces import WorkspaceService

__all__ = ["ApprovalService", "Executor"]

# Carries out an approved request of one kind (`git.push`, …): the record and the stored bytes
# in, a short JSON-able outcome out; a WardenError marks the request failed.
Executor = Callable[[ApprovalRecord, bytes | None], Mapping[str, Any]]
FilesFor = Callable[..., "FileService"]


def _iso(moment: datetime) -> str:
    return moment.isoformat(timespec="microseconds")


class ApprovalService:
    def __init__(self, registry: Registry, audit: AuditLog, clock: Callable[[], datetime], *,
                 workspaces: WorkspaceService, grants: GrantService, files: FilesFor,
                 zones_of: Callable[[WorkspaceRecord], Mapping[str, Zone]],
                 ttl: timedelta, max_pending: int, max_bytes: int,
                 before: Callable[[WorkspaceRecord, str, str], object] | None = None) -> None:
        self._registry = registry
        self._audit = audit
        self._clock = clock
        self._workspaces = workspaces
        self._grants = grants
        self._files = files
        self._zones_of = zones_of
        self.ttl = ttl
        self.max_pending = max_pending
        self.max_bytes = max_bytes
        # Called with (workspace, message, actor) before an approved operation changes anything:
        # the checkpoint that lets a person undo what they approved.
        self._before = before
        self._executors: dict[str, Executor] = {
            "write": self._file_op, "mkdir": self._file_op, "delete": self._file_op, "move": self._file_op}

    def register(self, op: str, executor: Executor) -> None:
        """Another kind of request (a git push) and what carries it out once approved."""
        self._executors[op] = executor

    # -- asking ----------------------------------------------------------------------------
    def queue(self, principal: Principal) -> Callable[[ApprovalRequest], bool | str]:
        """The approver of a bot's file service: stores each `ask` operation and answers Pending."""
        def approver(request: ApprovalRequest) -> NoReturn:
            detail: dict[str, Any] = {"recursive": True} if request.recursive else {}
            if request.source_sha256 is not None:
                detail["source_sha256"] = request.source_sha256
            if request.also_zones:
                detail["also_zones"] = list(request.also_zones)
            record = self.ask(principal, request.workspace, request.op, request.path, zone=request.zone,
                              rule=request.rule, content=request.content, destination=request.destination,
                              detail=detail or None)
            what = f"{request.op} {request.path}" + (f" to {request.destination}" if request.destination else "")
            raise Pending(f"{what} in workspace {request.workspace} waits for a person's "
                          f"approval ({request.rule}); ask them to run `warden approve {record.id}`, "
                          f"and poll GET /v1/approvals/{record.id}",
                          approval=record.view(self._clock()), rule="approval.pending")

        return approver

    def ask(self, principal: Principal, workspace: str, op: str, path: str, *, zone: str | None, rule: str,
            content: bytes | None = None, destination: str | None = None,
            detail: Mapping[str, Any] | None = None) -> ApprovalRecord:
        """Store one request of `principal` (a grant) and audit it; TooLarge past approvals.max_pending."""
        if principal.kind != "grant" or principal.accessor is None:
            raise Denied("only a grant's requests can wait for approval", rule="approval.identity")
        record_ws = self._workspaces.get(workspace)
        now = self._clock()
        record = ApprovalRecord(
            id=new_approval_id(), workspace=workspace, workspace_id=record_ws.id, op=op, path=path,
            requester=principal.actor, bot=principal.bot, minter=principal.minter, accessor=principal.accessor,
            zone=zone,
            rule=rule, created_at=now, expires_at=now + self.ttl, destination=destination,
            digest=content_digest(content) if content is not None else None,
            size=len(content) if content is not None else None, detail=dict(detail or {}))
        with self._registry.transaction() as tx:
            # Counted per minter: the child grants a bot mints (under any names) share its bound.
            waiting, held = tx.approvals.count_waiting(principal.minter, _iso(now))
            if waiting >= self.max_pending:
                raise TooLarge(f"bot {principal.minter} and the grants it minted already have {waiting} requests "
                               "waiting for approval (approvals.max_pending); wait for answers first",
                               rule="approval.max_pending")
            if held + (record.size or 0) > self.max_bytes:
                raise TooLarge(f"requests waiting for approval already hold {held} bytes "
                               "(approvals.max_pending_size); wait for answers first", rule="approval.max_bytes")
            tx.approvals.insert(record, content)
            # In the same transaction: a request stored but not audited (a full disk) was refused
            # to its bot while it waited in the person's queue.
            self._audit.record(actor=principal.actor, action="approval.request", target=f"{workspace}:{path}",
                               decision="ask", rule=rule, result="pending",
                               detail={"id": record.id, "op": op, "size": record.size, "sha256": record.digest,
                                       "zone": zone}, tx=tx)
        return record

    # -- reading ---------------------------------------------------------------------------
    def get(self, approval_id: str) -> ApprovalRecord:
        check_approval_id(approval_id)
        with self._registry.transaction(write=False) as tx:
            record = tx.approvals.get(approval_id)
        if record is None:
            raise NotFound(f"no approval request {approval_id}; see `warden approvals --all`")
        return record

    def content(self, approval_id: str) -> bytes | None:
        with self._registry.transaction(write=False) as tx:
            return tx.approvals.content(check_approval_id(approval_id))

    def listed(self, *, workspace: str | None = None, everything: bool = False,
               limit: int = 200) -> list[ApprovalRecord]:
        """Requests waiting (all of them, answered too, with `everything`), newest first."""
        self.expire()
        with self._registry.transaction(write=False) as tx:
            return tx.approvals.listed(workspace=workspace, statuses=None if everything else ("pending", "approving"),
                                       limit=limit)

    def status(self, record: ApprovalRecord) -> str:
        return shown_status(record, self._clock())

    def view(self, record: ApprovalRecord) -> dict[str, Any]:
        return record.view(self._clock())

    def forget(self, workspace: WorkspaceRecord, actor: str) -> int:
        """Drop the requests of a destroyed workspace (their bytes with them)."""
        with self._registry.transaction() as tx:  # with their audit rows, as every change here
            gone = tx.approvals.forget_workspace(workspace.id)
            if gone:
                self._audit.record(actor=actor, action="approval.forget", target=workspace.name, decision="allow",
                                   rule="workspace.destroyed", result="ok", detail={"requests": gone}, tx=tx)
        return gone

    # -- answering -------------------------------------------------------------------------
    def expire(self) -> list[str]:
        """Mark requests past their time expired (their bytes dropped) and audit each."""
        with self._registry.transaction() as tx:
            gone = tx.approvals.expire(_iso(self._clock()))
            for approval_id in gone:
                self._audit.record(actor="warden", action="approval.expire", target=approval_id, decision="deny",
                                   rule="approval.ttl", result="expired", tx=tx)
        return gone

    def answer(self, approval_id: str, *, approve: bool, actor: str, answerer: Principal | None = None,
               note: str | None = None) -> ApprovalRecord:
        """Approve (and carry out) or deny one request. `answerer` is the answering grant over the
        API (None: the person). Returns the request as it ends; a failed operation raises its
        error after the request is marked `failed`."""
        if note is not None and len(note) > 2000:
            raise TooLarge("a note is at most 2000 characters")
        record = self.get(approval_id)
        if self.status(record) == "expired" and record.status == "pending":
            self.expire()  # written as expired (and audited) before it is refused as such
            record = self.get(approval_id)
        verb = "approve" if approve else "deny"
        try:
            check_answer(record, self._clock(), approve=approve,
                         answerer=(answerer.bot, answerer.minter) if answerer is not None else None)
        except WardenError as exc:
            self._audit.record(actor=actor, action=f"approval.{verb}", target=approval_id,
                               decision="deny", rule=exc.rule or "approval", result=exc.code)
            raise
        answered = {"answered_by": actor, "answered_at": _iso(self._clock()), "note": note}
        if not approve:
            self._move(record, "denied", answered, audit={
                "actor": actor, "action": "approval.deny", "target": approval_id, "decision": "deny",
                "rule": "approval.denied", "result": "ok",
                "detail": {"workspace": record.workspace, "op": record.op, "path": record.path,
                           "requester": record.requester, "note": note}})
            return self.get(approval_id)
        content = self.content(approval_id)
        # Claimed by compare-and-set: from pending, or (a person finishing what a killed Warden
        # left) from the very `approving` state it saw, so two answers never both carry it out.
        again = record.status == "approving"
        self._move(record, "approving", answered, answered_at=record.answered_at if again else None)
        return self._carry_out(self.get(approval_id), content, actor, again=again)

    def _move(self, record: ApprovalRecord, to: str, changes: Mapping[str, object], *,
              answered_at: datetime | None = None, audit: Mapping[str, Any] | None = None) -> None:
        """Move `record` to status `to` by compare-and-set, with its `audit` event (the keywords
        of AuditLog.record) in the same transaction: an answer is never said failed while done."""
        with self._registry.transaction() as tx:
            moved = tx.approvals.move(record.id, record.status, {"status": to, **changes}, answered_at=answered_at)
            if moved and audit is not None:
                self._audit.record(**audit, tx=tx)
        if not moved:
            now = self.get(record.id)
            raise Conflict(f"{record.id} was answered meanwhile: it is {self.status(now)}"
                           + (f" (by {now.answered_by})" if now.answered_by else ""), rule="approval.raced")

    def _carry_out(self, record: ApprovalRecord, content: bytes | None, actor: str, *,
                   again: bool = False) -> ApprovalRecord:
        executor = self._executors.get(record.op)
        if again and executor == self._file_op:
            executor = functools.partial(self._file_op, again=True)
        try:
            if executor is None:
                raise Conflict(f"Warden here cannot carry out {record.op!r} requests; answer it where it was made")
            if record.digest is not None and (content is None or content_digest(content) != record.digest):
                raise Conflict(f"the stored content of {record.id} does not match its hash; it is not written")
            if self._before is not None:
                self._before(self._workspaces.get(record.workspace),
                             f"before approved {record.op} {record.path} ({record.id})", actor)
            outcome = dict(executor(record, content))
        except WardenError as exc:
            self._move(record, "failed", {"outcome": {"error": exc.message, "code": exc.code}}, audit={
                "actor": actor, "action": "approval.approve", "target": record.id, "decision": "allow",
                "rule": "approval.approved", "result": exc.code,
                "detail": {"workspace": record.workspace, "op": record.op, "path": record.path,
                           "requester": record.requester, "error": exc.message}})
            exc.message = f"{record.id} was approved but carrying it out failed: {exc.message}"
            exc.args = (exc.message,)
            raise
        try:
            self._move(record, "approved", {"outcome": outcome}, audit={
                "actor": actor, "action": "approval.approve", "target": record.id, "decision": "allow",
                "rule": "approval.approved", "result": "ok",
                "detail": {"workspace": record.workspace, "op": record.op, "path": record.path,
                           "requester": record.requester, "sha256": record.digest, **outcome}})
        except WardenError as exc:
            if exc.code == "conflict":
                raise
            # Carried out already (a full disk took only its record, which stays `approving`):
            # saying "failed" was false, and the person would answer it again.
            unaudited(f"{record.id} was carried out (its answer is not recorded either)", exc.message)
        return self.get(record.id)

    # -- carrying out file operations ------------------------------------------------------
    def _requester(self, record: ApprovalRecord) -> tuple[WorkspaceRecord, Principal]:
        """The requesting grant as it is now: alive and still allowed to write in that workspace."""
        from warden.services.auth import Principal

        try:
            chain = tuple(self._grants.chain(record.accessor))
        except NotFound:
            chain = ()
        workspace = self._workspaces.get(record.workspace)
        if workspace.id != record.workspace_id:
            raise Conflict(f"workspace {record.workspace} was destroyed and made again since {record.id} was asked")
        now = self._clock()
        life = alive(chain, now) if chain else None
        if life is None or not life.allowed:
            raise Denied(f"the grant that asked ({record.accessor}) is no longer live; nothing was done",
                         rule=life.rule if life else "grant.gone")
        allowed = decide(chain, now, workspace_id=workspace.id, permission="write")
        if not allowed.allowed:
            raise Denied(f"the grant that asked ({record.accessor}) may no longer write there: {allowed.reason}",
                         rule=allowed.rule)
        return workspace, Principal(bot=record.bot, kind="grant", chain=chain)

    def _file_op(self, record: ApprovalRecord, content: bytes | None, *, again: bool = False) -> Mapping[str, Any]:
        """Carry out an approved file operation. `again`: answered before and left `approving`
        (a killed Warden, or a record write that failed after the operation on a full disk), so
        it may be done already: a delete whose path is gone, or a move whose file is at its
        destination, is said done, not redone and refused as "not found" (a write or a mkdir is
        the same done twice)."""
        from warden.services.auth import zone_scope_of

        workspace, principal = self._requester(record)
        scope = zone_scope_of(principal, lambda: self._zones_of(workspace))

        def exactly_this(request: ApprovalRequest) -> bool | str:
            # The answer covers this one operation on this one path, nothing it was not asked.
            return (request.op == record.op and request.path == record.path
                    and request.destination == record.destination and f"approval {record.id}")

        files = self._files(workspace, actor=record.requester, approver=exactly_this, scope=scope)
        if record.op == "write":
            assert content is not None
            return {"size": files.write_bytes(record.path, content)}
        if record.op == "mkdir":
            return {"created": files.mkdir(record.path)}
        if record.op == "move":
            if record.destination is None:
                raise Conflict(f"{record.id} is a move without a destination; nothing was done")
            pinned = record.detail.get("source_sha256")
            if (again and isinstance(pinned, str) and not files.exists(record.path)
                    and files.exists(record.destination)
                    and content_digest(files.read_bytes(record.destination)) == pinned):
                return {"moved": "file", "destination": record.destination, "done_before": True}
            if not isinstance(pinned, str):
                raise Conflict(f"{record.id} is a move without the file it asked to move; nothing was moved",
                               rule="approval.changed")
            # Checked and placed in one step, as a new file: the bot's process may hold the asked
            # inode open for writing (or swap the file between a check and a rename).
            return {"moved": files.move(record.path, record.destination, sha256=pinned),
                    "destination": record.destination}
        if again and not files.exists(record.path):
            return {"deleted": None, "done_before": True}
        kind = files.delete(record.path, recursive=bool(record.detail.get("recursive")))
        return {"deleted": kind}
