"""`walk_tree` (adapters/safefs/trees.py) on a chain of folders deeper than it keeps open: every
folder seen once, no descriptor left, and going back up costs one open a level (it reopened each
ancestor from the root before: a 4,000-deep chain took minutes)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from warden.adapters.safefs import trees
from warden.adapters.safefs.trees import walk_tree

DEPTH = 700  # well past trees._OPEN_DIRS (256)


def make_chain(root: Path, depth: int) -> None:
    """`depth` nested folders `a`, each beside a folder `b` holding one file (by descriptor: the
    paths are past PATH_MAX)."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(depth):
        os.mkdir("b", dir_fd=fd)
        side = os.open("b", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(os.open("f.txt", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=side))
        os.close(side)
        os.mkdir("a", dir_fd=fd)
        nxt = os.open("a", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = nxt
    os.close(fd)


@pytest.fixture
def chain(tmp_path: Path) -> Iterator[Path]:
    root = tmp_path / "ws"
    root.mkdir()
    make_chain(root, DEPTH)
    yield root
    subprocess.run(["rm", "-rf", str(root)], check=False)  # deeper than shutil.rmtree recurses


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_a_deep_chain_is_walked_whole_with_one_open_a_folder(chain: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    opens = 0
    real_open = os.open

    def counting(*args: object, **kwargs: object) -> int:
        nonlocal opens
        opens += 1
        return real_open(*args, **kwargs)  # type: ignore[arg-type]

    before = open_fds()
    root = os.open(chain, os.O_RDONLY | os.O_DIRECTORY)
    try:
        monkeypatch.setattr(trees.os, "open", counting)
        seen = {(path, tuple(others)) for path, _, others, _ in walk_tree(root)}
        monkeypatch.undo()
    finally:
        os.close(root)
    assert len(seen) == 2 * DEPTH + 1  # each `a`, each `b`, the top
    assert ("/".join(["a"] * (DEPTH - 1) + ["b"]), ("f.txt",)) in seen
    assert open_fds() <= before  # none left open (another test's thread in this process may close its own)
    # One open to enter each folder, one `..` to come back to each closed one: linear. Reopening
    # every closed ancestor from the root by name costs about DEPTH² / 2 (some 100,000 here).
    assert opens < 4 * (2 * DEPTH + 1), opens


def test_a_folder_moved_during_the_walk_is_not_followed_by_its_dots(chain: Path) -> None:
    """A bot moves a deep part of the chain elsewhere in its workspace while it is walked: its `..`
    is no longer the folder walked above it, so that one is reopened by name (or left out)."""
    before = open_fds()
    root = os.open(chain, os.O_RDONLY | os.O_DIRECTORY)
    moved = False
    seen = []
    try:
        for path, _, _, _ in walk_tree(root):
            seen.append(path)
            if path.count("/") == DEPTH - 2 and not moved:  # the bottom of the chain
                deep = os.open("/".join(["a"] * 400), os.O_RDONLY | os.O_DIRECTORY, dir_fd=root)
                os.mkdir("elsewhere", dir_fd=root)
                os.rename("a", "elsewhere/a", src_dir_fd=deep, dst_dir_fd=root)
                os.close(deep)
                moved = True
    finally:
        os.close(root)
    assert moved and open_fds() <= before  # as above: none left open
    assert all(not p.startswith("..") for p in seen)
    # Above the moved part the walk went on from the folders reopened by name: their `b`s are seen.
    assert "/".join(["a"] * 399 + ["b"]) in seen and "b" in seen
