"""The janitor's plan (pure): an adopted folder is never archived or destroyed, only said idle."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from warden.core.janitor import JanitorRules, plan
from warden.core.workspaces import WorkspaceRecord

RULES = JanitorRules(timedelta(days=1), timedelta(days=10), timedelta(hours=2), timedelta(days=3))
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _record(name: str, **changes: object) -> WorkspaceRecord:
    base = {"id": f"ws_{name}", "name": name, "path": f"/w/{name}", "type": "user", "status": "ready",
            "created_at": T0.isoformat(), "last_accessed": T0.isoformat()}
    return WorkspaceRecord(**{**base, **changes})  # type: ignore[arg-type]


def test_an_adopted_folder_is_only_ever_said_idle() -> None:
    records = [_record("mine", meta={"adopted": True}), _record("made"),
               _record("tmp", type="temporary", meta={"adopted": True})]
    chores = plan(records, T0 + timedelta(days=40), RULES)
    assert sorted((c.workspace, c.action) for c in chores) == [("made", "archive"), ("mine", "idle"), ("tmp", "idle")]
    assert plan(records, T0 + timedelta(hours=1), RULES) == []
