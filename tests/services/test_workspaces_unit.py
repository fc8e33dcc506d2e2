"""The workspace use cases on fakes of their ports: no disk, no database, no sandbox — milliseconds.

The same service runs on SQLite, real folders and real layers in test_workspace_create.py,
test_lifecycle.py and the CLI tests.
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.support.fake_registry import MemoryRegistry
from tests.support.fakes import (
    FakeArchives,
    FakeDisk,
    FakeGitDefuser,
    FakeHostProcesses,
    FakeLayerBuilder,
    FakeLayerStore,
    FakeResolutionCache,
    FakeWorkspaceIO,
)
from warden.core.errors import Conflict, NotFound, TooLarge, Unavailable
from warden.core.quota import Usage
from warden.core.settings import Settings, resolve
from warden.core.workspaces import WorkspaceRecord
from warden.services.archives import ArchiveShelf
from warden.services.audit import AuditLog
from warden.services.folders import CONFIGURED_MARKER, METADATA_FILE, FolderService
from warden.services.layers import LayerService
from warden.services.quota import QuotaService
from warden.services.templates import TemplateCatalog
from warden.services.workspaces import WorkspaceService

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
ROOT = "/home/u/.warden/workspaces"


class World:
    """A WorkspaceService wired to fakes, and the fakes, for a test to look at."""

    def __init__(self, tmp_path: Path, settings: Settings | None = None) -> None:
        self.now = T0
        self.settings = settings or resolve({}, {})
        self.registry = MemoryRegistry()
        self.audit = AuditLog(self.registry, lambda: self.now)
        self.io = FakeWorkspaceIO()
        for interpreter in FakeLayerBuilder.installed_pythons():  # the host's interpreters
            self.io.make_folder(interpreter.prefix)
            self.io.write_atomic(interpreter.executable, b"")
        self.git = FakeGitDefuser()
        self.archives = FakeArchives(self.io)
        self.processes = FakeHostProcesses()
        self.store = FakeLayerStore(self.io)
        self.builder = FakeLayerBuilder(self.store)
        self.disk = FakeDisk()
        self.quota = QuotaService(self.settings, Path("/home/u/.warden"), self.disk)
        self.layers = LayerService(self.store, self.builder, FakeResolutionCache(),
                                   TemplateCatalog(tmp_path / "templates"), self.settings)
        self.folders = FolderService(self.io, lambda: self.git, self.settings, quota=lambda: self.quota)
        self.shelf = ArchiveShelf(self.archives, Path("/home/u/.warden/archives"), lambda: self.now, self.settings)
        self.service = WorkspaceService(self.registry, lambda: self.audit, lambda: self.now, root_dir=Path(ROOT),
                                        folders=lambda: self.folders, shelf=self.shelf, processes=self.processes,
                                        node="node-a", layers=lambda: self.layers)

    def events(self, action: str) -> list[tuple[str, str]]:
        return [(e.target, e.result) for e in self.audit.list(limit=1000) if e.action == action]

    def row(self, name: str) -> WorkspaceRecord | None:
        with self.registry.transaction(write=False) as tx:
            return tx.workspaces.get(name)


@pytest.fixture
def world(tmp_path: Path) -> World:
    return World(tmp_path)


def test_create_reserves_the_name_and_sets_up_the_folder(world: World) -> None:
    record = world.service.create("w1")
    path = f"{ROOT}/w1"
    assert record.status == "ready" and record.path == path and record.template == "minimal"
    assert world.row("w1") == record
    assert world.io.kind(path) == "dir" and world.io.is_file(f"{path}/{CONFIGURED_MARKER}")
    assert json.loads(world.io.files[f"{path}/{METADATA_FILE}"])["name"] == "w1"
    assert world.io.venvs[path]["interpreter"] == "/py/3.12/bin/python3.12"
    assert {f"{path}/.gitignore", f"{path}/pyproject.toml"} <= set(world.io.files)
    assert record.meta["python_venv"] == f"{path}/.venv" and "pid" not in record.meta  # the claim's, gone
    layer = record.meta["layers"][0]
    assert record.meta["ro_paths"] == ["/py/3.12", f"/layers/{layer}"]
    assert world.builder.builds == [layer]
    assert world.events("workspace.create") == [("w1", "ok")]


def test_a_failed_create_gives_the_name_back_and_trashes_the_folder(world: World) -> None:
    world.io.fail["write_thin_venv"] = Unavailable("the disk went away")
    with pytest.raises(Unavailable):
        world.service.create("w1")
    assert world.row("w1") is None
    assert world.io.trashed == [f"{ROOT}/w1"] and world.io.kind(f"{ROOT}/w1") is None
    assert world.events("workspace.create") == [("w1", "unavailable")]
    del world.io.fail["write_thin_venv"]
    assert world.service.create("w1").status == "ready"  # the name is free again


def test_a_taken_name_or_folder_is_refused_before_any_layer_is_built(world: World) -> None:
    world.service.create("w1")
    built = list(world.builder.builds)
    with pytest.raises(Conflict, match="already exists"):
        world.service.create("w1")
    world.io.make_folder(f"{ROOT}/stray")
    with pytest.raises(Conflict, match="not a registered workspace"):
        world.service.create("stray")
    assert world.builder.builds == built


def test_a_blob_is_unpacked_within_the_disk_quota(tmp_path: Path) -> None:
    world = World(tmp_path, resolve({"workspace": {"max_disk": "1M"}}, {}))
    blob = json.dumps({"main.py": "print(1)\n"}).encode()
    record = world.service.create("w1", blob=blob)
    assert record.meta["blob"] == {"files": 1, "bytes": 9}
    assert world.io.files[f"{ROOT}/w1/main.py"] == b"print(1)\n"
    assert world.git.calls == [(f"{ROOT}/w1", None)]  # defused after the unpack
    world.disk.usage[f"{ROOT}/w2"] = Usage((1 << 20) - 4, 1)
    with pytest.raises(TooLarge):
        world.service.create("w2", blob=blob)
    assert world.row("w2") is None


def test_a_creator_that_died_leaves_a_broken_workspace(world: World) -> None:
    world.service.create("w1")
    with world.registry.transaction() as tx:
        tx.workspaces.update("w1", {"status": "creating", "meta": {**world.row("w1").meta, "pid": 999999}})
    assert world.service.get("w1").status == "broken"
    assert world.events("workspace.broken") == [("w1", "creator process gone")]
    # Created again: not just "already exists" (the person never saw it created), but why and the way out.
    with pytest.raises(Conflict, match=r"exists but is broken .*`warden destroy w1` removes it, or `warden health "
                                       r"w1 --repair` mends it"):
        world.service.create("w1")


def test_a_ready_workspace_whose_folder_is_gone_is_broken(world: World) -> None:
    world.service.create("w1")
    world.io.trash(f"{ROOT}/w1")
    assert [r.status for r in world.service.list()] == ["broken"]


def test_destroy_archives_keeps_the_record_and_restore_brings_it_back(world: World) -> None:
    world.service.create("w1")
    destroyed = world.service.destroy("w1")
    assert destroyed.to_json() == {"name": "w1", "destroyed": True, "archive": destroyed.archive}
    assert destroyed.archive is not None
    assert destroyed.archive.startswith("/home/u/.warden/archives/w1-20260301T120000-")
    assert world.archives.packed == {destroyed.archive: f"{ROOT}/w1"}
    assert world.processes.stopped == [f"{ROOT}/w1"]
    assert world.row("w1") is None and world.io.trashed == [f"{ROOT}/w1"]
    with pytest.raises(NotFound):
        world.service.get("w1")
    restored = world.service.restore_destroyed("w1")
    assert restored.status == "archived" and restored.meta["archive"] == destroyed.archive
    assert world.row("w1") == restored
    assert world.shelf.destroyed("w1") == ()  # the record file is used up


def test_destroy_without_archive_packs_nothing(world: World) -> None:
    world.service.create("w1")
    assert world.service.destroy("w1", archive=False).to_json() == {"name": "w1", "destroyed": True,
                                                                     "archive": None}
    assert world.archives.files == {}


def test_a_bot_cannot_take_the_name_of_someone_elses_archived_workspace(world: World) -> None:
    world.service.create("w1")
    world.service.destroy("w1")
    with pytest.raises(Conflict, match="belongs to an archived workspace of user"):
        world.service.create("w1", actor="bot:b1")
    assert world.service.create("w1").status == "ready"  # its owner may


def test_ttl_must_be_positive(world: World) -> None:
    from warden.core.errors import InvalidInput

    with pytest.raises(InvalidInput, match="ttl must be longer than zero"):
        world.service.create("w1", ttl=timedelta(0))
    record = world.service.create("w2", ttl=timedelta(days=7))
    assert record.meta["ttl"] == "1w" and record.expires_at == (T0 + timedelta(days=7)).isoformat()


def test_the_claim_names_this_process_and_node(world: World) -> None:
    world.io.fail["write_new_files"] = Unavailable("stop half-way")
    seen: list[WorkspaceRecord | None] = []
    original = world.io.write_thin_venv

    def peek(*args: object, **kwargs: object) -> None:
        seen.append(world.row("w1"))
        original(*args, **kwargs)  # type: ignore[arg-type]

    world.io.write_thin_venv = peek  # type: ignore[method-assign]
    with pytest.raises(Unavailable):
        world.service.create("w1")
    claim = seen[0]
    assert claim is not None and claim.status == "creating"
    assert (claim.meta["pid"], claim.meta["pid_start"], claim.meta["host"]) == (os.getpid(), 7, "node-a")
