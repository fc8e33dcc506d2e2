"""Approvals (pure): a bot's operation that a zone marks `ask`, kept until a person answers.

A request holds everything needed to carry the operation out later exactly as asked: the
operation (`write`, `mkdir`, `delete`, `move`, `git.push`), the workspace path (and a move's
destination), the bytes of a write with their SHA-256, and who asked (the grant's accessor, so
the grant can be checked again when the answer comes: a revoked or expired grant's request is
not carried out). Its life:

    pending ──approve──▶ approving ──carried out──▶ approved
       │                     └──────failed────────▶ failed
       ├──deny──▶ denied
       └──(expires_at passes)──▶ expired

`approving` is held while Warden carries the operation out, so "approved" is only ever shown
once it is done; every move is compare-and-set on the status. A bot never answers its own
request, and answering over the API needs the `approve` permission on that workspace.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from warden.core.errors import Conflict, Denied, InvalidInput

__all__ = [
    "APPROVAL_ID",
    "OPERATIONS",
    "STATUSES",
    "ApprovalRecord",
    "check_answer",
    "check_approval_id",
    "content_digest",
    "new_approval_id",
    "shown_status",
    "where",
]

OPERATIONS = ("write", "mkdir", "delete", "move", "git.push")
STATUSES = ("pending", "approving", "approved", "denied", "expired", "failed")
# Answered for good: no further move.
FINAL = frozenset({"approved", "denied", "expired", "failed"})
APPROVAL_ID = re.compile(r"^apr_[a-z0-9]{16}$")
_ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789"


def new_approval_id() -> str:
    return "apr_" + "".join(secrets.choice(_ALPHABET) for _ in range(16))


def check_approval_id(value: str) -> str:
    if not APPROVAL_ID.match(value or ""):
        raise InvalidInput(f"bad approval id {value!r}: an id looks like apr_ and 16 letters or digits; "
                           "see `warden approvals`")
    return value


def content_digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class ApprovalRecord:
    """One request for a person's consent and its answer."""

    id: str
    workspace: str
    workspace_id: str
    op: str
    path: str
    requester: str            # the audit actor: bot:NAME@acc_…
    bot: str                  # the requesting bot (never its own approver)
    minter: str               # the bot holding the root of its grant's chain (nor that one)
    accessor: str             # the requesting grant: checked again (alive, still allowed) when answered
    zone: str | None
    rule: str
    created_at: datetime
    expires_at: datetime
    status: str = "pending"
    destination: str | None = None
    digest: str | None = None  # SHA-256 of `content`
    size: int | None = None
    detail: Mapping[str, Any] = field(default_factory=dict)
    answered_by: str | None = None
    answered_at: datetime | None = None
    note: str | None = None
    outcome: Mapping[str, Any] = field(default_factory=dict)

    @property
    def zones(self) -> tuple[str | None, ...]:
        """Every zone whose approval this request asks: its own, then those its operation reaches
        too (a move's destination, the zones beneath a deleted folder). An approver holding
        `approve` over some of them only does not answer it. None: a path in no zone."""
        also = self.detail.get("also_zones")
        extra = [z for z in also if isinstance(z, str) and z != self.zone] if isinstance(also, list) else []
        return (self.zone, *dict.fromkeys(extra))

    def view(self, now: datetime) -> dict[str, Any]:
        """What the person and the bot are shown (never the token hash or the content)."""
        return {"id": self.id, "workspace": self.workspace, "operation": self.op, "path": self.path,
                "destination": self.destination, "zone": self.zone, "bot": self.bot, "requester": self.requester,
                "status": shown_status(self, now), "size": self.size, "sha256": self.digest,
                "rule": self.rule, "created": self.created_at.isoformat(), "expires": self.expires_at.isoformat(),
                "answered_by": self.answered_by,
                "answered_at": self.answered_at.isoformat() if self.answered_at else None,
                "note": self.note, "outcome": dict(self.outcome) or None, "detail": dict(self.detail) or None}


def where(path: str, destination: str | None) -> str:
    """The path a request names, and for a move where it goes: the person approves both."""
    return path if destination is None else f"{path} to {destination}"


def shown_status(record: ApprovalRecord, now: datetime) -> str:
    """The status as of `now`: a pending request past its time is expired even before a sweep writes it."""
    if record.status == "pending" and now >= record.expires_at:
        return "expired"
    return record.status


# How long an approval may be in progress before a person may take it over (its Warden killed).
RESUME_AFTER = timedelta(minutes=5)


def check_answer(record: ApprovalRecord, now: datetime, *, answerer: tuple[str, str] | None,
                 approve: bool) -> None:
    """May this answer be given now? `answerer` is the answering bot and the bot at the root of
    its grant's chain (None: the person, on the CLI). Denied when either is the asking bot or
    the root of its chain (a bot's own request, or one of a grant it minted); Conflict when the
    request is no longer waiting."""
    if answerer is not None and set(answerer) & {record.bot, record.minter}:
        raise Denied(f"bot {answerer[0]} cannot answer {record.id}: it was asked by {record.bot} through a grant "
                     f"minted by {record.minter}; a person or a bot of no part in it must answer",
                     rule="approval.own_request")
    status = shown_status(record, now)
    if status == "pending":
        return
    if (status == "approving" and approve and answerer is None and record.answered_at is not None
            and now - record.answered_at >= RESUME_AFTER):
        return  # a person may finish an approval that a killed Warden left half done
    if status == "approving":
        raise Conflict(f"{record.id} is being carried out (approved by {record.answered_by}); if that Warden was "
                       f"killed, approve it again after {(record.answered_at or now) + RESUME_AFTER:%H:%M:%S} UTC",
                       rule="approval.approving")
    verb = "approve" if approve else "deny"
    raise Conflict(f"cannot {verb} {record.id}: it is {status}"
                   + (f" (answered by {record.answered_by})" if record.answered_by else ""),
                   rule=f"approval.{status}")
