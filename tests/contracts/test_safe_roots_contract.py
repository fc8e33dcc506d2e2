"""The SafeRoots port and the WorkspaceRoot it opens (core/ports/files.py) held to the same checks
in the fake (tests/support/fakes.FakeSafeRoots over a FakeWorkspaceIO) and on this host
(adapters/safefs.HostSafeRoots): the file operations bots ask for, a link anywhere refused and
never followed, errors as Warden names them. Also NpmTarballs, which FakeSafeRoots fakes too
(adapters/sandbox/tool_runner.NpmTarballFiles on the host)."""

from __future__ import annotations

import io
import json
import os
import tarfile
from pathlib import Path

import pytest

from tests.support.fakes import FakeSafeRoots, FakeWorkspaceIO
from warden.adapters.safefs import HostSafeRoots
from warden.adapters.sandbox.tool_runner import NpmTarballFiles
from warden.core.errors import Conflict, Denied, InvalidInput, NotFound, TooLarge


class Host(HostSafeRoots):
    """The real adapter, with helpers to lay out the host the way a test of the fake does."""

    def folder(self, path: str) -> None:
        os.makedirs(path)

    def plant_link(self, path: str, target: str) -> None:
        os.symlink(target, path)


class Fake(FakeSafeRoots):
    def __init__(self) -> None:
        self.io = FakeWorkspaceIO()
        super().__init__(self.io)

    def folder(self, path: str) -> None:
        self.io.make_folder(path)

    def plant_link(self, path: str, target: str) -> None:
        self.io.links[path] = target


@pytest.fixture(params=["fake", "host"])
def roots(request: pytest.FixtureRequest) -> Host | Fake:
    return Fake() if request.param == "fake" else Host()


@pytest.fixture
def ws(roots: Host | Fake, tmp_path: Path) -> str:
    path = f"{tmp_path}/workspaces/w1"
    roots.folder(path)
    return path


def test_only_a_real_folder_opens(roots: Host | Fake, ws: str, tmp_path: Path) -> None:
    with pytest.raises(NotFound):
        roots.open(f"{tmp_path}/workspaces/gone")
    roots.plant_link(f"{tmp_path}/workspaces/w2", ws)
    with pytest.raises(Denied):
        roots.open(f"{tmp_path}/workspaces/w2")


def test_files_are_written_read_and_described(roots: Host | Fake, ws: str) -> None:
    with roots.open(ws) as root:
        assert root.write_text("src/app/main.py", "print('ü')\n") == len("print('ü')\n".encode())  # parents made
        assert root.write_bytes("data.bin", b"\x00\x01") == 2
        assert root.read_text("src/app/main.py") == "print('ü')\n"
        assert root.read_bytes("data.bin") == b"\x00\x01"
        entry = root.stat("data.bin")
        assert (entry.name, entry.type, entry.size) == ("data.bin", "file", 2)
        assert root.stat("src").type == "dir" and root.stat("").type == "dir"
        assert root.exists("src/app") and not root.exists("src/nothing")
        assert [(e.name, e.type) for e in root.list("")] == [("data.bin", "file"), ("src", "dir")]
        assert [e.name for e in root.list("/src/app")] == ["main.py"]


def test_what_is_not_a_file_to_read_or_write(roots: Host | Fake, ws: str) -> None:
    with roots.open(ws) as root:
        root.write_bytes("f.txt", b"x")
        root.write_bytes("latin1.txt", b"\xe9t\xe9")
        root.mkdir("d")
        with pytest.raises(NotFound):
            root.read_bytes("nothing")
        with pytest.raises(InvalidInput):
            root.read_bytes("d")
        with pytest.raises(InvalidInput):
            root.write_bytes("d", b"x")
        with pytest.raises(InvalidInput):
            root.read_text("latin1.txt")
        with pytest.raises(NotFound):
            root.list("nothing")
        with pytest.raises(NotFound):
            root.list("f.txt")
        with pytest.raises(NotFound):
            root.read_bytes("f.txt/below")
        for bad in ("../w2/f.txt", "d/../f.txt", "./f.txt"):
            with pytest.raises(InvalidInput):
                root.read_bytes(bad)


def test_folders_are_made_once(roots: Host | Fake, ws: str) -> None:
    with roots.open(ws) as root:
        assert root.mkdir("a/b/c") is True  # parents made
        assert root.mkdir("a/b/c") is False and root.mkdir("a") is False and root.mkdir("") is False
        root.write_bytes("f.txt", b"x")
        with pytest.raises(Conflict):
            root.mkdir("f.txt")


def test_reads_and_writes_past_the_limit_are_refused(roots: Host | Fake, ws: str) -> None:
    with roots.open(ws) as root:
        root.write_bytes("big.bin", b"x" * 100)
    with roots.open(ws, max_bytes=10) as root:
        with pytest.raises(TooLarge):
            root.read_bytes("big.bin")
        with pytest.raises(TooLarge):
            root.write_bytes("new.bin", b"y" * 11)
        assert not root.exists("new.bin")
        assert root.write_bytes("small.bin", b"y" * 10) == 10


def test_links_are_described_and_deleted_but_never_followed(roots: Host | Fake, ws: str, tmp_path: Path) -> None:
    outside = f"{tmp_path}/outside"
    roots.folder(outside)
    with roots.open(outside) as there:
        there.write_bytes("secret", b"host secret")
    roots.plant_link(f"{ws}/secret", f"{outside}/secret")
    roots.plant_link(f"{ws}/out", outside)
    with roots.open(ws) as root:
        for path in ("secret", "out/secret"):
            with pytest.raises(Denied):
                root.read_bytes(path)
            with pytest.raises(Denied):
                root.write_bytes(path, b"overwritten")
        with pytest.raises(Denied):
            root.list("out")
        entry = root.stat("secret")
        assert (entry.type, entry.size) == ("symlink", 0)  # where it points is not shown
        assert root.exists("out")
        assert [(e.name, e.type) for e in root.list("")] == [("out", "symlink"), ("secret", "symlink")]
        assert root.delete("secret") == "symlink"
        assert not root.exists("secret")
    with roots.open(outside) as there:
        assert there.read_bytes("secret") == b"host secret"  # the target is untouched


def test_deletes(roots: Host | Fake, ws: str) -> None:
    with roots.open(ws) as root:
        root.write_bytes("tree/a/f.txt", b"x")
        root.mkdir("empty")
        root.write_bytes("g.txt", b"y")
        assert root.delete("g.txt") == "file"
        assert root.delete("empty") == "dir"
        with pytest.raises(Conflict):
            root.delete("tree")
        assert root.exists("tree/a/f.txt")
        assert root.delete("tree", recursive=True) == "dir"
        assert [e.name for e in root.list("")] == []
        with pytest.raises(NotFound):
            root.delete("g.txt")
        with pytest.raises(InvalidInput):
            root.delete("")


# -- NpmTarballs -----------------------------------------------------------------------------
def _tarball(path: Path, members: dict[str, bytes]) -> str:
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return str(path)


def _reader(kind: str, tarball: str, name: str | None) -> Fake | NpmTarballFiles:
    """The fake (told what the tarball holds) or the host's reader."""
    if kind == "host":
        return NpmTarballFiles()
    fake = Fake()
    if name is not None:
        fake.tarballs[tarball] = name
    return fake


@pytest.mark.parametrize("kind", ["fake", "host"])
def test_an_npm_tarball_names_its_package(kind: str, tmp_path: Path) -> None:
    tarball = _tarball(tmp_path / "pkg.tgz", {"package/package.json": json.dumps({"name": "@me/pkg"}).encode(),
                                              "package/index.js": b""})
    assert _reader(kind, tarball, "@me/pkg").package_name(tarball) == "@me/pkg"


@pytest.mark.parametrize("kind", ["fake", "host"])
@pytest.mark.parametrize("content", ["no-package-json", "not-a-tarball"])
def test_a_file_that_is_no_npm_tarball_is_invalid_input(kind: str, content: str, tmp_path: Path) -> None:
    if content == "no-package-json":
        tarball = _tarball(tmp_path / "other.tgz", {"README": b"hi"})
    else:
        tarball = str(tmp_path / "notes.tgz")
        Path(tarball).write_bytes(b"just text")
    with pytest.raises(InvalidInput):
        _reader(kind, tarball, None).package_name(tarball)
