"""SafeRoot.move on a real filesystem, with openat2 and with the walk: both parents opened by
descriptor beneath the root, renameat2(RENAME_NOREPLACE), no link followed, nothing replaced."""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from warden.adapters import safefs
from warden.adapters.safefs import SafeRoot
from warden.adapters.safefs import rename as rename_mod
from warden.core.errors import Conflict, Denied, InvalidInput, NotFound

SECRET = b"OUTSIDE SECRET"


@pytest.fixture(params=["openat2", "walk"])
def mode(request: pytest.FixtureRequest) -> str:
    if request.param == "openat2" and not safefs.OPENAT2_AVAILABLE:
        pytest.skip("this kernel has no openat2")
    return str(request.param)


@pytest.fixture
def layout(tmp_path: Path) -> Path:
    (tmp_path / "work").mkdir()
    (tmp_path / "work-evil").mkdir()  # the prefix sibling of CVE-2025-53110
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret").write_bytes(SECRET)
    return tmp_path


@pytest.fixture
def root(layout: Path, mode: str) -> Iterator[SafeRoot]:
    with SafeRoot.open(layout / "work", use_openat2=mode == "openat2") as handle:
        yield handle


def test_a_file_and_a_folder_move_and_parents_are_made(root: SafeRoot, layout: Path) -> None:
    work = layout / "work"
    (work / "a.txt").write_text("a")
    (work / "dir" / "sub").mkdir(parents=True)
    (work / "dir" / "sub" / "f").write_text("f")
    assert root.move("/a.txt", "/new/deep/b.txt") == "file"
    assert (work / "new" / "deep" / "b.txt").read_text() == "a" and not (work / "a.txt").exists()
    assert root.move("/dir", "/moved") == "dir"
    assert (work / "moved" / "sub" / "f").read_text() == "f"


def test_an_existing_destination_is_never_replaced(root: SafeRoot, layout: Path) -> None:
    work = layout / "work"
    (work / "a").write_text("a")
    (work / "b").write_text("keep")
    with pytest.raises(Conflict, match="already exists"):
        root.move("/a", "/b")
    assert (work / "b").read_text() == "keep" and (work / "a").exists()
    (work / "d").mkdir()
    with pytest.raises(Conflict):
        root.move("/a", "/d")  # an empty folder is not replaced either (plain rename would)


def test_a_folder_never_moves_into_itself(root: SafeRoot, layout: Path) -> None:
    (layout / "work" / "d").mkdir()
    with pytest.raises(InvalidInput, match="into itself"):
        root.move("/d", "/d/inner")
    with pytest.raises(InvalidInput):
        root.move("/", "/x")
    with pytest.raises(InvalidInput):
        root.move("/d", "/")


def test_symbolic_links_on_either_side_are_refused(root: SafeRoot, layout: Path) -> None:
    work = layout / "work"
    (work / "a").write_text("a")
    (work / "out").symlink_to(layout / "outside")
    (work / "evil").symlink_to(layout / "work-evil")
    with pytest.raises(Denied, match="symbolic link"):
        root.move("/a", "/out/stolen")  # a destination parent that is a link
    with pytest.raises(Denied, match="symbolic link"):
        root.move("/out/secret", "/mine")  # a source parent that is a link
    with pytest.raises(Denied, match="symbolic link"):
        root.move("/a", "/evil/a")
    assert not (layout / "outside" / "stolen").exists()
    assert (layout / "outside" / "secret").read_bytes() == SECRET
    assert list((layout / "work-evil").iterdir()) == []


def test_a_link_itself_moves_as_a_link_never_its_target(root: SafeRoot, layout: Path) -> None:
    work = layout / "work"
    (work / "ln").symlink_to(layout / "outside" / "secret")
    assert root.move("/ln", "/ln2") == "symlink"
    assert (work / "ln2").is_symlink() and (layout / "outside" / "secret").read_bytes() == SECRET


def test_dotdot_is_not_a_path_here(root: SafeRoot, layout: Path) -> None:
    (layout / "work" / "a").write_text("a")
    with pytest.raises(InvalidInput, match="not canonical"):
        root.move("/a", "/../outside/a")
    with pytest.raises(InvalidInput, match="not canonical"):
        root.move("/../outside/secret", "/s")


def test_a_hard_linked_file_is_not_moved(root: SafeRoot, layout: Path) -> None:
    work = layout / "work"
    os.link(layout / "outside" / "secret", work / "hl")
    with pytest.raises(Denied, match="hard links"):
        root.move("/hl", "/hl2")
    assert (work / "hl").exists() and not (work / "hl2").exists()


def test_missing_source_is_not_found(root: SafeRoot) -> None:
    with pytest.raises(NotFound):
        root.move("/nope", "/x")


def test_a_parent_swapped_for_a_link_after_opening_changes_nothing(root: SafeRoot, layout: Path) -> None:
    """The rename goes by the held descriptors: swapping the destination's parent for a link
    to the outside between opening it and renaming still lands in the folder first opened."""
    work = layout / "work"
    (work / "a").write_text("a")
    (work / "dst").mkdir()
    real = rename_mod.CALL
    assert real is not None

    def swapping(src_dir: int, src: bytes, dst_dir: int, dst: bytes, flags: int) -> int:
        os.rename(work / "dst", work / "dst-held")
        os.symlink(layout / "outside", work / "dst")
        return real(src_dir, src, dst_dir, dst, flags)

    rename_mod.CALL = swapping
    try:
        root.move("/a", "/dst/a")
    finally:
        rename_mod.CALL = real
    assert (work / "dst-held" / "a").read_text() == "a"
    assert not (layout / "outside" / "a").exists()


def test_without_the_flag_a_file_still_moves_without_replacing(root: SafeRoot, layout: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    work = layout / "work"
    (work / "a").write_text("a")
    (work / "b").write_text("keep")

    def unsupported(*_: object) -> int:
        import ctypes

        ctypes.set_errno(errno.EINVAL)
        return -1

    monkeypatch.setattr(rename_mod, "CALL", unsupported)
    with pytest.raises(Conflict):
        root.move("/a", "/b")
    assert root.move("/a", "/c") == "file"
    assert (work / "c").read_text() == "a" and (work / "b").read_text() == "keep"


def test_concurrent_moves_to_one_name_land_once(layout: Path, mode: str) -> None:
    work = layout / "work"
    for i in range(8):
        (work / f"s{i}").write_text(str(i))
    results: list[str] = []

    def one(i: int) -> None:
        with SafeRoot.open(work, use_openat2=mode == "openat2") as handle:
            try:
                handle.move(f"/s{i}", "/target")
                results.append("ok")
            except Conflict:
                results.append("conflict")

    threads = [threading.Thread(target=one, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results.count("ok") == 1 and results.count("conflict") == 7
    assert len([p for p in work.iterdir() if p.name.startswith("s")]) == 7


def test_an_approved_move_killed_between_its_copy_and_the_sources_removal_finishes(root: SafeRoot,
                                                                                     layout: Path) -> None:
    """An approved move copies the approved bytes to a new file, then removes the source. Killed
    in between and answered again, it found its own copy in the way and was refused ("already
    exists"), for good. Its copy (one name, the approved bytes) now counts as placed: the source
    goes. Anything else at the destination is still never replaced."""
    import hashlib

    work = layout / "work"
    (work / "drafts").mkdir()
    (work / "final").mkdir()
    data = b"as approved\n"
    digest = hashlib.sha256(data).hexdigest()
    (work / "drafts" / "a.md").write_bytes(data)
    (work / "final" / "a.md").write_bytes(data)  # the copy the killed move placed
    assert root.move("/drafts/a.md", "/final/a.md", sha256=digest) == "file"
    assert not (work / "drafts" / "a.md").exists() and (work / "final" / "a.md").read_bytes() == data
    (work / "drafts" / "b.md").write_bytes(data)
    (work / "final" / "b.md").write_bytes(b"someone else's\n")
    with pytest.raises(Conflict, match="already exists"):
        root.move("/drafts/b.md", "/final/b.md", sha256=digest)
    assert (work / "final" / "b.md").read_bytes() == b"someone else's\n" and (work / "drafts" / "b.md").exists()
    (work / "keep.md").write_bytes(data)
    os.link(work / "keep.md", work / "final" / "c.md")  # the approved bytes under two names: not its copy
    (work / "drafts" / "c.md").write_bytes(data)
    with pytest.raises(Conflict, match="already exists"):
        root.move("/drafts/c.md", "/final/c.md", sha256=digest)
    assert (work / "drafts" / "c.md").exists()


@pytest.mark.parametrize("target", ["../cache/copy", "{outside}/copy"])
def test_an_approved_move_onto_a_link_is_refused_and_the_source_kept(root: SafeRoot, layout: Path,
                                                                    target: str) -> None:
    """A link a bot made at the destination (a zone whose deletes ask lets a run make links, not
    remove files) to a file of its own holding the approved bytes was taken for the move's own
    copy: the source was removed, the approved bytes left only behind the link, where the bot may
    delete them (a link out of the workspace: any path of the host was opened). A link is never
    its copy, nor followed: the move is refused and the source stays."""
    import hashlib

    work = layout / "work"
    for folder in ("z", "cache"):
        (work / folder).mkdir()
    data = b"the person's report\n"
    (work / "z" / "report.md").write_bytes(data)
    (work / "cache" / "copy").write_bytes(data)
    (layout / "outside" / "copy").write_bytes(data)
    (work / "z" / "report2.md").symlink_to(target.format(outside=layout / "outside"))
    with pytest.raises(Conflict, match="already exists"):
        root.move("/z/report.md", "/z/report2.md", sha256=hashlib.sha256(data).hexdigest())
    assert (work / "z" / "report.md").read_bytes() == data
    assert (work / "z" / "report2.md").is_symlink()
