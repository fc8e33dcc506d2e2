"""A pull's and a discard's writes (safefs/copyin.py), attacked: what an upstream commit or a
bot's tree may make Warden write, and what a legitimate change of shape (a folder becoming a
file, a file becoming a folder) must still do."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.services import test_git as base
from tests.services.test_git import git
from warden.core.errors import InvalidInput
from warden.services.git import GitService

pytestmark = base.pytestmark
# The fixtures of tests/services/test_git.py: a workspace `demo` cloned from a bare `remote`.
record, remote, service, ws = base.record, base.remote, base.service, base.ws


def upstream(remote: Path, tmp_path: Path, change: dict[str, str | None], *, name: str = "other") -> None:
    """Another clone of `remote` pushes one commit: path -> text (None: removed)."""
    other = tmp_path / name
    git("clone", "-q", str(remote), str(other))
    for path, text in change.items():
        target = other / path
        if text is None:
            git("rm", "-rqf", "--", path, cwd=other)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    git("add", "-A", cwd=other)
    git("commit", "-qm", "upstream", cwd=other)
    git("push", "-q", "origin", "main", cwd=other)


def test_a_pull_never_writes_wardens_own_files(ws: Path, service: GitService, remote: Path,
                                               tmp_path: Path) -> None:
    zones = ws / ".warden" / "zones.yaml"
    upstream(remote, tmp_path, {".warden/zones.yaml": "zones: {granted: {path: /}}\n",
                                ".workspace.json": '{"forged": true}\n'})
    before = git("rev-parse", "HEAD", cwd=ws)
    with pytest.raises(InvalidInput, match=r"\.warden"):
        service.pull("demo")
    assert not zones.exists() and (ws / ".workspace.json").read_text() == "{}"
    assert git("rev-parse", "HEAD", cwd=ws) == before


def test_a_pull_turns_a_folder_into_a_file(ws: Path, service: GitService, remote: Path, tmp_path: Path) -> None:
    upstream(remote, tmp_path, {"docs/b.txt": None})
    upstream(remote, tmp_path, {"docs": "now a file\n"}, name="other2")
    service.pull("demo")
    assert (ws / "docs").read_text() == "now a file\n"
    assert git("status", "--porcelain", cwd=ws) == ""


def test_a_pull_turns_a_file_into_a_folder(ws: Path, service: GitService, remote: Path, tmp_path: Path) -> None:
    upstream(remote, tmp_path, {"a.txt": None, "a.txt/inner": "inside\n"})
    service.pull("demo")
    assert (ws / "a.txt" / "inner").read_text() == "inside\n"
    assert git("status", "--porcelain", cwd=ws) == ""


def test_a_pull_that_removes_a_folders_last_file_removes_the_folder(ws: Path, service: GitService, remote: Path,
                                                                    tmp_path: Path) -> None:
    upstream(remote, tmp_path, {"docs/b.txt": None})
    service.pull("demo")
    assert not (ws / "docs").exists()  # as git's own merge leaves it


def test_a_pull_writes_names_with_newlines(ws: Path, service: GitService, remote: Path, tmp_path: Path) -> None:
    upstream(remote, tmp_path, {"odd\nname/x\ny.txt": "z\n", "sp ace*.txt": "s\n"})
    service.pull("demo")
    assert (ws / "odd\nname" / "x\ny.txt").read_text() == "z\n" and (ws / "sp ace*.txt").exists()
    assert git("status", "--porcelain", cwd=ws) == ""


def test_a_pull_turns_a_folder_into_a_link_and_reads_nothing_through_it(
        ws: Path, service: GitService, remote: Path, tmp_path: Path) -> None:
    """Upstream makes `docs` (holding b.txt) a link to a folder of the person's holding a b.txt of
    its own: the link lands as git would land it, and that b.txt is never copied in."""
    private = tmp_path / "private"
    private.mkdir()
    (private / "b.txt").write_text("the person's secret\n")
    other = tmp_path / "other"
    git("clone", "-q", str(remote), str(other))
    git("rm", "-rqf", "docs", cwd=other)
    (other / "docs").symlink_to(private)
    git("add", "-A", cwd=other)
    git("commit", "-qm", "docs is a link", cwd=other)
    git("push", "-q", "origin", "main", cwd=other)
    service.pull("demo")
    assert os.readlink(ws / "docs") == str(private)
    assert (private / "b.txt").read_text() == "the person's secret\n" and list(private.iterdir()) == [private / "b.txt"]
    assert git("status", "--porcelain", cwd=ws) == ""


def test_copy_in_never_reads_beneath_a_link_of_the_scratch(tmp_path: Path) -> None:
    """A path beneath a link git checked out names a file elsewhere, not git's entry: it is one
    the commit lacks (removed, if a file), never copied in."""
    from warden.adapters.safefs.copyin import copy_in

    private = tmp_path / "private"
    private.mkdir()
    (private / "id").write_text("secret\n")
    scratch, workspace = tmp_path / "scratch", tmp_path / "ws"
    scratch.mkdir()
    (scratch / "x").symlink_to(private)
    (workspace / "x").mkdir(parents=True)
    copy_in(str(scratch), str(workspace), ["x/id"])
    assert not (workspace / "x" / "id").exists()
