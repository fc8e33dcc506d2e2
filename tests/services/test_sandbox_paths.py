"""The three path lists on disk: seed 004 semantics, no lost updates, merged view, mounts view."""

from __future__ import annotations

import json
import multiprocessing
import os
import time
from pathlib import Path

import pytest

from tests.support.failing_audit import failing_rows
from warden.bootstrap import App, bootstrap
from warden.core.errors import Denied, InvalidInput
from warden.core.workspaces import WorkspaceRecord


@pytest.fixture
def record(tmp_path: Path) -> WorkspaceRecord:
    folder = tmp_path / "ws" / "demo"
    folder.mkdir(parents=True)
    return WorkspaceRecord(id="ws_1", name="demo", path=str(folder), type="user", status="ready",
                           created_at="t", last_accessed="t")


def test_add_and_remove_follow_seed_004(app: App, record: WorkspaceRecord) -> None:
    sp = app.sandbox_paths
    sp.add("/opt/tools", mode="ro")
    assert json.loads(app.home.sandbox_paths.read_text())["allowed_paths"][0]["path"] == "/opt/tools"
    sp.remove("/opt/tools")  # global: denied now, and gone from allowed
    doc = json.loads(app.home.sandbox_paths.read_text())
    assert doc["allowed_paths"] == [] and doc["denied_paths"][0]["path"] == "/opt/tools"
    assert doc["denied_paths"][0]["added_at"].endswith("Z")
    sp.add("/opt/tools")
    doc = json.loads(app.home.sandbox_paths.read_text())
    assert doc["denied_paths"] == [] and doc["allowed_paths"][0]["mode"] == "rw"


def test_levels_go_to_their_own_files_and_default_to_the_narrowest(app: App, record: WorkspaceRecord) -> None:
    sp = app.sandbox_paths
    assert sp.add("/a", workspace=record).level == "workspace"
    assert sp.add("/b", workspace=record, session="s-1").level == "session"
    assert sp.add("/c", level="global", workspace=record, session="s-1").level == "global"
    assert (Path(record.path) / ".warden" / "sandbox.json").exists()
    assert (Path(record.path) / ".warden" / "sessions" / "s-1" / "sandbox.json").exists()
    merged = [(r.path, r.level) for r in sp.rules(record, "s-1").all()]
    assert merged == [("/c", "global"), ("/a", "workspace"), ("/b", "session")]
    assert [r.path for r in sp.rules(record).all()] == ["/c", "/a"]  # no session: no session file


@pytest.mark.parametrize(("kwargs", "words"), [
    ({"level": "session"}, "needs --workspace"),
    ({"session": "s"}, "needs --workspace"),
    ({"level": "planet"}, "bad level"),
])
def test_bad_level_combinations(app: App, kwargs: dict[str, str], words: str) -> None:
    with pytest.raises(InvalidInput, match=words):
        app.sandbox_paths.add("/x", **kwargs)  # type: ignore[arg-type]


def test_bad_paths_and_session_ids(app: App, record: WorkspaceRecord) -> None:
    for path in ("relative", "/x\0y", ""):
        with pytest.raises(InvalidInput):
            app.sandbox_paths.add(path)
    for session in ("../escape", ".hidden", "a/b", ""):
        with pytest.raises(InvalidInput, match="session id"):
            app.sandbox_paths.add("/x", workspace=record, session=session)
    assert not (Path(record.path) / ".warden").exists() or not any((Path(record.path) / ".warden").rglob("*.json"))


def test_a_policy_folder_that_is_a_link_is_refused(app: App, record: WorkspaceRecord, tmp_path: Path) -> None:
    (tmp_path / "bot-owned").mkdir()
    os.symlink(tmp_path / "bot-owned", Path(record.path) / ".warden")
    with pytest.raises(Denied, match="symbolic link"):
        app.sandbox_paths.rules(record)


def test_a_policy_file_that_is_a_link_is_refused(app: App, record: WorkspaceRecord, tmp_path: Path) -> None:
    (tmp_path / "bot.json").write_text('{"allowed_paths": ["/"]}')
    (Path(record.path) / ".warden").mkdir()
    os.symlink(tmp_path / "bot.json", Path(record.path) / ".warden" / "sandbox.json")
    with pytest.raises(Denied, match="symbolic link"):
        app.sandbox_paths.rules(record)


def test_a_broken_file_names_itself(app: App) -> None:
    app.home.sandbox_paths.write_text("{not json")
    with pytest.raises(InvalidInput, match=r"sandbox_paths\.json is not valid JSON"):
        app.sandbox_paths.rules()


def _add_many(home: str, start: int) -> None:
    worker = bootstrap(home, environ={"WARDEN_HOME": home, "HOME": "/nonexistent"})
    try:
        for i in range(start, start + 15):
            worker.sandbox_paths.add(f"/p/{i}")
    finally:
        worker.close()


def test_concurrent_writers_lose_nothing(app: App) -> None:
    home = str(app.home.root)
    app.registry  # noqa: B018 - create the database before the workers race to
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_add_many, args=(home, n * 100)) for n in range(4)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(60)
    assert all(p.exitcode == 0 for p in procs)
    paths = {r.path for r in app.sandbox_paths.rules().allowed}
    assert paths == {f"/p/{n * 100 + i}" for n in range(4) for i in range(15)}


def test_check_names_the_rule_and_is_audited(app: App, record: WorkspaceRecord) -> None:
    sp = app.sandbox_paths
    sp.add("/srv/data", mode="ro")
    sp.remove("/srv/data/secret", workspace=record, session="s1")
    assert sp.check("/srv/data/x", "write").rule == "deny: global allowed_paths /srv/data is ro"
    assert sp.check("/srv/data/secret/x", "read", workspace=record, session="s1").rule == \
        "deny: session denied_paths /srv/data/secret"
    assert sp.check("/srv/data/secret/x", "read", workspace=record).allowed  # other sessions unaffected
    assert sp.check(record.path + "/notes/a", "write", workspace=record).rule == "allow: workspace owner (rw)"
    assert sp.check(record.path + "-evil/a", "read", workspace=record).rule == \
        "deny: not in the workspace or any allowed path"
    event = app.audit.list(limit=1)[0]
    assert event.action == "sandbox.check" and event.decision == "deny"


def test_effective_path_policy_for_the_sandbox_builder(app: App, record: WorkspaceRecord) -> None:
    app.sandbox_paths.add("/opt/tools", mode="ro")
    app.sandbox_paths.add("/srv/shared", workspace=record)
    app.sandbox_paths.remove("/srv/shared", workspace=record, session="s")
    eff = app.sandbox_paths.effective(record)
    assert (Path(record.path) / ".warden").is_dir()  # exists, so it can be bound read-only
    assert eff.workspace == record.path
    assert {(z.name, z.mode) for z in eff.zones} == {("cache", "rw"), ("workspace", "rw")}
    assert set(eff.allowed) == {("/opt/tools", "ro"), ("/srv/shared", "rw")}
    in_session = app.sandbox_paths.effective(record, session="s")
    assert set(in_session.allowed) == {("/opt/tools", "ro")} and in_session.denied == ("/srv/shared",)


def test_the_sandbox_builders_answer_is_kept_only_while_its_files_are_unchanged(
        app: App, record: WorkspaceRecord, monkeypatch: pytest.MonkeyPatch) -> None:
    """`effective` is asked at every run, and answered again from what it read last time while
    the policy folder and files are the same, unchanged: a person's hand edit (in place, the
    same size, within the same clock tick), a file replaced by a link, a folder removed are each
    seen at the very next call."""
    from warden.adapters import policy_files

    monkeypatch.setattr(policy_files, "_SETTLE_NS", 0)  # settled at once (the next test: not so)
    sp = app.sandbox_paths
    policy = Path(record.path) / ".warden"
    sp.add("/srv/aaaa", workspace=record)
    first = sp.effective(record)
    assert ("/srv/aaaa", "rw") in first.allowed
    reads: list[str] = []
    real_read = sp._files.read_doc
    monkeypatch.setattr(sp._files, "read_doc", lambda path, shown=None: reads.append(path) or real_read(path, shown))
    assert sp.effective(record) is first and reads == []  # kept: nothing read again
    # Edited in place by hand: same inode, same size; its times may not move within a tick, its
    # change time and content do.
    doc = policy / "sandbox.json"
    stat_before = doc.stat()
    with open(doc, "r+b") as handle:
        text = handle.read().replace(b"/srv/aaaa", b"/srv/bbbb")
        handle.seek(0)
        handle.write(text)
    os.utime(doc, ns=(stat_before.st_atime_ns, stat_before.st_mtime_ns))  # the mtime put back
    assert doc.stat().st_ino == stat_before.st_ino and doc.stat().st_size == stat_before.st_size
    assert ("/srv/bbbb", "rw") in sp.effective(record).allowed and reads
    # Replaced by a link to a file of the same content: refused as a link, as when first read.
    (policy / "copy.json").write_bytes(doc.read_bytes())
    doc.unlink()
    doc.symlink_to(policy / "copy.json")
    with pytest.raises(Denied, match="symbolic link"):
        sp.effective(record)
    doc.unlink()
    (policy / "copy.json").unlink()
    sp.effective(record)
    # The policy folder removed: made again (it is bound read-only, or a bot could make it).
    import shutil

    shutil.rmtree(policy)
    assert sp.effective(record).allowed == ()
    assert policy.is_dir()
    # The policy folder a link: refused, however often asked.
    shutil.rmtree(policy)
    (Path(record.path) / "elsewhere").mkdir()
    policy.symlink_to(Path(record.path) / "elsewhere")
    for _ in range(2):
        with pytest.raises(Denied, match="symbolic link"):
            sp.effective(record)


def test_an_answer_read_from_a_file_changed_a_moment_ago_is_not_kept(
        app: App, record: WorkspaceRecord, monkeypatch: pytest.MonkeyPatch) -> None:
    """A kernel without fine-grained change times stamps two writes in one tick (a few ms) alike:
    a same-size edit right after a run read the first write would leave the file's identity as it
    was, and the old answer kept for good. A file changed within the last second is read again."""
    sp = app.sandbox_paths
    sp.add("/srv/aaaa", workspace=record)
    sp.effective(record)
    reads: list[str] = []
    real_read = sp._files.read_doc
    monkeypatch.setattr(sp._files, "read_doc", lambda path, shown=None: reads.append(path) or real_read(path, shown))
    doc = Path(record.path) / ".warden" / "sandbox.json"
    assert time.time_ns() - doc.stat().st_ctime_ns < 500_000_000, "the machine was too slow to show it"
    sp.effective(record)
    assert str(doc) in reads  # read again: changed too recently to be told apart from its next change
    time.sleep(1.05)
    kept = sp.effective(record)  # settled now: read once more, then kept
    reads.clear()
    assert sp.effective(record) is kept and reads == []


def test_a_project_blob_cannot_plant_the_workspace_policy(app: App, tmp_path: Path) -> None:
    # A bot creating a workspace over the API sends project_blob. A .warden/sandbox.json inside
    # it would be read as the workspace's own path list: a read-write mount of any host path.
    import io
    import tarfile

    target = tmp_path / "host-only"
    target.mkdir()
    doc = json.dumps({"allowed_paths": [{"path": str(target), "mode": "rw"}]}).encode()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in ((".warden/sandbox.json", doc), (".warden/zones.yaml", b"{}\n"),
                           ("src/app.py", b"print(1)\n")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    try:
        record = app.workspaces.create("planted", template="minimal", blob=buf.getvalue())
    except InvalidInput:
        return  # refused outright: also fine
    eff = app.sandbox_paths.effective(record)
    assert str(target) not in [path for path, _ in eff.allowed]


def test_a_path_denied_whose_audit_row_fails_is_said_done(app: App, monkeypatch: pytest.MonkeyPatch,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    """The policy file written, its audit row then failed (a full disk): `sandbox remove` said it
    failed while the path was denied from then on."""
    failing_rows(monkeypatch, app.audit, "sandbox.remove")
    assert app.sandbox_paths.remove("/opt/tools").action == "deny"
    assert json.loads(app.home.sandbox_paths.read_text())["denied_paths"][0]["path"] == "/opt/tools"
    assert "sandbox.remove on global is done, but not in the audit log: no space left" in caplog.text
