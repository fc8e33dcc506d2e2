"""What the sweeper finds after a killed Warden, held to the same checks in the fakes
(tests/support/fakes: FakeLeftovers, FakeRunCgroups) and on this host (adapters/leftovers.HostLeftovers,
adapters/sandbox/cgroups.HostCgroups): half-written archives, unemptied trash, workspace folders,
and run cgroups whose maker is gone.

The fakes are told what a crash left (`half_written`, `trashed_folder`, ...); the helpers of the
host's side make it on disk (or in the cgroup tree) and do nothing for what the host ignores.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.fakes import FakeLeftovers, FakeRunCgroups
from tests.support.waiting import wait_until
from warden.adapters.leftovers import HostLeftovers
from warden.adapters.processes import start_time
from warden.adapters.sandbox import cgroups
from warden.adapters.workspace_io import TRASH


# -- Leftovers -------------------------------------------------------------------------------
class Host(HostLeftovers):
    def half_written(self, folder: str, name: str, pid: int) -> str:
        """An archive `name` its writer `pid` never finished (`pack_tree`'s `.NAME.PID.tmp`)."""
        path = f"{folder}/.{name}.{pid}.tmp"
        Path(path).write_bytes(b"half")
        return path

    def archive(self, folder: str, name: str) -> None:
        """A finished archive: not a leftover."""
        Path(folder, name).write_bytes(b"whole")

    def trashed_folder(self, root: str, name: str) -> str:
        path = Path(root, TRASH, name)
        (path / "deep").mkdir(parents=True)
        (path / "deep" / "file").write_bytes(b"x")
        return str(path)

    def folder(self, root: str, name: str) -> None:
        Path(root, name).mkdir(parents=True)

    def git_scratch_of(self, workspace: str, name: str, pid: int, *, folder: bool) -> str:
        """What git left in the workspace's `.warden/` (a folder: a clone with a repository in it)."""
        path = Path(workspace, ".warden", name)
        path.parent.mkdir(parents=True, exist_ok=True)
        if folder:
            (path / "repo" / ".git").mkdir(parents=True)
            (path / "repo" / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
        else:
            path.write_bytes(b"DIRC")
        return str(path)

    def not_scratch(self, workspace: str) -> None:
        """Warden's own files in `.warden/`, never git's scratch."""
        for name in ("sandbox.json", "git-remote.json", "git.op.lock", "git-clone-nopid"):
            Path(workspace, ".warden", name).write_text("{}")

    def not_a_folder(self, root: str, name: str) -> None:
        """A file, or a dot-folder, in the workspaces root: no workspace's."""
        path = Path(root, name)
        if name.startswith("."):
            path.mkdir(parents=True, exist_ok=True)
        else:
            path.write_bytes(b"")


class Fake(FakeLeftovers):
    def half_written(self, folder: str, name: str, pid: int) -> str:
        path = f"{folder}/.{name}.{pid}.tmp"
        self.temp.setdefault(folder, []).append((path, pid))
        return path

    def archive(self, folder: str, name: str) -> None:
        return None

    def trashed_folder(self, root: str, name: str) -> str:
        path = f"{root}/{TRASH}/{name}"
        self.trash.setdefault(root, []).append(path)
        return path

    def folder(self, root: str, name: str) -> None:
        self.folder_names.setdefault(root, []).append(name)

    def not_a_folder(self, root: str, name: str) -> None:
        return None

    def git_scratch_of(self, workspace: str, name: str, pid: int, *, folder: bool) -> str:
        path = f"{workspace}/.warden/{name}"
        self.scratch.setdefault(workspace, []).append((path, pid))
        return path

    def not_scratch(self, workspace: str) -> None:
        return None


@pytest.fixture(params=["fake", "host"])
def leftovers(request: pytest.FixtureRequest) -> Host | Fake:
    return Fake() if request.param == "fake" else Host()


def test_half_written_archives_are_found_with_their_writers(leftovers: Host | Fake, tmp_path: Path) -> None:
    folder = tmp_path / "archives"
    assert leftovers.temp_archives(str(folder)) == []  # no archives folder yet
    folder.mkdir()
    leftovers.archive(str(folder), "w1-20260301T120000-abcd.tar.zst")
    half = leftovers.half_written(str(folder), "w2-20260301T120000-beef.tar.zst", 4242)
    assert leftovers.temp_archives(str(folder)) == [(half, 4242)]
    leftovers.remove_scratch(half)
    leftovers.remove_scratch(half)  # gone already: fine
    assert leftovers.temp_archives(str(folder)) == []


def test_trash_is_found_and_emptied_in_the_background(leftovers: Host | Fake, tmp_path: Path) -> None:
    root = str(tmp_path / "workspaces")
    assert leftovers.trashed(root) == []
    second = leftovers.trashed_folder(root, "w2-0002")
    first = leftovers.trashed_folder(root, "w1-0001")
    assert leftovers.trashed(root) == [first, second]
    leftovers.remove_in_background(first)
    wait_until(lambda: leftovers.trashed(root) == [second], message="the trash was not emptied")


def test_the_workspace_folders_of_a_root(leftovers: Host | Fake, tmp_path: Path) -> None:
    root = str(tmp_path / "workspaces")
    assert leftovers.folders(root) == []  # no root yet
    for name in ("w1", "w2"):
        leftovers.folder(root, name)
    for name in (TRASH, ".unarchive-w3", "notes.txt"):
        leftovers.not_a_folder(root, name)
    assert sorted(leftovers.folders(root)) == ["w1", "w2"]


def test_git_scratch_in_a_workspace_is_found_with_its_makers(leftovers: Host | Fake, tmp_path: Path) -> None:
    ws = str(tmp_path / "workspaces" / "w1")
    assert leftovers.git_scratch(ws) == []  # no .warden yet
    clone = leftovers.git_scratch_of(ws, "git-clone-4242-k3j_x9", 4242, folder=True)
    index = leftovers.git_scratch_of(ws, "git-index-77-abc.lock", 77, folder=False)
    leftovers.not_scratch(ws)
    assert leftovers.git_scratch(ws) == sorted([(clone, 4242), (index, 77)])
    leftovers.remove_scratch(clone)
    leftovers.remove_scratch(clone)  # gone already: fine
    leftovers.remove_scratch(index)
    assert leftovers.git_scratch(ws) == []


# -- RunCgroups ------------------------------------------------------------------------------
class HostGroups(cgroups.HostCgroups):
    """The real adapter, making run cgroups by the name the runner gives them."""

    _serial = itertools.count(900_000)

    def __init__(self, base: str) -> None:
        self._base = base
        self._made: list[Path] = []

    def _make(self, pid: int, started: int) -> str:
        path = Path(self._base, f"warden-{pid}-{started}-{next(self._serial)}")
        path.mkdir()
        self._made.append(path)
        return str(path)

    def orphan(self) -> str:
        """The cgroup of a run whose Warden was killed."""
        dead = subprocess.Popen(["true"])
        dead.wait()
        return self._make(dead.pid, 12345)

    def live(self) -> str:
        """The cgroup of a run of this (live) process."""
        started = start_time(os.getpid())
        assert started is not None
        return self._make(os.getpid(), started)

    def close(self) -> None:
        for path in self._made:
            with contextlib.suppress(FileNotFoundError):
                path.rmdir()


class FakeGroups(FakeRunCgroups):
    _serial = itertools.count()

    def orphan(self) -> str:
        path = f"/sys/fs/cgroup/pids/warden-1-1-{next(self._serial)}"
        self.orphans.append(path)
        return path

    def live(self) -> str:
        return f"/sys/fs/cgroup/pids/warden-{os.getpid()}-1-{next(self._serial)}"

    def close(self) -> None:
        return None


@pytest.fixture(params=["fake", "host"])
def run_cgroups(request: pytest.FixtureRequest) -> Iterator[HostGroups | FakeGroups]:
    if request.param == "fake":
        yield FakeGroups()
        return
    support = cgroups.detect()
    spec = support.pids or support.memory
    if spec is None:
        pytest.skip("no writable cgroup for runs here")
    groups = HostGroups(spec[1])
    try:
        yield groups
    finally:
        groups.close()


def test_cgroups_of_killed_runs_are_swept_and_live_ones_kept(run_cgroups: HostGroups | FakeGroups) -> None:
    orphan, live = run_cgroups.orphan(), run_cgroups.live()
    removed = run_cgroups.sweep_orphans()
    assert orphan in removed and live not in removed
    assert orphan not in run_cgroups.sweep_orphans()
