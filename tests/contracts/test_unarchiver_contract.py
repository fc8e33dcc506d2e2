"""The Unarchiver port (core/ports/sandbox.py) held to the same checks in its fake
(tests/support/fakes.FakeUnarchiver, over FakeWorkspaceIO and FakeArchives) and on this host
(adapters/unarchive.HostUnarchiver, over HostWorkspaceIO and HostArchives): a folder packed by
the ArchiveFiles port comes back as it was, whole or not at all, and never over another."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.fakes import FakeArchives, FakeUnarchiver, FakeWorkspaceIO
from warden.adapters.unarchive import HostUnarchiver
from warden.adapters.workspace_io import HostArchives, HostWorkspaceIO
from warden.core.errors import Unavailable
from warden.core.ports import ArchiveFiles, Unarchiver, WorkspaceFolders


@dataclass(frozen=True)
class Shelf:
    """The three ports an archive and its restore go through, all fake or all real."""

    unarchiver: Unarchiver
    archives: ArchiveFiles
    io: WorkspaceFolders

    def plant_link(self, path: str, target: str) -> None:
        if isinstance(self.io, FakeWorkspaceIO):
            self.io.links[path] = target
        else:
            os.symlink(target, path)


@pytest.fixture(params=["fake", "host"])
def shelf(request: pytest.FixtureRequest) -> Shelf:
    if request.param == "fake":
        io = FakeWorkspaceIO()
        archives = FakeArchives(io)
        return Shelf(FakeUnarchiver(io, archives), archives, io)
    return Shelf(HostUnarchiver(), HostArchives(), HostWorkspaceIO())


def _archived(shelf: Shelf, tmp_path: Path) -> tuple[str, str]:
    """A workspace folder with a file, a subfolder and a link, packed and then trashed."""
    folder, archives = f"{tmp_path}/workspaces/w1", f"{tmp_path}/archives"
    shelf.io.make_folder(folder)
    shelf.io.write_atomic(f"{folder}/main.py", b"print(1)\n")
    shelf.io.write_atomic(f"{folder}/data/table.csv", b"a,b\n")
    shelf.plant_link(f"{folder}/latest", "data/table.csv")
    shelf.archives.make_folder(archives)
    archive = f"{archives}/w1-20260301T120000-abcd.tar.zst"
    shelf.archives.pack(folder, archive, max_bytes=None)
    shelf.io.trash(folder)
    assert shelf.io.kind(folder) is None
    return archive, folder


def test_a_restored_folder_is_as_it_was_packed(shelf: Shelf, tmp_path: Path) -> None:
    archive, folder = _archived(shelf, tmp_path)
    shelf.unarchiver.restore(archive, folder)
    assert shelf.io.read_bytes(f"{folder}/main.py") == b"print(1)\n"
    assert shelf.io.kind(f"{folder}/data") == "dir"
    assert shelf.io.read_bytes(f"{folder}/data/table.csv") == b"a,b\n"
    assert shelf.io.kind(f"{folder}/latest") == "symlink"  # links come back as links
    shelf.unarchiver.discard(archive)
    assert not shelf.archives.is_file(archive)
    shelf.unarchiver.discard(archive)  # gone already: fine


def test_a_restore_never_writes_over_a_folder(shelf: Shelf, tmp_path: Path) -> None:
    archive, folder = _archived(shelf, tmp_path)
    shelf.io.make_folder(folder)
    shelf.io.write_atomic(f"{folder}/main.py", b"the person's own\n")
    with pytest.raises(FileExistsError):
        shelf.unarchiver.restore(archive, folder)
    assert shelf.io.read_bytes(f"{folder}/main.py") == b"the person's own\n"
    assert shelf.archives.is_file(archive)


def test_an_archive_that_is_gone_restores_nothing(shelf: Shelf, tmp_path: Path) -> None:
    archive, folder = _archived(shelf, tmp_path)
    shelf.archives.remove(archive)
    with pytest.raises(FileNotFoundError):
        shelf.unarchiver.restore(archive, folder)
    assert shelf.io.kind(folder) is None  # not half there


def test_a_damaged_archive_restores_nothing(shelf: Shelf, tmp_path: Path) -> None:
    """Whole or not at all, and said as Warden's `unavailable` (never zstandard's or tarfile's own
    error, which the CLI would report as an internal error)."""
    archive, folder = _archived(shelf, tmp_path)
    shelf.archives.write_atomic(archive, b"not a zstd frame")
    with pytest.raises(Unavailable, match="damaged"):
        shelf.unarchiver.restore(archive, folder)
    assert shelf.io.kind(folder) is None
