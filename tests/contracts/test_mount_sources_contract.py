"""The MountSources port (core/ports/sandbox.py) held to the same checks in its fake
(tests/support/fakes.FakeMountSources) and on this host (adapters/sandbox/mountsrc.HostMountSources):
which allowed paths a run mounts, by descriptor, and which it skips and why.

The host's adapter judges what is on disk against Warden's home; the fake is told what a path
is (`link`, `forget`, `state`), and a helper for the other side makes it so or does nothing.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.fakes import FakeMountSources
from warden.adapters.sandbox.mountsrc import HostMountSources
from warden.core.bwrap_argv import Bind


@dataclass(frozen=True)
class Layout:
    """Warden's home, its workspaces root, this run's workspace and a person's folder outside."""

    home: str
    workspace: str
    outside: str


@pytest.fixture
def layout(tmp_path: Path) -> Layout:
    home = tmp_path / "home" / ".warden"
    for folder in (home / "keys", home / "workspaces" / "w1", home / "workspaces" / "w2", tmp_path / "site"):
        folder.mkdir(parents=True)
    return Layout(str(home), str(home / "workspaces" / "w1"), str(tmp_path / "site"))


class Host(HostMountSources):
    def link(self, path: str, target: str) -> None:
        os.symlink(target, path)

    def forget(self, path: str) -> None:
        """Nothing is there: nothing to do."""

    def state(self, path: str) -> None:
        """Warden's home: the adapter was made with it."""

    def is_open(self, fd: int) -> bool:
        try:
            os.fstat(fd)
        except OSError:
            return False
        return True


class Fake(FakeMountSources):
    def link(self, path: str, target: str) -> None:
        self.unsafe[path] = "it goes through a symbolic link"

    def forget(self, path: str) -> None:
        self.missing.add(path)

    def state(self, path: str) -> None:
        self.unsafe[path] = "it is or holds Warden's home"

    def is_open(self, fd: int) -> bool:
        return fd in self.open


@pytest.fixture(params=["fake", "host"])
def sources(request: pytest.FixtureRequest, layout: Layout) -> Host | Fake:
    if request.param == "fake":
        fake = Fake()
        fake.state(layout.home)
        return fake
    return Host(layout.home, os.path.dirname(layout.workspace))


def _skipped_for(skipped: list[str], path: str) -> bool:
    """Whether `skipped` says "PATH (why)" for `path`."""
    return any(line.startswith(f"{path} (") and line.endswith(")") and len(line) > len(path) + 3
               for line in skipped)


def test_paths_in_the_workspace_are_left_to_the_runner(sources: Host | Fake, layout: Layout) -> None:
    binds = [Bind(f"{layout.workspace}/docs", "ro"), Bind(layout.workspace, "rw")]
    with sources.open_binds(binds, layout.workspace) as (kept, fds, skipped):
        assert (kept, fds, skipped) == (binds, [], [])


def test_a_real_folder_outside_is_opened_for_the_run_only(sources: Host | Fake, layout: Layout) -> None:
    bind = Bind(layout.outside, "rw")
    with sources.open_binds([bind], layout.workspace) as (kept, fds, skipped):
        assert kept == [bind] and skipped == []
        [(path, fd)] = fds
        assert path == layout.outside and sources.is_open(fd)
    assert not sources.is_open(fd)


def test_a_missing_path_is_not_mounted_and_not_reported(sources: Host | Fake, layout: Layout) -> None:
    gone = f"{layout.outside}-gone"
    sources.forget(gone)
    with sources.open_binds([Bind(gone, "ro"), Bind(f"{gone}/below", "ro")], layout.workspace) as opened:
        assert opened == ([], [], [])


def test_a_path_through_a_link_is_skipped_with_the_reason(sources: Host | Fake, layout: Layout) -> None:
    link = f"{layout.outside}-link"
    sources.link(link, layout.outside)
    binds = [Bind(link, "rw"), Bind(f"{link}/sub", "ro")]
    with sources.open_binds(binds, layout.workspace) as (kept, fds, skipped):
        assert kept == [] and fds == []
        assert _skipped_for(skipped, link) and _skipped_for(skipped, f"{link}/sub")


def test_wardens_own_state_is_never_mounted(sources: Host | Fake, layout: Layout) -> None:
    other = f"{os.path.dirname(layout.workspace)}/w2"
    binds = [Bind(layout.home, "ro"), Bind(f"{layout.home}/keys", "ro"), Bind(other, "rw")]
    with sources.open_binds(binds, layout.workspace) as (kept, fds, skipped):
        assert kept == [] and fds == []
        assert all(_skipped_for(skipped, bind.path) for bind in binds)


def test_beneath_an_opened_folder_only_real_entries_open(sources: Host | Fake, layout: Layout) -> None:
    os.mkdir(f"{layout.outside}/.git")
    sources.link(f"{layout.outside}/.GIT", "/etc")
    sources.forget(f"{layout.outside}/nothing")
    with sources.open_binds([Bind(layout.outside, "rw")], layout.workspace) as (_, [(_, folder)], _):
        with sources.open_beneath(folder, ".git") as fd:
            assert fd is not None and sources.is_open(fd)
        assert not sources.is_open(fd)
        for rel in (".GIT", "nothing"):
            with sources.open_beneath(folder, rel) as none:
                assert none is None
