"""Foreign errors are classified by cause: a locked registry, a full disk; a refusal keeps its cause."""

from __future__ import annotations

import errno
import sqlite3

import pytest

from warden.core.errors import Denied, Locked, Refused, Unavailable, classify
from warden.core.limits import Limits, apply_overrides


def test_locked_sqlite_is_locked() -> None:
    mapped = classify(sqlite3.OperationalError("database is locked"), "/h/warden.db")
    assert isinstance(mapped, Locked) and mapped.code == "locked" and "/h/warden.db" in mapped.message


def test_full_disk_is_unavailable_naming_the_place() -> None:
    mapped = classify(OSError(errno.ENOSPC, "No space left on device", "/h/layers/x"))
    assert isinstance(mapped, Unavailable)
    assert mapped.message == "no space left on /h/layers/x; free some space"
    sqlite_full = classify(sqlite3.OperationalError("database or disk is full"), "/h/warden.db")
    assert isinstance(sqlite_full, Unavailable) and "no space left on /h/warden.db" in sqlite_full.message


def test_other_errors_are_left_alone() -> None:
    assert classify(sqlite3.OperationalError("no such table: x")) is None
    assert classify(OSError(errno.EIO, "input/output error")) is None


@pytest.mark.parametrize("kwargs", [{"cpu": 10**20}, {"pids": 10**20}, {"memory": "99999999999G"},
                                    {"memory": 10**30}])
def test_limits_beyond_the_kernel_types_are_invalid(kwargs: dict[str, object]) -> None:
    from warden.core.errors import InvalidInput

    with pytest.raises(InvalidInput, match="above the maximum"):
        apply_overrides(Limits(), **kwargs)  # type: ignore[arg-type]


def test_a_permission_error_is_one_line_of_denied() -> None:
    from warden.core.errors import Denied, classify

    mapped = classify(PermissionError(13, "Permission denied", "/root/x.tgz"))
    assert isinstance(mapped, Denied) and "/root/x.tgz" in mapped.message


def test_a_refusal_is_its_reason_with_exit_status_126() -> None:
    reason = Denied("curl is not an allowed command", rule="sandbox.allowed_commands")
    reason.extra = "kept"  # type: ignore[attr-defined]
    refused = Refused.of(reason)
    assert isinstance(refused, Denied) and isinstance(refused, Refused)
    assert (refused.code, refused.message, refused.rule, refused.exit_status) == (
        "denied", "curl is not an allowed command", "sandbox.allowed_commands", 126)
    assert refused.extra == "kept" and str(refused) == str(reason)  # type: ignore[attr-defined]
    assert Refused.of(refused) is refused
    assert type(Refused.of(Denied("again"))) is type(refused)  # one refused class per reason class
    assert not isinstance(Refused.of(Locked("held")), Denied)


@pytest.mark.parametrize("text", [
    "deadlock detected\nDETAIL:  Process 32013 waits for ShareLock on transaction 820",
    "could not serialize access due to concurrent update"])
def test_a_transaction_postgresql_undid_is_locked_with_nothing_written(text: str) -> None:
    mapped = classify(Exception(text))
    assert isinstance(mapped, Locked) and mapped.rule == "registry.deadlock"
    assert "nothing was changed; try again" in mapped.message and "\n" not in mapped.message
