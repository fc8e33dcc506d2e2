"""The janitor's decisions (pure): which workspaces are idle, which expired, what to do with each.

Seed 000's cleanup rules as settings. A user workspace unused for `idle_after` is idle (said,
changed in nothing) and archived after `idle_archive_after`; a temporary one is destroyed once
its own expiry or `temporary_ttl` after its last use has passed; a workspace a bot made is
archived `bot_ttl` after its last use (an archive can be unarchived). A workspace with something
running (a run in progress, a background process) is busy and left alone, as is one being made,
already archived or broken. "Use" is the later of its creation and its last run or change.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from warden.core.workspaces import WorkspaceRecord

__all__ = ["Chore", "JanitorRules", "plan"]

Action = Literal["archive", "destroy", "idle"]


@dataclass(frozen=True)
class JanitorRules:
    idle_after: timedelta
    idle_archive_after: timedelta
    temporary_ttl: timedelta
    bot_ttl: timedelta


@dataclass(frozen=True)
class Chore:
    """One thing to do to one workspace, and why (the rule and since when)."""

    workspace: str
    record_id: str
    action: Action
    reason: str
    since: str

    def to_json(self) -> dict[str, object]:
        return {"workspace": self.workspace, "action": self.action, "reason": self.reason, "since": self.since}


def _when(text: str | None) -> datetime | None:
    try:
        return datetime.fromisoformat(text) if text else None
    except ValueError:
        return None


def plan(records: Iterable[WorkspaceRecord], now: datetime, rules: JanitorRules,
         busy: Collection[str] = ()) -> list[Chore]:
    chores: list[Chore] = []
    for record in records:
        if record.status not in ("ready", "suspended") or record.name in busy:
            continue
        created, touched = _when(record.created_at), _when(record.last_accessed)
        used = max(t for t in (created, touched) if t is not None) if (created or touched) else None
        if used is None:
            continue
        expires = _when(record.expires_at)
        if record.meta.get("adopted"):
            # The person's own folder, adopted in place: never archived or destroyed, only said idle.
            if now >= used + rules.idle_after:
                chores.append(Chore(record.name, record.id, "idle", "cleanup.idle_after",
                                    (used + rules.idle_after).isoformat()))
            continue
        if record.type == "temporary":
            ends = expires or used + rules.temporary_ttl
            if now >= ends:
                chores.append(Chore(record.name, record.id, "destroy",
                                    "expired" if expires else "cleanup.temporary_ttl", ends.isoformat()))
            continue
        if expires is not None and now >= expires:
            chores.append(Chore(record.name, record.id, "archive", "expired", expires.isoformat()))
        elif record.type == "bot" and now >= used + rules.bot_ttl:
            chores.append(Chore(record.name, record.id, "archive", "cleanup.bot_ttl",
                                (used + rules.bot_ttl).isoformat()))
        elif now >= used + rules.idle_archive_after:
            chores.append(Chore(record.name, record.id, "archive", "cleanup.idle_archive_after",
                                (used + rules.idle_archive_after).isoformat()))
        elif now >= used + rules.idle_after:
            chores.append(Chore(record.name, record.id, "idle", "cleanup.idle_after",
                                (used + rules.idle_after).isoformat()))
    return sorted(chores, key=lambda c: (c.since, c.workspace))
