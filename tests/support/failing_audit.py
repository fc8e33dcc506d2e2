"""An audit log whose rows fail, as on a full disk, for the actions a test names: a fake of our
own port (AuditLog.record) for the services' unit tests; the real full disk is in
tests/interfaces/test_full_disk.py."""

from __future__ import annotations

import pytest

from warden.core.errors import Unavailable
from warden.services.audit import AuditLog


def failing_rows(monkeypatch: pytest.MonkeyPatch, audit: AuditLog, *actions: str) -> set[str]:
    """Make `audit.record` raise Unavailable (no space left) for `actions`; the set returned is
    the one it checks, for the test to change as it goes."""
    failing = set(actions)
    record = audit.record

    def fail_some(**event: object) -> object:
        if event["action"] in failing:
            raise Unavailable("no space left on the device; free some space")
        return record(**event)  # type: ignore[arg-type]

    monkeypatch.setattr(audit, "record", fail_some)
    return failing
