"""FileService.move on a real workspace: the policy decides removing the source and writing the
destination, an `ask` on either becomes one approval that Warden carries out once approved,
and every move leaves one audit event."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from warden.bootstrap import App, bootstrap
from warden.core.errors import Conflict, Denied, Pending, TooLarge
from warden.services.files import FileService

ZONES = ("zones:\n"
         "  drafts: {mode: rw, approval: {write: preApproved, delete: preApproved}}\n"
         "  final: {mode: rw, approval: {write: ask, delete: ask}}\n"
         "  input: {mode: ro}\n"
         "  keep: {mode: rw, approval: {write: preApproved, delete: blocked}}\n")


@pytest.fixture
def app(tmp_path: Path) -> Iterator[App]:
    home = tmp_path / "home"
    app = bootstrap(home, environ={"PATH": os.environ.get("PATH", ""), "WARDEN_HOME": str(home)})
    record = app.workspaces.create("demo", template="minimal")
    root = Path(record.path)
    (root / ".warden").mkdir(exist_ok=True)
    (root / ".warden" / "zones.yaml").write_text(ZONES)
    for zone in ("drafts", "final", "input", "keep"):
        (root / zone).mkdir()
    app.grants.register_bot("writer")
    yield app
    app.close()


def _bot(app: App, zones: list[str] | None = None) -> FileService:
    issued = app.grants.grant("demo", "writer", ["read", "write"], zones=zones)
    principal = app.auth.authenticate(issued.token)
    scope = app.auth.zone_scope(principal, lambda: app.sandbox_paths.zones(app.workspaces.get("demo")))
    return app.files("demo", actor=principal.actor, approver=app.approvals.queue(principal), scope=scope)


def _root(app: App) -> Path:
    return Path(app.workspaces.get("demo").path)


def test_a_move_between_open_folders_is_done_and_audited(app: App) -> None:
    files = _bot(app)
    files.write_text("/drafts/a.md", "hello")
    assert files.move("/drafts/a.md", "/drafts/sub/b.md") == "file"
    assert (_root(app) / "drafts" / "sub" / "b.md").read_text() == "hello"
    event = next(e for e in app.audit.list(limit=50) if e.action == "fs.move")
    assert event.target == "demo:/drafts/a.md" and event.result == "ok"
    assert event.detail["destination"] == "/drafts/sub/b.md"


@pytest.mark.parametrize(("source", "destination", "rule"), [
    ("/input/x", "/drafts/x", "zone input is ro"),        # removing from a read-only folder
    ("/drafts/x", "/input/x", "zone input is ro"),        # writing into one
    ("/keep/x", "/drafts/x", "zone keep blocks delete"),  # a folder that blocks deletes
    ("/drafts/x", "/.warden/zones.yaml", "protected"),    # Warden's own files
    ("/drafts/x", "/.git/hooks/pre-commit", "protected"),
])
def test_the_policy_decides_both_ends(app: App, source: str, destination: str, rule: str) -> None:
    root = _root(app)
    (root / source.lstrip("/")).write_text("x")
    with pytest.raises(Denied, match=rule):
        _bot(app).move(source, destination)
    assert (root / source.lstrip("/")).read_text() == "x"


def test_a_grant_limited_to_some_folders_moves_only_within_them(app: App) -> None:
    files = _bot(app, zones=["drafts"])
    files.write_text("/drafts/a", "a")
    with pytest.raises(Denied, match="no granted zone"):
        files.move("/drafts/a", "/outside-of-zones/a")
    with pytest.raises(Denied):
        files.move("/drafts/a", "/final/a")


def test_an_ask_folder_makes_one_approval_carried_out_once_approved(app: App) -> None:
    files = _bot(app)
    files.write_text("/drafts/report.md", "v1")
    with pytest.raises(Pending) as waiting:
        files.move("/drafts/report.md", "/final/report.md")
    approval = waiting.value.approval
    assert approval["operation"] == "move" and approval["destination"] == "/final/report.md"
    assert "waits for a person's approval" in waiting.value.message
    root = _root(app)
    assert (root / "drafts" / "report.md").exists() and not (root / "final" / "report.md").exists()
    done = app.approvals.answer(str(approval["id"]), approve=True, actor="user")
    assert done.status == "approved" and done.outcome["moved"] == "file"
    assert (root / "final" / "report.md").read_text() == "v1" and not (root / "drafts" / "report.md").exists()
    with pytest.raises(Conflict):
        app.approvals.answer(str(approval["id"]), approve=True, actor="user")  # once only


def test_a_denied_move_does_nothing(app: App) -> None:
    files = _bot(app)
    files.write_text("/drafts/a", "a")
    with pytest.raises(Pending) as waiting:
        files.move("/drafts/a", "/final/a")
    app.approvals.answer(str(waiting.value.approval["id"]), approve=False, actor="user")
    assert (_root(app) / "drafts" / "a").exists() and not (_root(app) / "final" / "a").exists()


def test_an_approved_move_onto_a_name_taken_meanwhile_fails_without_replacing(app: App) -> None:
    files = _bot(app)
    files.write_text("/drafts/a", "mine")
    with pytest.raises(Pending) as waiting:
        files.move("/drafts/a", "/final/a")
    (_root(app) / "final" / "a").write_text("person's")
    with pytest.raises(Conflict, match="already exists"):
        app.approvals.answer(str(waiting.value.approval["id"]), approve=True, actor="user")
    assert (_root(app) / "final" / "a").read_text() == "person's"


def test_an_approved_move_onto_a_link_the_bot_made_keeps_the_persons_file(app: App) -> None:
    """In a folder whose deletes ask, a bot's run may make links (Landlock there refuses removes
    only). Its link at a move's destination, to a copy of its own in a folder where it may delete,
    was taken for the move's own copy: approving the move removed the person's file and left its
    bytes only in the bot's copy. The move is refused; the person's file stays."""
    root = _root(app)
    (root / ".warden" / "zones.yaml").write_text(ZONES + "  notes: {mode: rw, approval: {write: preApproved, "
                                                 "delete: ask}}\n")
    (root / "notes").mkdir()
    (root / "notes" / "report.md").write_text("the person's")
    files = _bot(app)
    with pytest.raises(Pending) as waiting:
        files.move("/notes/report.md", "/notes/final.md")
    files.write_text("/drafts/copy", "the person's")  # the bot's copy, where it may delete
    (root / "notes" / "final.md").symlink_to("../drafts/copy")  # as its run may make it
    with pytest.raises(Conflict, match="already exists"):
        app.approvals.answer(str(waiting.value.approval["id"]), approve=True, actor="user")
    assert (root / "notes" / "report.md").read_text() == "the person's"


def test_the_local_person_moves_freely_in_ask_folders(app: App) -> None:
    from warden.services.files import approve_local_user

    files = app.files("demo", approver=approve_local_user)
    files.write_text("/final/a", "a")
    assert files.move("/final/a", "/final/b") == "file"


def test_a_workspace_at_its_file_limit_still_renames(app: App) -> None:
    """A move adds no file and no byte: at `workspace.max_files` a new file is refused, a move is not."""
    files = _bot(app)
    files.write_text("/drafts/a", "a")
    held = app.quota.usage(app.workspaces.get("demo").path).files
    limit = max(held, 100)
    for n in range(limit - held):
        files.write_text(f"/drafts/fill/{n}", "")
    capped = bootstrap(app.home.root, environ={**app.environ, "WARDEN_WORKSPACE_MAX_FILES": str(limit)})
    try:
        issued = capped.grants.grant("demo", "writer", ["read", "write"])
        principal = capped.auth.authenticate(issued.token)
        bot = capped.files("demo", actor=principal.actor, approver=capped.approvals.queue(principal))
        with pytest.raises(TooLarge, match=r"workspace\.max_files"):
            bot.write_text("/drafts/one-more", "x")
        assert bot.move("/drafts/a", "/drafts/b") == "file"
    finally:
        capped.close()
    assert (_root(app) / "drafts" / "b").read_text() == "a"
