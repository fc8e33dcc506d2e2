"""Checkpoints, rollbacks and kept versions against the real filesystem (services/checkpoints.py)."""

from __future__ import annotations

import functools
import json
import os
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.support.failing_audit import failing_rows
from warden.bootstrap import App, bootstrap
from warden.core.errors import Conflict, InvalidInput, Locked, NotFound, TooLarge
from warden.core.workspaces import WorkspaceRecord
from warden.services.files import approve_local_user

pytestmark = pytest.mark.used_home


def register(app: App, tmp_path: Path, name: str = "demo") -> WorkspaceRecord:
    folder = tmp_path / "workspaces" / name
    folder.mkdir(parents=True)
    record = WorkspaceRecord(id=f"ws_{name}_{os.urandom(3).hex()}", name=name, path=str(folder), type="user",
                             status="ready", created_at="2026-01-01T00:00:00+00:00",
                             last_accessed="2026-01-01T00:00:00+00:00")
    with app.registry.transaction() as tx:
        tx.workspaces.insert(record)
    return record


def tree(root: Path) -> dict[str, tuple[str, int, str]]:
    """Every entry beneath `root` (nothing excluded): kind, mode and bytes or link text."""
    found: dict[str, tuple[str, int, str]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            st = path.lstat()
            rel = str(path.relative_to(root))
            if stat.S_ISLNK(st.st_mode):
                found[rel] = ("link", 0, os.readlink(path))
            elif stat.S_ISDIR(st.st_mode):
                found[rel] = ("dir", stat.S_IMODE(st.st_mode), "")
            else:
                found[rel] = ("file", stat.S_IMODE(st.st_mode), path.read_bytes().hex())
    return found


def fill(root: Path) -> None:
    (root / "src" / "pkg").mkdir(parents=True)
    (root / "src" / "pkg" / "mod.py").write_text("print('hi')\n")
    (root / "src" / "run.sh").write_bytes(b"#!/bin/sh\necho run\n")
    os.chmod(root / "src" / "run.sh", 0o755)
    (root / "data.bin").write_bytes(bytes(range(256)) * 1000)
    (root / "empty").mkdir()
    (root / "private").mkdir(mode=0o700)
    os.chmod(root / "private", 0o710)
    (root / "private" / "secret.txt").write_text("s")
    os.chmod(root / "private" / "secret.txt", 0o600)
    os.symlink("src/run.sh", root / "to-run")
    os.symlink("/nowhere/at/all", root / "dangling")
    os.symlink("src/pkg", root / "to-pkg")  # a link to a folder is a link, never walked into


def test_rollback_restores_the_tree_byte_for_byte(app: App, tmp_path: Path) -> None:
    record = register(app, tmp_path)
    root = Path(record.path)
    fill(root)
    before = tree(root)
    made = app.checkpoints.create(record.name, "first")
    assert made.files == 4 and made.message == "first"
    assert {e.path: e.kind for e in made.entries}["to-pkg"] == "symlink"
    # Change everything a bot could: content, modes, links, empty folders, deletes, additions,
    # a file where a folder was and a folder where a file was.
    (root / "src" / "pkg" / "mod.py").write_text("changed\n")
    os.chmod(root / "src" / "run.sh", 0o600)
    os.unlink(root / "to-run")
    os.symlink("elsewhere", root / "to-run")
    os.rmdir(root / "empty")
    (root / "empty").write_text("now a file")
    os.unlink(root / "data.bin")
    (root / "data.bin").mkdir()
    (root / "data.bin" / "x").write_text("x")
    (root / "new" / "deep").mkdir(parents=True)
    (root / "new" / "deep" / "f").write_text("added")
    os.chmod(root / "private", 0o755)
    os.unlink(root / "to-pkg")
    (root / "to-pkg").mkdir()
    done = app.checkpoints.rollback(record.name, made.id)
    assert tree(root) == before
    assert done["checkpoint"] == made.id and done["saved_as"] != made.id
    # The state before the rollback was saved: rolling back to it brings the changes back.
    app.checkpoints.rollback(record.name, str(done["saved_as"]))
    assert (root / "new" / "deep" / "f").read_text() == "added"
    assert os.readlink(root / "to-run") == "elsewhere"
    app.checkpoints.rollback(record.name, made.id[:6])  # a unique prefix is enough
    assert tree(root) == before
    actions = [e.action for e in app.audit.list(target=record.name, limit=50)]
    assert actions.count("checkpoint.rollback") == 3 and "checkpoint.create" in actions


def test_excluded_entries_are_neither_saved_nor_touched(app: App, tmp_path: Path) -> None:
    record = register(app, tmp_path)
    root = Path(record.path)
    (root / "keep.txt").write_text("k")
    for folder in (".venv/bin", "node_modules/x", ".warden", ".git/refs", "sub/.GIT", "sub/node_modules"):
        (root / folder).mkdir(parents=True)
    (root / ".venv" / "bin" / "python").write_text("v")
    (root / ".workspace.json").write_text("{}")
    (root / ".bashrc").write_text("rc")
    (root / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    # A folder git would take for a repository (HEAD beside refs): its HEAD is never saved.
    (root / "lookalike" / "refs").mkdir(parents=True)
    (root / "lookalike" / "HEAD").write_text("ref: x\n")
    made = app.checkpoints.create(record.name)
    paths = {e.path for e in made.entries}
    assert paths == {"keep.txt", "sub", "lookalike", "lookalike/refs"}
    # Later changes to excluded entries survive a whole rollback; the look-alike's HEAD is not
    # written back by it (a rollback never completes a repository).
    (root / ".venv" / "bin" / "python").write_text("changed")
    (root / ".git" / "config").write_text("[core]\n")
    (root / ".bashrc").write_text("rc2")
    os.unlink(root / "lookalike" / "HEAD")
    app.checkpoints.rollback(record.name, made.id)
    assert (root / ".venv" / "bin" / "python").read_text() == "changed"
    assert (root / ".git" / "config").exists() and (root / ".bashrc").read_text() == "rc2"
    assert not (root / "lookalike" / "HEAD").exists()
    with pytest.raises(InvalidInput):
        app.checkpoints.rollback(record.name, made.id, path="/.git")


def test_path_rollback_only_touches_that_path(app: App, tmp_path: Path) -> None:
    record = register(app, tmp_path)
    root = Path(record.path)
    fill(root)
    made = app.checkpoints.create(record.name)
    (root / "src" / "pkg" / "mod.py").write_text("changed\n")
    (root / "src" / "pkg" / "added.py").write_text("added\n")
    (root / "data.bin").write_text("changed too")
    (root / "outside-new").write_text("new")
    app.checkpoints.rollback(record.name, made.id, path="/src/pkg")
    assert (root / "src" / "pkg" / "mod.py").read_text() == "print('hi')\n"
    assert not (root / "src" / "pkg" / "added.py").exists()
    assert (root / "data.bin").read_text() == "changed too"
    assert (root / "outside-new").read_text() == "new"
    # One file; and a path that was deleted entirely comes back with its parents.
    app.checkpoints.rollback(record.name, made.id, path="data.bin")
    assert (root / "data.bin").read_bytes() == bytes(range(256)) * 1000
    import shutil

    shutil.rmtree(root / "src")
    app.checkpoints.rollback(record.name, made.id, path="/src/pkg/mod.py")
    assert (root / "src" / "pkg" / "mod.py").read_text() == "print('hi')\n"
    assert not (root / "src" / "run.sh").exists()
    assert (root / "outside-new").exists()


def test_a_second_checkpoint_of_an_unchanged_tree_adds_almost_nothing(app: App, tmp_path: Path) -> None:
    record = register(app, tmp_path)
    root = Path(record.path)
    for i in range(50):
        (root / f"f{i}.bin").write_bytes(os.urandom(20000))
    (root / "copy.bin").write_bytes((root / "f0.bin").read_bytes())  # same bytes stored once
    first = app.checkpoints.create(record.name)
    assert first.added_bytes == 50 * 20000
    used = app.checkpoints.store.usage(record.name)
    second = app.checkpoints.create(record.name)
    assert second.added_bytes == 0
    grew = app.checkpoints.store.usage(record.name) - used
    assert 0 < grew < 64 * 1024  # one manifest
    (root / "f1.bin").write_bytes(os.urandom(20000))
    assert app.checkpoints.create(record.name).added_bytes == 20000


def test_a_bot_link_in_place_of_a_folder_is_not_written_through(app: App, tmp_path: Path) -> None:
    record = register(app, tmp_path)
    root = Path(record.path)
    (root / "docs").mkdir()
    (root / "docs" / "a.md").write_text("mine")
    made = app.checkpoints.create(record.name)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("outside file")
    import shutil

    shutil.rmtree(root / "docs")
    os.symlink(outside, root / "docs")  # the bot's swap
    for path in (None, "/docs", "/docs/a.md"):
        app.checkpoints.rollback(record.name, made.id, path=path)
        assert sorted(os.listdir(outside)) == ["keep"] and (outside / "keep").read_text() == "outside file"
        assert (root / "docs").is_dir() and not (root / "docs").is_symlink()
        assert (root / "docs" / "a.md").read_text() == "mine"
        shutil.rmtree(root / "docs")
        os.symlink(outside, root / "docs")


def test_a_link_in_place_of_the_workspace_folder_is_refused(app: App, tmp_path: Path) -> None:
    record = register(app, tmp_path)
    (Path(record.path) / "a").write_text("a")
    made = app.checkpoints.create(record.name)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    os.rename(record.path, tmp_path / "moved")
    os.symlink(outside, record.path)
    with pytest.raises(Exception) as info:
        app.checkpoints.rollback(record.name, made.id)
    assert getattr(info.value, "code", "") == "denied"
    assert os.listdir(outside) == []


def consistent(store: Path) -> None:
    """Every manifest names only objects that are there."""
    for manifest in (store / "checkpoints").glob("*.json"):
        data = json.loads(manifest.read_bytes())
        for path, kind, _mode, _size, digest, _stamp in data["entries"]:
            if kind == "file":
                assert (store / "objects" / digest[:2] / digest[2:]).is_file(), (manifest.name, path)


def test_a_failure_between_objects_and_manifest_leaves_no_manifest(app: App, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    record = register(app, tmp_path)
    root = Path(record.path)
    (root / "a.txt").write_text("a")
    store = app.checkpoints.store

    def boom(name: str, manifest: object) -> None:
        raise OSError(5, "injected")

    monkeypatch.setattr(store, "save_manifest", boom)
    with pytest.raises(OSError):
        app.checkpoints.create(record.name)
    monkeypatch.undo()
    folder = app.home.versions / record.name
    assert list((folder / "checkpoints").glob("*.json")) == []
    made = app.checkpoints.create(record.name)  # the store still works
    consistent(folder)
    assert [m.id for m in app.checkpoints.list(record.name)] == [made.id]


KILLER = """
import sys
from warden.bootstrap import bootstrap
app = bootstrap(sys.argv[1])
print("go", flush=True)
app.checkpoints.create(sys.argv[2], "big")
"""


def test_kill_9_mid_checkpoint_leaves_a_consistent_store(app: App, tmp_path: Path, environ: dict[str, str]) -> None:
    record = register(app, tmp_path)
    root = Path(record.path)
    for i in range(400):
        (root / f"d{i % 10}").mkdir(exist_ok=True)
        (root / f"d{i % 10}" / f"f{i}").write_bytes(os.urandom(50000))
    folder = app.home.versions / record.name
    for delay in (0.05, 0.15, 0.3):
        proc = subprocess.Popen([sys.executable, "-c", KILLER, str(app.home.root), record.name],
                                env=environ, stdout=subprocess.PIPE)
        assert proc.stdout is not None and proc.stdout.readline() == b"go\n"
        threading.Event().wait(delay)
        proc.kill()
        proc.wait()
        consistent(folder)
    made = app.checkpoints.create(record.name)  # and it goes on working (the lease of the killed one is dead)
    consistent(folder)
    assert made.files == 400
    # The killed captures' objects were collected: every object is named by a manifest.
    named = {e.digest for m in app.checkpoints.list(record.name) for e in m.entries if e.kind == "file"}
    stored = {p.parent.name + p.name for p in (folder / "objects").rglob("*") if p.is_file()}
    assert stored == named and not list((folder / "tmp").iterdir())
    counted = app.checkpoints.store.usage(record.name)  # kept up to date by each change…
    assert abs(counted - app.checkpoints.store.measure(record.name)) <= 4 * 4096  # …to within a few blocks


def test_versions_kept_on_overwrite_and_delete(app: App, tmp_path: Path) -> None:
    record = register(app, tmp_path)
    files = app.files(record.name, approver=approve_local_user)
    files.write_text("/notes/a.txt", "one")
    assert files.list_versions("/notes/a.txt") == []  # a new file replaces nothing
    files.write_text("/notes/a.txt", "two")
    files.write_text("/notes/b.txt", "bee")
    files.delete("/notes/a.txt")
    versions = files.list_versions("/notes/a.txt")
    assert [(v.op, v.size) for v in versions] == [("delete", 3), ("write", 3)]
    deleted = next(e for e in app.audit.list(limit=5) if e.action == "fs.delete")
    assert deleted.detail.get("version") == versions[0].id
    assert files.restore_version("/notes/a.txt", versions[1].id).id == versions[1].id
    assert files.read_text("/notes/a.txt") == "one"
    files.delete("/notes", recursive=True)  # a folder: each file in it is kept
    assert {v.path for v in files.list_versions("/notes")} == {"/notes/a.txt", "/notes/b.txt"}
    files.restore_version("/notes/b.txt")
    assert files.read_text("/notes/b.txt") == "bee"
    with pytest.raises(NotFound):
        files.restore_version("/nothing.txt")


def test_retention_obeys_keep_and_max_size(home: Path, environ: dict[str, str], tmp_path: Path) -> None:
    app = bootstrap(home, environ={**environ, "WARDEN_VERSIONS_KEEP": "3", "WARDEN_VERSIONS_MAX_SIZE": "64K"})
    try:
        record = register(app, tmp_path)
        files = app.files(record.name, approver=approve_local_user)
        for i in range(6):
            files.write_text("/a.txt", f"content {i}")
        assert [v.size for v in files.list_versions("/a.txt")] == [9, 9, 9]
        assert app.checkpoints.store.read_object(record.name, files.list_versions("/a.txt")[0].digest,
                                                  max_bytes=100) == b"content 4"
        # 40 KB each: only one fits in 64K; the oldest go first, whatever their path, and so do
        # their objects.
        for i in range(4):
            files.write_bytes("/big.bin", os.urandom(40 * 1024) + bytes([i]))
        assert len(files.list_versions("/big.bin")) == 1
        assert files.list_versions("/a.txt") == []
        objects = [p for p in (app.home.versions / record.name / "objects").rglob("*") if p.is_file()]
        assert len(objects) == 1
    finally:
        app.close()
    off = bootstrap(home, environ={**environ, "WARDEN_VERSIONS_KEEP": "0"})
    try:
        files = off.files(record.name, approver=approve_local_user)
        files.write_text("/c.txt", "1")
        files.write_text("/c.txt", "2")
        assert files.list_versions("/c.txt") == []
    finally:
        off.close()


def test_the_store_counts_against_the_quota(home: Path, environ: dict[str, str], tmp_path: Path) -> None:
    app = bootstrap(home, environ={**environ, "WARDEN_WORKSPACE_MAX_DISK": "1M"})
    try:
        record = register(app, tmp_path)
        root = Path(record.path)
        (root / "a.bin").write_bytes(os.urandom(400 * 1024))
        bare = app.quota.usage(record.path).bytes
        app.checkpoints.create(record.name)
        assert app.quota.usage(record.path).bytes >= bare + 400 * 1024
        (root / "b.bin").write_bytes(os.urandom(300 * 1024))
        # 400K files + 300K new + 400K kept: saving the 300K more would pass 1M.
        with pytest.raises(TooLarge) as info:
            app.checkpoints.create(record.name)
        assert info.value.rule == "workspace.max_disk"
        assert len(app.checkpoints.list(record.name)) == 1
        consistent(app.home.versions / record.name)
        files = app.files(record.name, approver=approve_local_user)
        with pytest.raises(TooLarge):
            files.write_bytes("/c.bin", os.urandom(200 * 1024))
        # A full workspace can still be rolled back (the save before it is not refused), and
        # dropping checkpoints makes room again.
        first = app.checkpoints.list(record.name)[0]
        done = app.checkpoints.rollback(record.name, first.id)
        assert not (root / "b.bin").exists()
        app.checkpoints.drop(record.name, [str(done["saved_as"])])
        app.checkpoints.create(record.name)
    finally:
        app.close()


def test_destroy_drops_the_store_and_a_new_workspace_starts_empty(app: App, tmp_path: Path) -> None:
    record = register(app, tmp_path)
    (Path(record.path) / "a").write_text("a")
    app.checkpoints.create(record.name)
    assert (app.home.versions / record.name).is_dir()
    app.workspaces.destroy(record.name, archive=False)
    assert not (app.home.versions / record.name).exists()
    assert app.checkpoints.store.usage_at(record.path) == 0
    again = register(app, tmp_path / "again", record.name)
    assert app.checkpoints.list(again) == []


def test_a_store_left_by_another_workspace_of_the_name_is_not_shown(app: App, tmp_path: Path) -> None:
    first = register(app, tmp_path / "one")
    (Path(first.path) / "a").write_text("a")
    app.checkpoints.create(first)
    with app.registry.transaction() as tx:
        tx.workspaces.delete(first.name, record_id=first.id)  # as if its store had not been dropped
    second = register(app, tmp_path / "two", first.name)
    assert app.checkpoints.list(second.name) == []
    made = app.checkpoints.create(second.name)
    assert [m.id for m in app.checkpoints.list(second.name)] == [made.id]


def test_unavailable_states_and_bad_ids(app: App, tmp_path: Path) -> None:
    record = register(app, tmp_path)
    with pytest.raises(InvalidInput):
        app.checkpoints.rollback(record.name, "../x")
    with pytest.raises(NotFound):
        app.checkpoints.rollback(record.name, "abcdef")
    with pytest.raises(NotFound):
        app.checkpoints.create("no-such-workspace")
    app.workspaces.set_status(record.name, "archived")
    with pytest.raises(Conflict):
        app.checkpoints.create(record.name)


def test_concurrent_checkpoints_and_a_changing_tree(app: App, tmp_path: Path) -> None:
    record = register(app, tmp_path)
    root = Path(record.path)
    for i in range(200):
        (root / f"f{i}").write_bytes(os.urandom(5000))
    stop = threading.Event()
    errors: list[BaseException] = []

    def churn() -> None:  # a run changing the workspace while checkpoints read it
        i = 0
        while not stop.is_set():
            target = root / f"f{i % 200}"
            try:
                if i % 3 == 0:
                    target.unlink(missing_ok=True)
                else:
                    target.write_bytes(os.urandom(5000))
            except OSError:
                pass
            i += 1

    def checkpoint() -> None:
        try:
            for _ in range(3):
                app.checkpoints.create(record.name)
        except BaseException as exc:
            errors.append(exc)

    writer = threading.Thread(target=churn)
    writer.start()
    workers = [threading.Thread(target=checkpoint) for _ in range(2)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    stop.set()
    writer.join()
    assert errors == []
    assert len(app.checkpoints.list(record.name)) == 6
    consistent(app.home.versions / record.name)


def test_a_rollback_waits_for_no_run_and_refuses_while_one_holds_the_workspace(app: App, tmp_path: Path) -> None:
    record = register(app, tmp_path)
    (Path(record.path) / "a").write_text("a")
    made = app.checkpoints.create(record.name)
    app.checkpoints.rollback_wait = 0.5
    with app.leases.hold(record.name, "shared", "run"):
        app.checkpoints.create(record.name)  # a checkpoint goes on beside a run
        with pytest.raises(Locked):
            app.checkpoints.rollback(record.name, made.id)
    app.checkpoints.rollback(record.name, made.id)
    # A rollback asked for while a checkpoint (or a write) is in flight waits for it to end.
    app.checkpoints.rollback_wait = 10
    (Path(record.path) / "b").write_text("b")
    held = threading.Event()
    release = threading.Event()

    def hold_shared() -> None:
        with app.leases.hold(record.name, "shared", "checkpoint"):
            held.set()
            release.wait(10)

    holder = threading.Thread(target=hold_shared)
    holder.start()
    held.wait(10)
    threading.Timer(0.5, release.set).start()
    app.checkpoints.rollback(record.name, made.id)
    holder.join()
    assert not (Path(record.path) / "b").exists()


AS_USER = """
import os, sys
from pathlib import Path
from warden.adapters.versions import HostVersionStore
from warden.core.checkpoints import plan_rollback
base = Path(sys.argv[1])
ws = base / "ws"
ws.mkdir()
(ws / "locked").write_text("secret")
os.chmod(ws / "locked", 0)
(ws / "ro").mkdir()
(ws / "ro" / "f").write_text("f")
os.chmod(ws / "ro", 0o555)
store = HostVersionStore(base / "store")
with store.lock("w", "id1", str(ws)):
    saved = store.capture("w", str(ws), known={}, budget=None, now_ns=0)
assert sorted(e.path for e in saved.entries) == ["locked", "ro", "ro/f"], saved.entries
assert os.stat(ws / "locked").st_mode & 0o777 == 0
os.chmod(ws / "ro", 0o755)
(ws / "ro" / "f").write_text("changed")
(ws / "ro" / "g").write_text("new")
os.chmod(ws / "ro", 0o555)
os.unlink(ws / "locked")
store.apply("w", str(ws), plan_rollback(store.scan(str(ws), None), saved.entries, None))
assert os.stat(ws / "locked").st_mode & 0o777 == 0
os.chmod(ws / "locked", 0o600)
assert (ws / "locked").read_text() == "secret"
assert sorted(os.listdir(ws / "ro")) == ["f"] and (ws / "ro" / "f").read_text() == "f"
assert os.stat(ws / "ro").st_mode & 0o777 == 0o555
print("ok")
"""


@pytest.mark.skipif(os.geteuid() != 0 or not Path("/usr/bin/setpriv").exists(),
                    reason="needs root to run the check as another user")
def test_modes_a_bot_set_do_not_stop_warden_running_as_that_user() -> None:
    """Warden as an ordinary user (the bots' user): a file made unreadable is still saved, and a
    read-only folder is still rolled back, both with their modes kept."""
    import shutil
    import tempfile

    base = Path(tempfile.mkdtemp(prefix="warden-ck-user-", dir="/tmp"))
    try:
        os.chown(base, 65534, 65534)
        src = str(Path(__file__).resolve().parents[2] / "src")
        done = subprocess.run(["/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                               sys.executable, "-c", AS_USER, str(base)], env={"PYTHONPATH": src, "PATH": "/usr/bin"},
                              capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
    finally:
        subprocess.run(["chmod", "-R", "u+rwx", str(base)], check=False)
        shutil.rmtree(base, ignore_errors=True)


def test_a_rollback_cut_short_is_run_again_to_the_same_tree(app: App, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    import warden.adapters.safefs.trees as store_module

    record = register(app, tmp_path)
    root = Path(record.path)
    for i in range(30):
        (root / "d" / str(i % 3)).mkdir(parents=True, exist_ok=True)
        (root / "d" / str(i % 3) / f"f{i}").write_text(f"file {i}")
    before = tree(root)
    made = app.checkpoints.create(record.name)
    for i in range(0, 30, 2):
        (root / "d" / str(i % 3) / f"f{i}").write_text("changed")
    (root / "extra").write_text("x")
    real = store_module._put_file
    calls = {"n": 0}

    def dies_midway(*args: object) -> None:
        calls["n"] += 1
        if calls["n"] == 5:
            raise KeyboardInterrupt  # as if killed between two files
        real(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(store_module, "_put_file", dies_midway)
    with pytest.raises(KeyboardInterrupt):
        app.checkpoints.rollback(record.name, made.id)
    monkeypatch.undo()
    assert tree(root) != before
    app.checkpoints.rollback(record.name, made.id)
    assert tree(root) == before  # no temporary file left either


def test_dropping_checkpoints_frees_what_only_they_held(app: App, tmp_path: Path) -> None:
    record = register(app, tmp_path)
    root = Path(record.path)
    (root / "shared.bin").write_bytes(os.urandom(100_000))
    (root / "only-first.bin").write_bytes(os.urandom(200_000))
    first = app.checkpoints.create(record.name)
    os.unlink(root / "only-first.bin")
    second = app.checkpoints.create(record.name)
    # A rollback from a tree a checkpoint holds as it is saves nothing new first.
    done = app.checkpoints.rollback(record.name, second.id)
    assert done["saved_as"] == second.id and len(app.checkpoints.list(record.name)) == 2
    with pytest.raises(NotFound):
        app.checkpoints.drop(record.name, [first.id, "abcdef99"])  # all or nothing
    assert len(app.checkpoints.list(record.name)) == 2
    dropped = app.checkpoints.drop(record.name, [first.id[:5]])
    assert dropped["dropped"] == [first.id] and int(str(dropped["freed"])) >= 200_000
    assert [m.id for m in app.checkpoints.list(record.name)] == [second.id]
    consistent(app.home.versions / record.name)
    app.checkpoints.rollback(record.name, second.id)
    assert (root / "shared.bin").stat().st_size == 100_000
    assert app.audit.list(target=record.name, limit=5)[-1].action in {"checkpoint.drop", "checkpoint.rollback"}


def test_a_tree_nested_deeper_than_the_recursion_limit(app: App, tmp_path: Path) -> None:
    """A bot can nest folders past Python's recursion limit and the open-file limit in one
    command: checkpoints, versions of a recursive delete and rollbacks still work."""
    record = register(app, tmp_path)
    depth = 1300
    fd = os.open(record.path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(depth):
            os.mkdir("d", dir_fd=fd)
            nxt = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = nxt
        os.close(os.open("deepest.txt", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd))
        (Path(record.path) / "d" / "d" / "side.txt").write_text("side")
    finally:
        os.close(fd)
    made = app.checkpoints.create(record.name)
    assert made.files == 2 and sum(1 for e in made.entries if e.kind == "dir") == depth
    files = app.files(record.name, approver=approve_local_user)
    files.delete("/d", recursive=True)  # keeps the two files as versions first
    assert {v.path.rsplit("/", 1)[-1] for v in files.list_versions("/d")} == {"deepest.txt", "side.txt"}
    app.checkpoints.rollback(record.name, made.id)
    assert (Path(record.path) / "d" / "d" / "side.txt").read_text() == "side"
    assert app.checkpoints.store.scan(record.path, None).keys() == {e.path for e in made.entries}
    (Path(record.path) / "new.txt").write_text("x")
    app.checkpoints.rollback(record.name, made.id, path="/d/d")
    app.checkpoints.rollback(record.name, made.id)
    assert not (Path(record.path) / "new.txt").exists()
    subprocess.run(["rm", "-rf", str(Path(record.path) / "d")], check=False)


def test_a_drop_whose_audit_row_fails_is_said_done(app: App, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    """The checkpoint's manifest gone and its objects freed, the audit row then failed (a full
    disk): the drop said it failed, and a second one found no such checkpoint."""
    record = register(app, tmp_path)
    (Path(record.path) / "a.txt").write_text("a")
    made = app.checkpoints.create(record, "one")
    failing_rows(monkeypatch, app.audit, "checkpoint.drop")
    done = app.checkpoints.drop(record, [made.id])
    assert done["dropped"] == [made.id] and app.checkpoints.list(record) == []
    assert f"checkpoint.drop on {record.name} is done, but not in the audit log: no space left" in caplog.text


_IN_CLOSE_NOWRITE = 0x10


@pytest.mark.parametrize("on", ["disk", "tmpfs"])
def test_a_write_through_a_mapping_dirtied_before_the_checkpoint_is_rolled_back(
        app: App, tmp_path: Path, on: str, request: pytest.FixtureRequest) -> None:
    """A bot's process maps a file and dirties it; a write to a page already dirty changes no
    stamp (the kernel updates mtime and ctime at the write fault only, until writeback cleans the
    page). It waited (inotify) for the checkpoint to read the file, then wrote through its mapping:
    the manifest held the old bytes under the stamp the file still has, and a rollback to that
    checkpoint took the file as unchanged and kept the bot's bytes, long after its process ended
    (found attacking rollback as a bot). A capture now writes back the workspace's filesystem
    first, so any later write through a mapping faults and changes the stamp; on tmpfs, which
    never writes back (the same bytes kept under the same stamp for good), no stamp is trusted."""
    import ctypes
    import mmap
    import shutil
    import tempfile
    import time

    base = tmp_path
    if on == "tmpfs":
        if not Path("/dev/shm").is_dir():
            pytest.skip("no /dev/shm here")
        base = Path(tempfile.mkdtemp(dir="/dev/shm", prefix="warden-test-"))
        request.addfinalizer(functools.partial(shutil.rmtree, base, ignore_errors=True))
    record = register(app, base)
    root = Path(record.path)
    good = b"print('good')\n".ljust(4096, b"#")
    (root / "a.py").write_bytes(good)
    (root / "z").mkdir()
    for i in range(2000):  # the capture's time after it read a.py (its walk's first file)
        (root / "z" / f"f{i}").write_text(str(i))
    fd = os.open(root / "a.py", os.O_RDWR)
    mapped = mmap.mmap(fd, len(good))
    mapped[0:1] = mapped[0:1]  # the write fault: stamped now, the page dirty and writable
    time.sleep(2.5)  # older than STABLE_NS by the checkpoint

    libc = ctypes.CDLL(None, use_errno=True)
    watch = libc.inotify_init1(os.O_CLOEXEC)
    assert watch >= 0 and libc.inotify_add_watch(watch, str(root / "a.py").encode(), _IN_CLOSE_NOWRITE) >= 0

    def bot() -> None:
        os.read(watch, 4096)  # the checkpoint read a.py and closed it
        mapped[0:4] = b"EVIL"

    thread = threading.Thread(target=bot)
    thread.start()
    try:
        made = app.checkpoints.create(record.name, "before the bot")
    finally:
        thread.join(30)
        mapped.close()
        os.close(fd)
        os.close(watch)
    assert (root / "a.py").read_bytes()[:4] == b"EVIL"
    app.checkpoints.rollback(record.name, made.id)
    assert (root / "a.py").read_bytes() == good
