"""The approvals service on a real registry and workspace, with a clock moved by hand: expiry,
the per-bot bound, a changed zone at answer time, a half-done approval a person finishes."""

from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.support.clock import Clock
from tests.support.failing_audit import failing_rows
from warden.bootstrap import App, bootstrap
from warden.core.errors import Conflict, Denied, NotFound, Pending, TooLarge, Unavailable

ZONES = "zones:\n  final: {approval: {write: ask, delete: ask}}\n"


@pytest.fixture
def world(tmp_path: Path) -> Iterator[tuple[App, Clock]]:
    home = tmp_path / "home"
    clock = Clock(datetime(2026, 11, 26, 12, 0, tzinfo=UTC))
    app = bootstrap(home, environ={"PATH": os.environ.get("PATH", ""), "WARDEN_HOME": str(home),
                                   "WARDEN_APPROVALS_TTL": "1h", "WARDEN_APPROVALS_MAX_PENDING": "2"},
                    clock=clock)
    record = app.workspaces.create("demo", template="minimal")
    (Path(record.path) / ".warden").mkdir(exist_ok=True)
    (Path(record.path) / ".warden" / "zones.yaml").write_text(ZONES)
    app.grants.register_bot("writer")
    yield app, clock
    app.close()


def _bot_files(app: App) -> tuple[object, str]:
    issued = app.grants.grant("demo", "writer", ["read", "write"])
    principal = app.auth.authenticate(issued.token)
    files = app.files("demo", actor=principal.actor, approver=app.approvals.queue(principal))
    return files, principal.actor


def _ask(files: object, path: str, data: bytes) -> str:
    with pytest.raises(Pending) as waiting:
        files.write_bytes(path, data)  # type: ignore[attr-defined]
    return str(waiting.value.approval["id"])


def test_an_expired_request_is_never_carried_out(world: tuple[App, Clock]) -> None:
    app, clock = world
    files, _ = _bot_files(app)
    approval_id = _ask(files, "/final/a.txt", b"a")
    clock.now += timedelta(hours=1, seconds=1)
    assert app.approvals.view(app.approvals.get(approval_id))["status"] == "expired"
    with pytest.raises(Conflict, match="it is expired"):
        app.approvals.answer(approval_id, approve=True, actor="user")
    root = Path(app.workspaces.get("demo").path)
    assert not (root / "final" / "a.txt").exists()
    assert app.approvals.content(approval_id) is None  # its bytes are not kept past their use
    assert [r.status for r in app.approvals.listed(everything=True)] == ["expired"]


def test_one_bot_keeps_a_bounded_number_waiting(world: tuple[App, Clock]) -> None:
    app, clock = world
    files, _ = _bot_files(app)
    _ask(files, "/final/1", b"1")
    _ask(files, "/final/2", b"2")
    with pytest.raises(TooLarge, match=r"approvals\.max_pending"):
        files.write_bytes("/final/3", b"3")  # type: ignore[attr-defined]
    clock.now += timedelta(hours=2)  # the two expire: room again
    _ask(files, "/final/4", b"4")


def test_a_zone_made_stricter_before_the_answer_wins(world: tuple[App, Clock]) -> None:
    app, _ = world
    files, _ = _bot_files(app)
    approval_id = _ask(files, "/final/b.txt", b"b")
    root = Path(app.workspaces.get("demo").path)
    (root / ".warden" / "zones.yaml").write_text("zones:\n  final: {mode: ro}\n")
    with pytest.raises(Denied, match="was approved but carrying it out failed"):
        app.approvals.answer(approval_id, approve=True, actor="user")
    assert not (root / "final" / "b.txt").exists()
    assert app.approvals.get(approval_id).status == "failed"


def test_a_person_finishes_an_approval_a_killed_warden_left_half_done(world: tuple[App, Clock]) -> None:
    app, clock = world
    files, _ = _bot_files(app)
    approval_id = _ask(files, "/final/c.txt", b"c")
    record = app.approvals.get(approval_id)
    with app.registry.transaction() as tx:  # as a Warden killed between the two writes leaves it
        assert tx.approvals.move(approval_id, "pending", {"status": "approving", "answered_by": "user",
                                                        "answered_at": clock.now})
    assert app.approvals.get(approval_id).status == "approving" and record.status == "pending"
    # While it may still be in progress elsewhere, nobody carries it out a second time.
    with pytest.raises(Conflict, match="is being carried out"):
        app.approvals.answer(approval_id, approve=True, actor="user")
    clock.now += timedelta(minutes=6)
    done = app.approvals.answer(approval_id, approve=True, actor="user")
    assert done.status == "approved"
    assert (Path(app.workspaces.get("demo").path) / "final" / "c.txt").read_bytes() == b"c"


def test_tampered_content_is_not_written(world: tuple[App, Clock]) -> None:
    app, _ = world
    files, _ = _bot_files(app)
    approval_id = _ask(files, "/final/d.txt", b"what was asked")
    with app.registry.transaction() as tx:
        tx.approvals._sql.execute("UPDATE approvals SET content = :c WHERE id = :i",  # type: ignore[attr-defined]
                                  {"c": b"something else", "i": approval_id})
    with pytest.raises(Conflict, match="does not match its hash"):
        app.approvals.answer(approval_id, approve=True, actor="user")
    assert not (Path(app.workspaces.get("demo").path) / "final" / "d.txt").exists()


def test_default_zones_are_open_to_a_bot_and_a_child_gets_only_what_it_declares(world: tuple[App, Clock]) -> None:
    app, _ = world
    plain = app.workspaces.create("plain", template="minimal")
    issued = app.grants.grant("plain", "writer", ["read", "write", "admin"])
    principal = app.auth.authenticate(issued.token)
    files = app.files("plain", actor=principal.actor, approver=app.approvals.queue(principal),
                      scope=app.auth.zone_scope(principal, app.sandbox_paths.zones(plain)))
    assert files.write_bytes("/workspace/notes.md", b"n") == 1  # no one needs asking in cache/workspace
    assert files.write_bytes("/cache/page.html", b"p") == 1
    app.grants.register_bot("helper")
    chain = app.grants.chain(issued.grant.accessor)
    nothing = app.grants.grant("plain", "helper", ["read"], parent=chain)
    assert nothing.grant.zones == ()
    drafts = app.grants.grant("plain", "helper", ["read"], zones=["workspace:ro"], parent=chain)
    child = app.auth.authenticate(drafts.token)
    scope = app.auth.zone_scope(child, app.sandbox_paths.zones(plain))
    assert scope is not None and list(scope) == ["workspace"] and scope["workspace"].mode == "ro"
    assert app.auth.zone_scope(app.auth.authenticate(nothing.token), app.sandbox_paths.zones(plain)) == {}


def test_a_destroyed_workspace_takes_its_waiting_requests_with_it(world: tuple[App, Clock]) -> None:
    app, _ = world
    files, _ = _bot_files(app)
    approval_id = _ask(files, "/final/e.txt", b"e")
    app.workspaces.destroy("demo", archive=False)
    assert app.approvals.listed(everything=True) == []
    with pytest.raises(NotFound):
        app.approvals.get(approval_id)


def test_an_approved_move_moves_only_the_file_that_was_asked(world: tuple[App, Clock]) -> None:
    app, _ = world
    root = Path(app.workspaces.get("demo").path)
    (root / ".warden" / "zones.yaml").write_text(
        "zones:\n  drafts: {approval: {write: preApproved, delete: preApproved}}\n"
        "  final: {approval: {write: ask, delete: ask}}\n"
        "  locked: {path: /docs/locked, mode: ro}\n")
    files, _ = _bot_files(app)
    files.write_bytes("/drafts/a.txt", b"as asked")  # type: ignore[attr-defined]
    with pytest.raises(Pending) as waiting:
        files.move("/drafts/a.txt", "/final/a.txt")  # type: ignore[attr-defined]
    approval_id = str(waiting.value.approval["id"])
    files.delete("/drafts/a.txt")  # type: ignore[attr-defined]
    files.write_bytes("/drafts/a.txt", b"something else")  # type: ignore[attr-defined]
    with pytest.raises(Conflict, match="no longer the file that was asked"):
        app.approvals.answer(approval_id, approve=True, actor="user")
    assert not (root / "final" / "a.txt").exists()
    # A folder does not wait for approval to move (its contents could change meanwhile) …
    files.write_bytes("/drafts/f/x.txt", b"x")  # type: ignore[attr-defined]
    with pytest.raises(Denied, match="only a file's move can wait"):
        files.move("/drafts/f", "/final/f")  # type: ignore[attr-defined]
    # … nor fill a zone below its destination that it could not write to itself.
    files.write_bytes("/drafts/m/locked/evil.txt", b"e")  # type: ignore[attr-defined]
    with pytest.raises(Denied, match="it would fill /docs/locked"):
        files.move("/drafts/m", "/docs")  # type: ignore[attr-defined]
    assert not (root / "docs").exists()


def test_a_request_or_an_answer_is_stored_only_with_its_audit_row(world: tuple[App, Clock],
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The request stored, then its audit row failed (a full disk): its bot was told the write
    failed while it waited in the person's queue; a denial written, its row failed: the person
    was told it failed. Each now lands with its row or not at all."""
    app, _ = world
    files, _ = _bot_files(app)
    failing = failing_rows(monkeypatch, app.audit, "approval.request")
    with pytest.raises(Unavailable):
        files.write_bytes("/final/a.txt", b"a")  # type: ignore[attr-defined]
    assert app.approvals.listed(everything=True) == []
    failing.clear()
    approval_id = _ask(files, "/final/a.txt", b"a")
    failing.add("approval.deny")
    with pytest.raises(Unavailable):
        app.approvals.answer(approval_id, approve=False, actor="user")
    assert app.approvals.get(approval_id).status == "pending"
    failing.clear()
    assert app.approvals.answer(approval_id, approve=False, actor="user").status == "denied"


def test_an_expiry_is_written_only_with_its_audit_row(world: tuple[App, Clock],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Requests marked expired (their bytes dropped) in one transaction and audited after it: a
    row that failed left them expired with no trace in the log."""
    app, clock = world
    files, _ = _bot_files(app)
    approval_id = _ask(files, "/final/a.txt", b"a")
    clock.now += timedelta(hours=1, seconds=1)
    failing = failing_rows(monkeypatch, app.audit, "approval.expire")
    with pytest.raises(Unavailable):
        app.approvals.expire()
    assert app.approvals.get(approval_id).status == "pending"
    failing.clear()
    assert app.approvals.expire() == [approval_id]
    assert app.approvals.get(approval_id).status == "expired"


def test_an_approval_done_but_not_recorded_is_said_done_when_answered_again(
        world: tuple[App, Clock], monkeypatch: pytest.MonkeyPatch) -> None:
    """A delete (and a move) carried out, then the record of its answer failed on a full disk:
    it stayed `approving`, and the person's second answer redid it: "failed: not found" for what
    had been done. Answered again, it is found done and recorded approved."""
    app, clock = world
    root = Path(app.workspaces.get("demo").path)
    (root / ".warden" / "zones.yaml").write_text(
        "zones:\n  drafts: {approval: {write: preApproved, delete: preApproved}}\n"
        "  final: {approval: {write: ask, delete: ask}}\n")
    (root / "final").mkdir(exist_ok=True)
    (root / "final" / "old.txt").write_bytes(b"old")
    files, _ = _bot_files(app)
    files.write_bytes("/drafts/a.txt", b"as asked")  # type: ignore[attr-defined]
    with pytest.raises(Pending) as waiting:
        files.delete("/final/old.txt")  # type: ignore[attr-defined]
    deleted = str(waiting.value.approval["id"])
    with pytest.raises(Pending) as waiting:
        files.move("/drafts/a.txt", "/final/a.txt")  # type: ignore[attr-defined]
    moved = str(waiting.value.approval["id"])
    failing = failing_rows(monkeypatch, app.audit, "approval.approve")
    for approval_id in (deleted, moved):
        assert app.approvals.answer(approval_id, approve=True, actor="user").status == "approving"
    assert not (root / "final" / "old.txt").exists() and (root / "final" / "a.txt").read_bytes() == b"as asked"
    failing.clear()
    clock.now += timedelta(minutes=6)  # no longer possibly in progress elsewhere
    for approval_id in (deleted, moved):
        done = app.approvals.answer(approval_id, approve=True, actor="user")
        assert done.status == "approved", done
        assert done.outcome["done_before"] is True
    assert (root / "final" / "a.txt").read_bytes() == b"as asked"
