"""`copy_in`: a scratch checkout put into a workspace by descriptor (adapters/safefs/copyin.py).

The folders here stand for a workspace a bot has changed: a link where a folder was, a folder
where git's file goes. Nothing may be written through the link; nothing outside changes.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from warden.adapters.safefs.copyin import _copy_error, copy_in
from warden.core.errors import Conflict, InvalidInput


@pytest.fixture
def scratch(tmp_path: Path) -> Path:
    folder = tmp_path / "scratch"
    (folder / "d" / "e").mkdir(parents=True)
    (folder / "d" / "f.txt").write_text("git's\n")
    (folder / "d" / "e" / "run.sh").write_text("#!/bin/sh\n")
    (folder / "d" / "e" / "run.sh").chmod(0o4755)
    (folder / "link").symlink_to("d/f.txt")
    return folder


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    folder = tmp_path / "ws"
    folder.mkdir()
    return folder


def test_files_links_and_modes_land_and_missing_folders_are_made(scratch: Path, ws: Path) -> None:
    copy_in(str(scratch), str(ws), ["d/e/run.sh", "d/f.txt", "link"])
    assert (ws / "d" / "f.txt").read_text() == "git's\n"
    assert (ws / "d" / "e" / "run.sh").stat().st_mode & 0o7777 == 0o755  # never setuid on the host
    assert os.readlink(ws / "link") == "d/f.txt"
    assert not list(ws.rglob("*warden-tmp"))


def test_a_link_where_a_folder_goes_is_never_written_through(scratch: Path, ws: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (ws / "d").symlink_to(outside)
    with pytest.raises(Conflict, match=r"changed while Warden wrote 'd/e/run\.sh'"):
        copy_in(str(scratch), str(ws), ["d/e/run.sh", "d/f.txt"])
    assert list(outside.iterdir()) == [] and (ws / "d").is_symlink()


def test_a_path_missing_from_the_scratch_is_removed_but_never_a_folder(scratch: Path, ws: Path,
                                                                      tmp_path: Path) -> None:
    (ws / "gone.txt").write_text("x")
    (ws / "nested").mkdir()
    (ws / "nested" / "keep").write_text("a repository of its own, maybe")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim").write_text("v")
    (ws / "via").symlink_to(outside)
    copy_in(str(scratch), str(ws), ["gone.txt", "nested", "via/victim", "absent/x"])
    assert not (ws / "gone.txt").exists() and (ws / "nested" / "keep").exists()
    assert (outside / "victim").read_text() == "v"  # the removal did not follow `via`


@pytest.mark.parametrize("path", ["../x", "/etc/passwd", "a//b", "a/./b", ""])
def test_a_path_that_could_climb_is_refused(scratch: Path, ws: Path, path: str) -> None:
    with pytest.raises(InvalidInput):
        copy_in(str(scratch), str(ws), [path])


def test_a_folder_removed_on_the_way_as_warden_writes_is_the_workspace_changing() -> None:
    """A bot's process removing a folder between Warden's open of it and its write there (ENOENT)
    is the tree changing under the copy, as a link planted there is: a conflict (exit 5), not an
    error without a cause (exit 1, "workspace folder …: No such file or directory", met by the
    link-race test's racer under CI)."""
    refused = _copy_error(OSError(errno.ENOENT, "No such file or directory"), "/w", "d/f001.txt")
    assert isinstance(refused, Conflict) and refused.rule == "git.worktree", refused
