"""Blob unpacking refuses every way out; workspace archives round-trip."""

from __future__ import annotations

import base64
import io
import json
import os
import subprocess
import tarfile
import zipfile
from pathlib import Path
from typing import TextIO

import pytest

from tests.support.ptys import redraws_on_a_terminal
from warden.adapters.archive import BlobLimits, pack_tree, unpack_blob, unpack_tree
from warden.core.errors import InvalidInput, TooLarge


def tgz(entries: list[tuple[str, str, bytes | str]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, kind, value in entries:
            info = tarfile.TarInfo(name)
            if kind == "file":
                assert isinstance(value, bytes)
                info.size = len(value)
                tar.addfile(info, io.BytesIO(value))
            elif kind == "dir":
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            elif kind == "symlink":
                info.type, info.linkname = tarfile.SYMTYPE, str(value)
                tar.addfile(info)
            elif kind == "hardlink":
                info.type, info.linkname = tarfile.LNKTYPE, str(value)
                tar.addfile(info)
            elif kind == "fifo":
                info.type = tarfile.FIFOTYPE
                tar.addfile(info)
    return buf.getvalue()


def zipped(files: dict[str, bytes], links: dict[str, str] | None = None) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in files.items():
            zf.writestr(name, data)
        for name, target in (links or {}).items():
            info = zipfile.ZipInfo(name)
            info.external_attr = (0o120777 << 16)
            zf.writestr(info, target)
    return buf.getvalue()


@pytest.fixture
def root(tmp_path: Path) -> Path:
    path = tmp_path / "ws"
    path.mkdir()
    return path


def test_tar_gz_zip_base64_and_json_unpack(root: Path, tmp_path: Path) -> None:
    blob = tgz([("proj/", "dir", b""), ("proj/main.py", "file", b"print(1)\n"), ("proj/link", "symlink", "main.py")])
    assert unpack_blob(blob, root, BlobLimits())["bytes"] == 9
    assert (root / "proj" / "main.py").read_text() == "print(1)\n"
    assert os.readlink(root / "proj" / "link") == "main.py"

    other = tmp_path / "z"
    other.mkdir()
    unpack_blob(base64.b64encode(zipped({"a/b.txt": b"zip"})), other, BlobLimits())
    assert (other / "a" / "b.txt").read_bytes() == b"zip"

    seed = tmp_path / "seed"
    seed.mkdir()
    doc = {"kind": "workspace_context", "content": {"files": {"notes/x.md": "# hi\n"}}}
    unpack_blob(base64.b64encode(json.dumps(doc).encode()), seed, BlobLimits())
    assert (seed / "notes" / "x.md").read_text() == "# hi\n"


@pytest.mark.parametrize(("entries", "message"), [
    ([("../evil", "file", b"x")], "climbs out"),
    (([("a/../../evil", "file", b"x")]), "climbs out"),
    ([("/etc/evil", "file", b"x")], "absolute"),
    ([("l", "symlink", "/etc")], "outside the project"),
    ([("d/l", "symlink", "../../x")], "outside the project"),
    # Each link looks harmless alone; together `a` leads to the parent of the workspace.
    ([("b", "symlink", "."), ("c", "dir", b""), ("c/up", "symlink", ".."), ("a", "symlink", "c/up/..")],
     "outside the project"),
    ([("x", "file", b"1"), ("y", "hardlink", "x")], "hard link"),
    ([("p", "fifo", b"")], "special file"),
    ([("x", "file", b"1"), ("x", "file", b"2")], "twice"),
])
def test_escapes_are_refused(root: Path, entries: list[tuple[str, str, bytes | str]], message: str) -> None:
    with pytest.raises(InvalidInput) as info:
        unpack_blob(tgz(entries), root, BlobLimits())
    assert message in info.value.message
    assert not (root.parent / "evil").exists()


def test_links_written_earlier_are_never_written_through(root: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    # A link inside the project, then a file "through" it: the file is created before any link.
    blob = tgz([("sub", "dir", b""), ("ln", "symlink", "sub"), ("ln/f.txt", "file", b"x")])
    with pytest.raises(InvalidInput):
        unpack_blob(blob, root, BlobLimits())
    assert list(outside.iterdir()) == []


def test_zip_symlink_out_is_refused(root: Path) -> None:
    with pytest.raises(InvalidInput):
        unpack_blob(zipped({"a.txt": b"1"}, {"evil": "/root"}), root, BlobLimits())


def test_size_and_count_caps_count_real_bytes(root: Path, tmp_path: Path) -> None:
    # A zip bomb: 5 MiB of zeros compresses to a few KiB; the cap counts what is written.
    bomb = zipped({"zeros.bin": b"\0" * (5 << 20)})
    assert len(bomb) < 64 << 10
    with pytest.raises(TooLarge):
        unpack_blob(bomb, root, BlobLimits(max_bytes=1 << 20))
    many = tmp_path / "many"
    many.mkdir()
    with pytest.raises(TooLarge):
        unpack_blob(tgz([(f"f{i}", "file", b"x") for i in range(20)]), many, BlobLimits(max_files=10))


def test_garbage_is_refused(root: Path) -> None:
    for blob in (b"not an archive at all!", base64.b64encode(b"still nothing"), b"{not json"):
        with pytest.raises(InvalidInput):
            unpack_blob(blob, root, BlobLimits())


def test_pack_and_unpack_round_trip(tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "a.txt").write_text("hello")
    (src / "run.sh").write_text("#!/bin/sh\n")
    (src / "run.sh").chmod(0o755)
    os.symlink("/usr/bin/python3", src / "python")  # a venv's link to its interpreter
    os.link(src / "a.txt", src / "sub" / "hard.txt")
    os.mkfifo(src / "fifo")
    archive = tmp_path / "archives" / "x.tar.zst"
    assert pack_tree(src, archive) > 0
    out = tmp_path / "out"
    out.mkdir()
    unpack_tree(archive, out, BlobLimits(allow_links_out=True))
    assert (out / "a.txt").read_text() == "hello"
    assert (out / "sub" / "hard.txt").read_text() == "hello"
    assert os.stat(out / "sub" / "hard.txt").st_nlink == 1
    assert os.readlink(out / "python") == "/usr/bin/python3"
    assert os.access(out / "run.sh", os.X_OK)
    assert not (out / "fifo").exists()
    assert oct(archive.stat().st_mode & 0o777) == "0o600"


@pytest.mark.parametrize("name", [".warden/sandbox.json", "./.warden/zones.yaml", ".workspace.json",
                                  ".workspace_configured", ".git/hooks/pre-commit", ".git/config", ".bashrc"])
def test_blob_cannot_carry_files_warden_protects(tmp_path: Path, name: str) -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        info = tarfile.TarInfo(name)
        info.size = 2
        tar.addfile(info, io.BytesIO(b"{}"))
    root = tmp_path / "ws"
    root.mkdir()
    with pytest.raises(InvalidInput, match=r"protects|git control"):
        unpack_blob(buf.getvalue(), root, BlobLimits(max_bytes=10**6, max_files=100))


def test_packing_with_progress_moves_through_the_bytes_on_a_terminal(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    # `warden archive` on a terminal: the bar follows the bytes packed (a big file too, piece
    # by piece), redrawn on one row; the archive is the same as without it.
    root = tmp_path / "ws"
    root.mkdir()
    (root / "big.bin").write_bytes(os.urandom(3 << 20))
    for i in range(5):
        (root / f"f{i}.txt").write_bytes(os.urandom(100_000))
    sizes = []

    def draw(stream: TextIO) -> None:
        with monkeypatch.context() as patched:  # stderr is the terminal while it packs, and only then
            patched.setattr("sys.stderr", stream)
            sizes.append(pack_tree(root, tmp_path / "a.tar.zst", progress=True))

    shown = [part for part in redraws_on_a_terminal(draw) if "% of the bytes packed" in part]
    percents = [int(part.rsplit(": ", 1)[1].split("%")[0]) for part in shown]
    assert percents[-1] == 100 and len(set(percents)) > 10 and percents == sorted(percents), percents
    out = tmp_path / "out"
    out.mkdir()
    unpack_tree(tmp_path / "a.tar.zst", out, BlobLimits())
    assert (out / "big.bin").read_bytes() == (root / "big.bin").read_bytes() and sizes[0] > 3 << 20


def test_a_small_folder_packs_without_a_bar(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Under a mebibyte a bar said "packing 0.0 MiB: 34/1422 of the bytes packed" and was gone at once.
    root = tmp_path / "ws"
    root.mkdir()
    (root / "notes.txt").write_bytes(b"n" * 1400)
    pack_tree(root, tmp_path / "a.tar.zst", progress=True)
    assert capsys.readouterr().err == ""
    (root / "big.bin").write_bytes(os.urandom(1 << 20))
    pack_tree(root, tmp_path / "b.tar.zst", progress=True)
    assert "of the bytes packed" in capsys.readouterr().err


def _nest(root: Path, depth: int, name: str) -> None:
    """`depth` folders named `name`, one in the other, and a file `leaf` in the deepest, made by
    descriptor as a bot's `mkdir d; cd d` loop makes them (the whole path may pass PATH_MAX)."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(depth):
        os.mkdir(name, dir_fd=fd)
        child = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = child
    leaf = os.open("leaf", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)
    os.write(leaf, b"deepest\n")
    os.close(leaf)
    os.close(fd)


def _leaf(root: Path, name: str) -> tuple[int, bytes]:
    fd, depth = os.open(root, os.O_RDONLY | os.O_DIRECTORY), 0
    try:
        while True:
            try:
                child = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            except FileNotFoundError:
                leaf = os.open("leaf", os.O_RDONLY, dir_fd=fd)
                with os.fdopen(leaf, "rb") as handle:
                    return depth, handle.read()
            os.close(fd)
            fd, depth = child, depth + 1
    finally:
        os.close(fd)


def test_a_tree_nested_past_the_recursion_limit_and_path_max_is_archived_and_unarchived(
        root: Path, tmp_path: Path) -> None:
    """A bot's folders nested 1,500 deep made `warden archive` (and the janitor's archiving of an
    idle workspace, and `warden health`'s disk usage) an internal error: os.walk recursed past
    Python's limit (RecursionError). The tree is walked by descriptor now, so a path longer than
    PATH_MAX (a bot's `mkdir d; cd d` loop has no bound) is packed too."""
    from warden.adapters.unarchive import HostUnarchiver
    from warden.adapters.workspace_io import HostWorkspaceIO

    back = tmp_path / "back" / "ws"
    try:
        _nest(root, 1500, "d")
        _nest(root, 900, "x" * 8)  # a path of ~8,100 bytes: past PATH_MAX (4,096)
        assert HostWorkspaceIO().disk_usage(str(root)) >= 2 * 4096
        target = tmp_path / "ws.tar.zst"
        pack_tree(root, target, max_bytes=1 << 20)
        HostUnarchiver().restore(str(target), str(back))
        assert _leaf(back, "d") == (1500, b"deepest\n")
        assert _leaf(back, "x" * 8) == (900, b"deepest\n")
    finally:  # pytest's own clean-up of tmp_path recurses (shutil.rmtree)
        subprocess.run(["rm", "-rf", str(root), str(back)], check=False)
