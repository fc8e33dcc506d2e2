"""FileService: decide with the policy, ask for approval, open safely, audit every operation."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from warden.bootstrap import App
from warden.core.errors import Conflict, Denied, InvalidInput, TooLarge
from warden.core.workspaces import WorkspaceRecord
from warden.core.zones import parse_declaration, restrict
from warden.services.files import ApprovalRequest, approve_local_user

ZONES_YAML = """\
zones:
  data: {mode: ro}
  drafts:
    mode: rw
    approval: {write: preApproved, delete: preApproved}
  final:
    mode: rw
    approval: {write: ask, delete: blocked}
"""


@pytest.fixture
def record(tmp_path: Path) -> WorkspaceRecord:
    folder = tmp_path / "workspaces" / "demo"
    folder.mkdir(parents=True)
    return WorkspaceRecord(id="ws_1", name="demo", path=str(folder), type="user", status="ready",
                           created_at="2026-01-01T00:00:00+00:00", last_accessed="2026-01-01T00:00:00+00:00")


def with_zones(record: WorkspaceRecord) -> Path:
    root = Path(record.path)
    (root / ".warden").mkdir()
    (root / ".warden" / "zones.yaml").write_text(ZONES_YAML)
    for name in ("data", "drafts", "final"):
        (root / name).mkdir()
    (root / "data" / "in.csv").write_text("a,b\n")
    return root


def last_event(app: App) -> dict[str, object]:
    event = app.audit.list(limit=1)[0]
    return {"actor": event.actor, "action": event.action, "target": event.target,
            "decision": event.decision, "rule": event.rule, "result": event.result}


def test_owner_round_trip_is_audited_with_the_rule(app: App, record: WorkspaceRecord) -> None:
    files = app.files(record, approver=approve_local_user)
    assert files.write_text("notes/a.txt", "hi") == 2
    assert last_event(app) == {"actor": "user", "action": "fs.write", "target": "demo:/notes/a.txt",
                               "decision": "allow", "rule": "allow: workspace owner (rw)", "result": "ok"}
    assert files.read_text("/notes/a.txt") == "hi"
    assert last_event(app)["action"] == "fs.read"
    assert [e.name for e in files.list("/")] == ["notes"]
    assert files.exists("/notes/a.txt") and files.stat("/notes").type == "dir"
    files.mkdir("/x/y")
    assert files.delete("/x", recursive=True) == "dir"
    actions = [e.action for e in app.audit.list(limit=20)]
    assert actions == ["fs.write", "fs.read", "fs.list", "fs.exists", "fs.stat", "fs.mkdir", "fs.delete"]


def test_refusals_are_audited_and_change_nothing(app: App, record: WorkspaceRecord) -> None:
    files = app.files(record, approver=approve_local_user)
    with pytest.raises(Denied) as info:
        files.write_text("/.warden/sandbox.json", '{"allowed_paths": ["/"]}')
    assert info.value.rule == "deny: protected workspace file /.warden"
    assert not (Path(record.path) / ".warden").exists()
    assert last_event(app) == {"actor": "user", "action": "fs.write", "target": "demo:/.warden/sandbox.json",
                               "decision": "deny", "rule": "deny: protected workspace file /.warden",
                               "result": "denied"}
    with pytest.raises(InvalidInput):
        files.read_bytes("/../outside")
    assert last_event(app)["result"] == "invalid"
    os.symlink("/etc", Path(record.path) / "etc-link")
    with pytest.raises(Denied):
        files.read_bytes("/etc-link/passwd")
    assert last_event(app)["rule"] == "deny: symbolic link"


def test_zone_modes_approvals_and_blocks(app: App, record: WorkspaceRecord) -> None:
    root = with_zones(record)
    bot = app.files(record, actor="bot:x")  # no approver: nobody to ask
    assert bot.read_text("/data/in.csv") == "a,b\n"
    with pytest.raises(Denied, match="zone data is ro"):
        bot.write_text("/data/in.csv", "changed")
    assert bot.write_text("/drafts/d.md", "draft") == 5  # preApproved
    with pytest.raises(Denied, match="needs approval"):
        bot.write_text("/final/report.md", "final")
    assert not (root / "final" / "report.md").exists()
    assert last_event(app)["rule"] == "deny: zone final (rw) needs approval"

    asked: list[ApprovalRequest] = []
    person = app.files(record, actor="user", approver=lambda req: asked.append(req) or True)
    person.write_text("/final/report.md", "final")
    assert asked[0].op == "write" and asked[0].path == "/final/report.md" and asked[0].zone == "final"
    assert last_event(app)["rule"] == "allow: zone final (rw); approved by user"
    with pytest.raises(Denied, match="blocks delete"):
        person.delete("/final/report.md")

    refusing = app.files(record, actor="user", approver=lambda req: False)
    with pytest.raises(Denied, match="not approved"):
        refusing.write_text("/final/other.md", "x")


def test_a_restricted_actor_sees_and_touches_only_its_zones(app: App, record: WorkspaceRecord) -> None:
    root = with_zones(record)
    (root / "private").mkdir()
    zones = app.sandbox_paths.zones(record)
    scope = restrict(zones, parse_declaration(["drafts"]))
    child = app.files(record, actor="bot:child", scope=scope)
    assert [e.name for e in child.list("/")] == ["drafts"]
    with pytest.raises(Denied, match="no granted zone"):
        child.read_text("/data/in.csv")
    with pytest.raises(Denied):
        child.list("/private")
    nobody = app.files(record, actor="bot:none", scope=restrict(zones, None))
    assert nobody.list("/") == []


def test_lists_are_reloaded_when_their_file_changes(app: App, record: WorkspaceRecord) -> None:
    files = app.files(record, approver=approve_local_user)
    files.write_text("/secret/k", "v")
    app.sandbox_paths.remove(str(Path(record.path) / "secret"), workspace=record)
    with pytest.raises(Denied) as info:
        files.read_text("/secret/k")
    assert info.value.rule == f"deny: workspace denied_paths {record.path}/secret"
    app.sandbox_paths.add(str(Path(record.path) / "secret"), workspace=record)
    assert files.read_text("/secret/k") == "v"


def test_size_limit_is_refused_before_anything_lands(app: App, record: WorkspaceRecord) -> None:
    files = app.files(record, approver=approve_local_user)
    files.max_bytes = 10
    with pytest.raises(TooLarge):
        files.write_bytes("/big", b"x" * 11)
    assert not list(Path(record.path).iterdir())
    assert last_event(app)["rule"] == "deny: size over sandbox.max_file_size_mb"


def test_a_workspace_being_created_or_archived_is_not_touched(app: App, record: WorkspaceRecord) -> None:
    from dataclasses import replace

    for status in ("creating", "archived"):
        with pytest.raises(Conflict):
            app.files(replace(record, status=status)).read_bytes("/x")


def test_forced_walk_behaves_the_same(app: App, record: WorkspaceRecord) -> None:
    from warden.adapters.gitguard import HostGitDefuser
    from warden.adapters.safefs import HostSafeRoots
    from warden.services.files import FileService

    files = FileService(record, paths=app.sandbox_paths, audit=app.audit, roots=HostSafeRoots(),
                        git=HostGitDefuser(), max_bytes=1 << 20, approver=approve_local_user, use_openat2=False)
    files.write_text("/a/b", "walk")
    assert files.read_text("/a/b") == "walk"
    os.symlink("/etc", Path(record.path) / "l")
    with pytest.raises(Denied):
        files.read_bytes("/l/passwd")
