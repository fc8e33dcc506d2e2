"""Lifecycle operations and the crash sweeper on fakes of their ports: no disk, no database, no
processes — milliseconds each.

The same services run on SQLite, real folders, archives and layers in test_lifecycle.py,
test_crash.py and tests/interfaces/test_races.py.
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
    FakeGitGuards,
    FakeHostProcesses,
    FakeLeftovers,
    FakeRunCgroups,
    FakeUnarchiver,
    FakeWorkspaceIO,
)
from warden.core.errors import Conflict, Locked, NotFound
from warden.core.runs import RunInProgress
from warden.core.settings import resolve
from warden.core.workspaces import WorkspaceRecord
from warden.services.archives import ArchiveShelf
from warden.services.audit import AuditLog
from warden.services.folders import FolderService
from warden.services.health import HealthReport, RepairResult
from warden.services.leases import LeaseService
from warden.services.lifecycle import LifecycleService
from warden.services.quota import QuotaService
from warden.services.runs_in_progress import RunsInProgress
from warden.services.sweeper import Sweeper
from warden.services.workspaces import WorkspaceService

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
HOME = "/home/u/.warden"
ROOT = f"{HOME}/workspaces"


class Health:
    """The health service as lifecycle asks it: `issues[name]` until a repair clears them
    (unless `stubborn`), and the installer each repair was given."""

    def __init__(self) -> None:
        self.issues: dict[str, list[str]] = {}
        self.stubborn: set[str] = set()
        self.repairs: list[tuple[str, object]] = []

    def check(self, record: WorkspaceRecord) -> HealthReport:
        return HealthReport(record.name, record.status, record.path, configured=True,
                            issues=list(self.issues.get(record.name, [])))

    def repair(self, record: WorkspaceRecord, *, install: object = None) -> RepairResult:
        self.repairs.append((record.name, install))
        before = self.check(record)
        fixed = [] if record.name in self.stubborn else list(before.issues)
        if record.name not in self.stubborn:
            self.issues.pop(record.name, None)
        after = self.check(record)
        return RepairResult(fixed, list(after.issues), list(before.issues), after)


class Installs:
    """No sandboxed installer here."""

    def available(self) -> bool:
        return False


class Layers:
    """Half-built layers the next sweep removes."""

    def __init__(self) -> None:
        self.store = self
        self.half_built = 0

    def sweep(self, *, dry_run: bool = False) -> int:
        if dry_run:
            return self.half_built
        swept, self.half_built = self.half_built, 0
        return swept


class World:
    """LifecycleService and Sweeper on a WorkspaceService wired to fakes, and the fakes."""

    def __init__(self, tmp_path: Path) -> None:
        self.now = T0
        settings = resolve({}, {})
        self.registry = MemoryRegistry()
        self.audit = AuditLog(self.registry, lambda: self.now)
        self.io = FakeWorkspaceIO()
        self.archives = FakeArchives(self.io)
        self.processes = FakeHostProcesses()
        self.leases = LeaseService(self.registry, self.processes, lambda: self.now, "node-a")
        quota = QuotaService(settings, Path(HOME), FakeDisk())
        folders = FolderService(self.io, FakeGitDefuser, settings, quota=lambda: quota)
        shelf = ArchiveShelf(self.archives, Path(f"{HOME}/archives"), lambda: self.now, settings)
        self.workspaces = WorkspaceService(self.registry, lambda: self.audit, lambda: self.now, root_dir=Path(ROOT),
                                           folders=lambda: folders, shelf=shelf, processes=self.processes,
                                           node="node-a", leases=lambda: self.leases)
        self.health = Health()
        self.layers = Layers()
        self.unarchiver = FakeUnarchiver(self.io, self.archives)
        self.lifecycle = LifecycleService(workspaces=self.workspaces, audit=self.audit, processes=self.processes,
                                          health=lambda: self.health, installs=Installs,  # type: ignore[arg-type]
                                          layers=lambda: self.layers,  # type: ignore[arg-type, return-value]
                                          unarchiver=self.unarchiver, clock=lambda: self.now)
        self.git = FakeGitGuards()
        self.cgroups = FakeRunCgroups()
        self.leftovers = FakeLeftovers()
        self.sweeper = Sweeper(registry=self.registry, workspaces=self.workspaces,
                               runs=RunsInProgress(self.audit, self.processes, lambda: self.now, "node-a"),
                               layers=lambda: self.layers, processes=self.processes,  # type: ignore[arg-type, return-value]
                               cgroups=self.cgroups, git=self.git, leftovers=self.leftovers, home=Path(HOME),
                               root_dir=Path(ROOT), archives=Path(f"{HOME}/archives"))

    def add(self, name: str, status: str = "ready", *, kind: str = "user", last_accessed: datetime = T0,
            **meta: object) -> str:
        path = f"{ROOT}/{name}"
        if status != "archived":
            self.io.make_folder(path)
            self.io.write_atomic(f"{path}/main.py", b"print(1)\n")
        record = WorkspaceRecord(id=f"ws_{name}", name=name, path=path, type=kind, status=status,
                                 created_at=T0.isoformat(), last_accessed=last_accessed.isoformat(), meta=meta)
        with self.registry.transaction() as tx:
            tx.workspaces.insert(record)
        return path

    def status(self, name: str) -> str:
        with self.registry.transaction(write=False) as tx:
            record = tx.workspaces.get(name)
        return record.status if record is not None else "gone"

    def actions(self) -> list[tuple[str, str]]:
        return [(e.action, e.target) for e in self.audit.list(limit=1000)]


@pytest.fixture
def world(tmp_path: Path) -> World:
    return World(tmp_path)


# -- suspend / resume ----------------------------------------------------------------------------
def test_suspend_stops_the_processes_and_marks_it_suspended(world: World) -> None:
    path = world.add("w1")
    suspended = world.lifecycle.suspend("w1")
    assert suspended.to_json() == {"name": "w1", "status": "suspended", "stopped": []}
    # Once to drain the runs in its way before the lease, once more under it.
    assert world.processes.stopped == [path, path]
    assert world.status("w1") == "suspended"
    assert ("workspace.suspended", "w1") in world.actions()
    assert world.lifecycle.suspend("w1").to_json()["stopped"] == []  # again: nothing to do
    assert world.processes.stopped == [path, path]


def test_suspend_waits_for_no_one_holding_the_workspace(world: World) -> None:
    world.add("w1")
    with world.leases.hold("w1", "exclusive", "archive"), pytest.raises(Locked):
        world.lifecycle.suspend("w1")
    assert world.status("w1") == "ready"


def test_resume_repairs_what_is_wrong(world: World) -> None:
    world.add("w1", status="suspended")
    world.health.issues["w1"] = ["Python venv missing"]
    resumed = world.lifecycle.resume("w1")
    assert (resumed.status, resumed.repaired, resumed.failed) == ("ready", ("Python venv missing",), ())
    assert resumed.to_json()["health"]["issues"] == []
    assert world.status("w1") == "ready"


def test_resume_leaves_it_broken_when_repair_fails(world: World) -> None:
    world.add("w1", status="suspended")
    world.health.issues["w1"] = ["layer missing"]
    world.health.stubborn.add("w1")
    assert world.lifecycle.resume("w1").status == "broken"
    assert world.status("w1") == "broken"


def test_resume_refuses_an_archived_workspace(world: World) -> None:
    world.add("w1", status="archived")
    with pytest.raises(Conflict, match="warden unarchive w1"):
        world.lifecycle.resume("w1")


# -- health --------------------------------------------------------------------------------------
def test_repair_makes_a_broken_workspace_ready_and_says_so(world: World) -> None:
    world.add("w1", status="broken")
    world.health.issues["w1"] = ["not configured"]
    repaired = world.lifecycle.health("w1", repair=True)
    data = repaired.to_json()
    assert repaired.healthy and data["status"] == "ready"
    assert (data["fixed"], data["failed"]) == (["not configured"], [])
    assert world.status("w1") == "ready"
    assert world.health.repairs == [("w1", None)]  # no installer: none is available here


def test_health_without_repair_changes_nothing(world: World) -> None:
    world.add("w1")
    world.health.issues["w1"] = ["not configured"]
    report = world.lifecycle.health("w1")
    assert not report.healthy and world.health.repairs == []


# -- archive / unarchive -------------------------------------------------------------------------
def test_archive_packs_the_folder_and_frees_it(world: World) -> None:
    path = world.add("w1")
    archived = world.lifecycle.archive("w1")
    assert archived.archive is not None and archived.archive.startswith(f"{HOME}/archives/w1-20260301T120000-")
    assert archived.to_json() == {"name": "w1", "status": "archived", "archive": archived.archive,
                                  "size": archived.size}
    assert world.archives.packed == {archived.archive: path}
    assert world.io.trashed == [path] and world.status("w1") == "archived"
    # A second archive finds the first one's result (no size: nothing was packed).
    assert world.lifecycle.archive("w1").to_json() == {"name": "w1", "status": "archived",
                                                       "archive": archived.archive}


def test_unarchive_restores_the_folder_and_drops_the_archive(world: World) -> None:
    path = world.add("w1")
    archive = world.lifecycle.archive("w1").archive
    assert archive is not None
    unarchived = world.lifecycle.unarchive("w1")
    assert unarchived.to_json() == {"name": "w1", "status": "ready", "path": path, "repaired": [], "failed": []}
    assert world.unarchiver.restored == [(archive, path)]
    assert not world.archives.is_file(archive) and world.status("w1") == "ready"


def test_unarchive_never_writes_over_a_folder_that_is_there(world: World) -> None:
    path = world.add("w1")
    world.lifecycle.archive("w1")
    world.io.make_folder(path)
    with pytest.raises(Conflict, match="move it away"):
        world.lifecycle.unarchive("w1")
    assert world.status("w1") == "archived"


def test_unarchive_without_its_archive_says_how_to_drop_the_entry(world: World) -> None:
    world.add("w1", status="archived", archive=f"{HOME}/archives/w1-gone.tar.zst")
    with pytest.raises(NotFound, match="--no-archive"):
        world.lifecycle.unarchive("w1")


# -- cleanup -------------------------------------------------------------------------------------
def test_cleanup_archives_idle_workspaces_and_destroys_idle_temporary_ones(world: World) -> None:
    world.add("idle")
    world.add("temp", kind="temporary")
    world.add("fresh", last_accessed=T0 + timedelta(days=6))
    world.now = T0 + timedelta(days=8)
    plan = world.lifecycle.cleanup(timedelta(days=7), dry_run=True)
    assert json.dumps(plan.to_json()) == json.dumps({
        "dry_run": True, "older_than": "1w", "older_than_s": 7 * 86400, "actions": [
            {"name": "idle", "action": "archive", "reason": "idle", "last_accessed": T0.isoformat()},
            {"name": "temp", "action": "destroy", "reason": "idle", "last_accessed": T0.isoformat()}]})
    assert world.status("idle") == "ready"  # a dry run changes nothing
    world.layers.half_built = 2
    done = world.lifecycle.cleanup(timedelta(days=7))
    idle, temp = done.to_json()["actions"]
    assert list(idle) == ["name", "action", "reason", "last_accessed", "archive", "done"]
    assert idle["done"] and idle["archive"].startswith(f"{HOME}/archives/idle-")
    assert list(temp) == ["name", "action", "reason", "last_accessed", "done"] and temp["done"]
    assert (world.status("idle"), world.status("temp"), world.status("fresh")) == ("archived", "gone", "ready")
    assert world.layers.half_built == 0


def test_one_workspace_cleanup_cannot_archive_does_not_stop_the_others(world: World) -> None:
    world.add("a")
    world.add("b")
    world.now = T0 + timedelta(days=8)
    with world.leases.hold("a", "exclusive", "repair"):
        done = world.lifecycle.cleanup(timedelta(days=7))
    first, second = done.actions
    assert (first.done, second.done) == (False, True)
    assert first.error is not None and "repair" in first.error
    assert "archive" not in first.to_json()


def test_layers_in_use(world: World) -> None:
    world.add("a", layers=["py-1", "node-1"])
    world.add("b", layers=["py-1"])
    assert world.lifecycle.layers_in_use() == {"py-1": ["a", "b"], "node-1": ["a"]}


# -- the crash sweeper ---------------------------------------------------------------------------
def test_the_sweeper_removes_what_dead_processes_left(world: World) -> None:
    world.add("w1")
    archives, trash = f"{HOME}/archives", f"{ROOT}/.trash/old-1234"
    world.leftovers.temp[archives] = [(f"{archives}/.w1.tar.zst.4242.tmp", 4242),
                                      (f"{archives}/.w2.tar.zst.{os.getpid()}.tmp", os.getpid())]
    world.leftovers.trash[ROOT] = [trash]
    world.leftovers.folder_names[ROOT] = ["w1", "someones-notes"]
    dead_clone = f"{ROOT}/w1/.warden/git-clone-4242-x1"
    world.leftovers.scratch[f"{ROOT}/w1"] = [(dead_clone, 4242),
                                             (f"{ROOT}/w1/.warden/git-index-{os.getpid()}-x2", os.getpid())]
    world.cgroups.orphans = ["/sys/fs/cgroup/warden-4242-7-0"]
    world.layers.half_built = 1
    # A whole archive no row names, of w1 whose folder is there (its archive, or unarchive, was
    # killed between its two writes), and one of a name no row has: only the first goes.
    stale, unknown = f"{archives}/w1-20260101T000000-abcd.tar.zst", f"{archives}/w9-20260101T000000-abcd.tar.zst"
    world.archives.files.update({stale: b"tar.zst", unknown: b"tar.zst"})
    world.io.write_atomic(f"{ROOT}/w1/.workspace.json", json.dumps({"id": "ws_w1"}).encode())
    with world.registry.transaction() as tx:
        tx.runs.insert(RunInProgress("r1", "w1", "bot:a", "node-a", 4242, 7, T0.isoformat(), ("sleep", "9")))

    planned = world.sweeper.sweep(dry_run=True)
    assert planned.to_json() == {"dry_run": True, "orphan_sandboxes": [], "cgroups": [],
                                 "temp_files": [f"{archives}/.w1.tar.zst.4242.tmp"], "layers": 1, "trash": [trash],
                                 "lost_runs": [], "orphan_folders": [f"{ROOT}/someones-notes"],
                                 "git_scratch": [dead_clone], "stale_archives": [stale], "destroyed_folders": []}
    assert world.leftovers.removed == [] and world.leftovers.background == [] and stale in world.archives.files

    swept = world.sweeper.sweep()
    assert swept.to_json() == {"dry_run": False, "orphan_sandboxes": [],
                               "cgroups": ["/sys/fs/cgroup/warden-4242-7-0"],
                               "temp_files": [f"{archives}/.w1.tar.zst.4242.tmp"], "layers": 1, "trash": [trash],
                               "lost_runs": [{"run_id": "r1", "workspace": "w1"}],
                               "orphan_folders": [f"{ROOT}/someones-notes"], "git_scratch": [dead_clone],
                               "stale_archives": [stale], "destroyed_folders": []}
    assert stale not in world.archives.files and unknown in world.archives.files
    # Their writers are gone; the others' run.
    assert world.leftovers.removed == [f"{archives}/.w1.tar.zst.4242.tmp", dead_clone]
    assert world.leftovers.background == [trash]
    assert ("run.lost", "w1") in world.actions()
    # The dead run never had its git sweep: it is made now.
    assert world.git.guard(f"{ROOT}/w1").calls == ["after"]
