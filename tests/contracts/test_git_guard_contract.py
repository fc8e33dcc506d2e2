"""The GitGuards port (core/ports/sandbox.py) held to the same checks in its fake
(tests/support/fakes.FakeGitGuards) and on this host's folders (adapters/gitguard.HostGitGuards):
a `.git` a person makes between runs is theirs and protected; anything else that appears (while
a bot was active, or a repository look-alike) is moved aside.

The fake is told what appeared in a folder (`make_git`); the host's guard finds it on disk. A
moved structure keeps its name on the fake; the host adds QUARANTINE_SUFFIX and a tag, so the
checks compare the start of each moved path.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.fakes import FakeGitGuards
from warden.adapters.gitguard import HostGitGuards
from warden.core.gitcontrol import GitSweep


class Host(HostGitGuards):
    def make_git(self, folder: str, rel: str, *, look_alike: bool = False) -> None:
        """Something appears at `rel` in `folder`: a `.git` folder, or a repository look-alike."""
        path = Path(folder, rel)
        path.mkdir(parents=True)
        if look_alike:
            (path / "HEAD").write_text("ref: refs/heads/main\n")
            (path / "refs").mkdir()


class Fake(FakeGitGuards):
    def make_git(self, folder: str, rel: str, *, look_alike: bool = False) -> None:
        guard = self.guard(folder)
        guard.new = (*guard.new, rel)


@pytest.fixture(params=["fake", "host"])
def guards(request: pytest.FixtureRequest) -> Host | Fake:
    return Fake() if request.param == "fake" else Host()


@pytest.fixture
def workspace(tmp_path: Path) -> str:
    ws = tmp_path / "root" / "w1"
    ws.mkdir(parents=True)
    return str(ws)


def _moved(sweep: GitSweep, *starts: str) -> bool:
    """Whether the sweep moved exactly one structure per start, each named from it."""
    return len(sweep.quarantined) == len(starts) and all(
        any(moved.startswith(start) for moved in sweep.quarantined) for start in starts)


def test_a_git_folder_made_between_runs_is_the_persons(guards: Host | Fake, workspace: str) -> None:
    guards.make_git(workspace, ".git")
    guard = guards.workspace(workspace)
    assert guard.before(bot_active=False) == GitSweep((".git",), ())
    assert guard.after() == GitSweep((".git",), ())  # the person's stays where it is
    # Known as the person's by now: protected even while another bot is active.
    assert guards.workspace(workspace).before(bot_active=True) == GitSweep((".git",), ())


def test_what_appears_during_a_run_is_moved_aside_once(guards: Host | Fake, workspace: str) -> None:
    guard = guards.workspace(workspace)
    assert guard.before(bot_active=False) == GitSweep((), ())
    guards.make_git(workspace, "sub/.git")  # the command made it
    assert _moved(guard.after(), "sub/.git")
    assert guard.after() == GitSweep((), ())
    assert guard.before(bot_active=False) == GitSweep((), ())  # what was moved aside is never adopted


def test_a_new_git_folder_while_a_bot_was_active_is_not_adopted(guards: Host | Fake, workspace: str) -> None:
    guards.make_git(workspace, ".git")
    sweep = guards.workspace(workspace).before(bot_active=True)
    assert sweep.protected == () and _moved(sweep, ".git")


def test_a_repository_look_alike_is_never_adopted(guards: Host | Fake, workspace: str) -> None:
    guards.make_git(workspace, "fake-repo", look_alike=True)
    sweep = guards.workspace(workspace).before(bot_active=False)
    assert sweep.protected == () and _moved(sweep, "fake-repo")


@pytest.fixture
def allowed(tmp_path: Path) -> Iterator[tuple[str, int]]:
    """An allowed read-write folder outside the workspace, open as the run opens it."""
    folder = tmp_path / "projects" / "site"
    folder.mkdir(parents=True)
    fd = os.open(folder, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        yield str(folder), fd
    finally:
        os.close(fd)


def test_an_allowed_folder_is_guarded_with_its_state_in_the_workspace(
        guards: Host | Fake, workspace: str, allowed: tuple[str, int]) -> None:
    folder, fd = allowed
    guards.make_git(folder, ".git")
    guard = guards.allowed_folder(folder, fd, workspace)
    assert guard.before(bot_active=False) == GitSweep((".git",), ())
    guards.make_git(folder, "build/.git")
    sweep = guard.after()
    assert sweep.protected == (".git",) and _moved(sweep, "build/.git")
    assert not os.path.exists(f"{folder}/.warden")  # nothing of Warden's is left in the person's folder
