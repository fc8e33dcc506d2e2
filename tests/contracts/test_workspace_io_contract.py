"""The host workspace I/O ports (core/ports: WorkspaceFolders, WorkspaceReads, ArchiveFiles)
held to the same checks in their fakes (tests/support/fakes.py) and their real adapters
(adapters/workspace_io.py), so a service tested on the fakes behaves the same on the host."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.fakes import FakeArchives, FakeWorkspaceIO
from warden.adapters.workspace_io import HostArchives, HostWorkspaceIO
from warden.core.errors import TooLarge
from warden.core.ports import ArchiveFiles, WorkspaceFolders


class Host(HostWorkspaceIO):
    """The real adapter, with a helper to plant a bot's link the way a test of the fake does."""

    def plant_link(self, path: str, target: str) -> None:
        os.symlink(target, path)


class Fake(FakeWorkspaceIO):
    def plant_link(self, path: str, target: str) -> None:
        self.links[path] = target


@pytest.fixture(params=["fake", "host"])
def io(request: pytest.FixtureRequest) -> Iterator[Host | Fake]:
    yield Fake() if request.param == "fake" else Host()


def test_make_folder_claims_a_new_folder_once(io: Host | Fake, tmp_path: Path) -> None:
    ws = f"{tmp_path}/root/w1"
    assert io.kind(ws) is None and not io.exists(ws)
    io.make_folder(ws)
    assert io.kind(ws) == "dir" and io.is_dir(ws) and not io.is_file(ws)
    with pytest.raises(FileExistsError):
        io.make_folder(ws)
    io.plant_link(f"{tmp_path}/root/w2", "/nowhere")
    with pytest.raises(FileExistsError):
        io.make_folder(f"{tmp_path}/root/w2")  # a dangling link holds the name too
    assert io.kind(f"{tmp_path}/root/w2") == "symlink" and not io.exists(f"{tmp_path}/root/w2")


def test_new_project_files_never_replace_what_is_there(io: Host | Fake, tmp_path: Path) -> None:
    ws = f"{tmp_path}/w"
    io.make_folder(ws)
    io.write_atomic(f"{ws}/pyproject.toml", b"mine")
    io.write_new_files(ws, {"pyproject.toml": "template's", ".gitignore": ".venv/\n"})
    assert io.read_bytes(f"{ws}/pyproject.toml") == b"mine"
    assert io.read_bytes(f"{ws}/.gitignore") == b".venv/\n"
    assert io.read_bytes(f"{ws}/missing") is None


def test_trash_takes_the_folder_away_at_once(io: Host | Fake, tmp_path: Path) -> None:
    ws = f"{tmp_path}/w"
    io.make_folder(ws)
    io.write_atomic(f"{ws}/a/b.txt", b"x")
    io.trash(ws)
    assert io.kind(ws) is None
    io.trash(ws)  # gone already: nothing to do


def test_bounded_reads_do_not_follow_links(io: Host | Fake, tmp_path: Path) -> None:
    ws = f"{tmp_path}/w"
    io.make_folder(ws)
    io.write_atomic(f"{tmp_path}/secret", b"host secret")
    io.write_atomic(f"{ws}/small", b"12345")
    io.plant_link(f"{ws}/link", f"{tmp_path}/secret")
    assert io.read_small(ws, "small") == b"12345"
    assert io.read_small(ws, "small", 4) is None
    assert io.read_small(ws, "link") is None
    assert io.read_small(ws, "missing") is None


def test_heads_are_read_beneath_the_root_no_link_followed(io: Host | Fake, tmp_path: Path) -> None:
    ws = f"{tmp_path}/w"
    io.make_folder(ws)
    io.write_atomic(f"{tmp_path}/secret", b"host secret")
    io.write_atomic(f"{ws}/small", b"12345")
    io.plant_link(f"{ws}/link", f"{tmp_path}/secret")
    heads = io.read_heads(ws, ["small", "link", "missing", "../secret", "small"], 3)
    assert list(heads) == [b"123", None, None, None, b"123"]
    assert list(io.read_heads(f"{tmp_path}/gone", ["small"], 3)) == [None]


def test_heads_are_read_beneath_one_open_of_the_root(tmp_path: Path) -> None:
    # A bot's venv may hold 500,000 package folders: an open of the root for each (0.6 ms) made
    # `warden health` take minutes. The root is opened once: the files read are those of the
    # folder as it was when the reads began, even once another takes its name.
    io = Host()
    ws = tmp_path / "w"
    ws.mkdir()
    (ws / "a").write_bytes(b"first")
    (ws / "b").write_bytes(b"first")
    heads = io.read_heads(str(ws), ["a", "b"], 5)
    assert next(heads) == b"first"
    ws.rename(tmp_path / "moved")
    ws.mkdir()
    (ws / "b").write_bytes(b"other")
    assert next(heads) == b"first"


def test_regular_dirs_lists_real_folders_only(io: Host | Fake, tmp_path: Path) -> None:
    ws = f"{tmp_path}/w"
    io.make_folder(f"{ws}/site/a-1.dist-info")
    io.make_folder(f"{ws}/site/b-2.dist-info")
    io.make_folder(f"{tmp_path}/elsewhere.dist-info")
    io.plant_link(f"{ws}/site/c-3.dist-info", f"{tmp_path}/elsewhere.dist-info")
    io.write_atomic(f"{ws}/site/d-4.dist-info.txt", b"")
    assert io.regular_dirs(ws, "site", ".dist-info") == ["a-1.dist-info", "b-2.dist-info"]


def test_links_in_names_the_links_of_a_folder_reached_through_none(io: Host | Fake, tmp_path: Path) -> None:
    ws = f"{tmp_path}/w"
    io.make_folder(f"{ws}/node_modules/real")
    io.make_folder(f"{tmp_path}/host")
    io.plant_link(f"{ws}/node_modules/linked", f"{tmp_path}/host")
    io.plant_link(f"{tmp_path}/host/a", "/nowhere")
    io.plant_link(f"{ws}/elsewhere", f"{tmp_path}/host")
    assert io.links_in(ws, "node_modules") == ["linked"]
    assert io.links_in(ws, "elsewhere") == [] and io.links_in(ws, "missing") == []  # a link on the way, or nothing


def test_disk_usage_counts_the_files_of_the_folder(io: Host | Fake, tmp_path: Path) -> None:
    ws = f"{tmp_path}/w"
    io.make_folder(ws)
    empty = io.disk_usage(ws)
    io.write_atomic(f"{ws}/f", b"x" * 10000)
    assert io.disk_usage(ws) >= empty + 10000


def test_a_blob_past_its_limit_is_refused(io: Host | Fake, tmp_path: Path) -> None:
    ws = f"{tmp_path}/w"
    io.make_folder(ws)
    if isinstance(io, Fake):
        blob = json.dumps({"main.py": "x" * 100}).encode()
    else:
        blob = json.dumps({"files": {"main.py": "x" * 100}}).encode()
    with pytest.raises(TooLarge):
        io.unpack_blob(blob, ws, max_bytes=10, max_files=10, disk_bytes=None, disk_files=None)
    counts = io.unpack_blob(blob, ws, max_bytes=1 << 20, max_files=10, disk_bytes=None, disk_files=None)
    assert counts["files"] == 1 and io.read_bytes(f"{ws}/main.py") == b"x" * 100


@pytest.fixture(params=["fake", "host"])
def archives(request: pytest.FixtureRequest) -> tuple[ArchiveFiles, WorkspaceFolders]:
    if request.param == "fake":
        io = FakeWorkspaceIO()
        return FakeArchives(io), io
    return HostArchives(), HostWorkspaceIO()


def test_archives_pack_and_keep_records(archives: tuple[ArchiveFiles, WorkspaceFolders], tmp_path: Path) -> None:
    shelf, io = archives
    folder = f"{tmp_path}/archives"
    assert shelf.names(folder) == []
    io.make_folder(f"{tmp_path}/w")
    io.write_atomic(f"{tmp_path}/w/f", b"data")
    shelf.make_folder(folder)
    shelf.make_folder(folder)  # there already: fine
    target = f"{folder}/w-{time.strftime('%Y%m%dT%H%M%S')}-abcd.tar.zst"
    assert shelf.pack(f"{tmp_path}/w", target, max_bytes=None) > 0
    with pytest.raises(TooLarge):
        shelf.pack(f"{tmp_path}/w", f"{folder}/too-big.tar.zst", max_bytes=1)
    shelf.write_atomic(target + ".record.json", b"{}")
    assert shelf.is_file(target) and shelf.read_bytes(target + ".record.json") == b"{}"
    assert shelf.names(folder) == sorted([os.path.basename(target), os.path.basename(target) + ".record.json"])
    shelf.remove(target + ".record.json")
    shelf.remove(target + ".record.json")
    assert shelf.read_bytes(target + ".record.json") is None and not shelf.is_file(target + ".record.json")


def test_changed_at_is_when_the_entry_itself_changed_and_none_for_nothing(io: Host | Fake, tmp_path: Path) -> None:
    ws = f"{tmp_path}/changed"
    assert io.changed_at(ws) is None
    io.make_folder(ws)
    made = io.changed_at(ws)
    assert made is not None and made <= time.time()
    io.plant_link(f"{tmp_path}/link", "/nowhere")  # the link itself, not what it names
    assert io.changed_at(f"{tmp_path}/link") is not None
