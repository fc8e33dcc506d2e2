"""The git guard's sweep of a workspace whose watched tree a run kept (adapters/gitguard.scan_again):
it lists again only what the tree's events say changed, and must find exactly what a full scan
finds; wherever the tree cannot tell for sure, it is a full scan."""

from __future__ import annotations

import ctypes
import os
import random
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import warden.adapters.quota as quota_adapter
from warden.adapters import disk_usage, gitguard
from warden.adapters.disk_usage import UsageTree
from warden.adapters.gitguard import GitGuard, scan, scan_again
from warden.adapters.quota import Watcher
from warden.core.gitcontrol import GitControl
from warden.core.quota import Quota

ROOMY = Quota(max_bytes=1 << 40, max_files=1 << 30, min_free=0)
# Names that matter to the guard (and to git), in every letter case it checks, and plain ones.
NAMES = ["a", "b", "c", "node_modules", ".git", ".GIT", ".Git", "HEAD", "refs", "objects", "commondir", "f.js"]


def _kept(ws: Path) -> UsageTree:
    """The workspace's tree, kept as a process running it again keeps it (the first run gives
    its tree back, the second keeps it)."""
    for _ in range(2):
        with Watcher(str(ws), ROOMY):
            pass
    tree = quota_adapter._KEPT.get(str(ws))
    assert tree is not None
    return tree


@pytest.fixture
def listings(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many sweeps listed only what changed (one entry per incremental sweep)."""
    counted: list[int] = []
    update = gitguard._update

    def counting(*args: object, **kwargs: object) -> None:
        counted.append(1)
        update(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(gitguard, "_update", counting)
    return counted


def _same(ws: Path) -> list[GitControl]:
    """The incremental sweep's findings, checked against a fresh full scan."""
    got, want = sorted(scan_again(str(ws))), sorted(scan(str(ws)))
    assert got == want
    return got


def _big(ws: Path, folders: int = 300) -> None:
    for i in range(folders):
        folder = ws / "node_modules" / f"p{i // 30}" / f"lib{i % 30}"
        folder.mkdir(parents=True)
        (folder / "index.js").touch()


def _swept(tmp_path: Path) -> tuple[Path, UsageTree]:
    """A workspace of 30 folders whose tree a process keeps, swept once (its listing kept)."""
    ws = tmp_path / "ws"
    ws.mkdir()
    _big(ws, 30)
    tree = _kept(ws)
    _same(ws)
    return ws, tree


# -- random changes against a full scan ---------------------------------------------------------
_libc = ctypes.CDLL(None, use_errno=True)


def _exchange(a: Path, b: Path) -> None:
    """renameat2(RENAME_EXCHANGE): two names swap inodes in one step."""
    if _libc.renameat2(-100, str(a).encode(), -100, str(b).encode(), 2) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


class Changes:
    """Random changes to a real tree, as a bot or a person could make them."""

    def __init__(self, ws: Path, out: Path, rng: random.Random) -> None:
        self.ws, self.out, self.rng = ws, out, rng
        self.log: list[str] = []
        self.ops: list[Callable[[], str]] = [
            self.mkdir, self.mkdir, self.make_file, self.make_file, self.symlink, self.hardlink, self.remove,
            self.rmtree, self.move_folder, self.move_folder, self.move_file, self.move_out, self.move_in,
            self.exchange, self.lock_up, self.look_alike, self.deep_git,
        ]

    def walk(self) -> Iterator[tuple[str, list[str], list[str]]]:
        """The tree, without the guard's own `.warden/` (read-only to bots)."""
        for top, dirs, files in os.walk(self.ws):
            if top == str(self.ws):
                dirs[:] = [d for d in dirs if d != ".warden"]
                files = [f for f in files if f != ".warden"]
            yield top, dirs, files

    def folders(self) -> list[Path]:
        found = [self.ws]
        for top, dirs, _ in self.walk():
            found += [Path(top, d) for d in dirs]
        return found

    def entries(self) -> list[Path]:
        found: list[Path] = []
        for top, dirs, files in self.walk():
            found += [Path(top, n) for n in dirs + files]
        return found

    def spot(self) -> Path:
        return self.rng.choice(self.folders()) / self.rng.choice(NAMES)

    def mkdir(self) -> str:
        path = self.spot()
        path.mkdir()
        return f"mkdir {path}"

    def make_file(self) -> str:
        path = self.spot()
        path.write_text("gitdir: elsewhere\n")
        return f"write {path}"

    def symlink(self) -> str:
        path = self.spot()
        path.symlink_to(self.rng.choice(["evil", "..", str(self.out)]))
        return f"symlink {path}"

    def hardlink(self) -> str:
        files = [p for p in self.entries() if p.is_file() and not p.is_symlink()]
        source, path = self.rng.choice(files), self.spot()
        os.link(source, path)
        return f"link {source} {path}"

    def remove(self) -> str:
        path = self.rng.choice([p for p in self.entries() if not p.is_dir() or p.is_symlink()])
        path.unlink()
        return f"rm {path}"

    def rmtree(self) -> str:
        path = self.rng.choice(self.folders()[1:])
        shutil.rmtree(path)
        return f"rm -r {path}"

    def move_folder(self) -> str:
        source, target = self.rng.choice(self.folders()[1:]), self.spot()
        if target.is_relative_to(source):
            return "-"
        source.rename(target)  # onto an empty folder of that name too
        return f"mv {source} {target}"

    def move_file(self) -> str:
        source = self.rng.choice([p for p in self.entries() if not p.is_dir() or p.is_symlink()])
        target = self.spot()
        source.rename(target)
        return f"mv {source} {target}"

    def move_out(self) -> str:
        source = self.rng.choice(self.entries())
        source.rename(self.out / f"o{self.rng.randrange(1 << 30)}")
        return f"mv {source} out"

    def move_in(self) -> str:
        source, target = self.rng.choice(list(self.out.iterdir())), self.spot()
        source.rename(target)
        return f"mv {source} {target}"

    def exchange(self) -> str:
        a, b = self.rng.choice(self.entries()), self.rng.choice(self.entries())
        if a.is_relative_to(b) or b.is_relative_to(a):
            return "-"
        _exchange(a, b)
        return f"exchange {a} {b}"

    def lock_up(self) -> str:
        path = self.rng.choice(self.folders()[1:])
        path.chmod(0)
        return f"chmod 000 {path}"

    def look_alike(self) -> str:
        folder = self.rng.choice(self.folders())
        (folder / "HEAD").write_text("ref: refs/heads/main\n")
        (folder / self.rng.choice(["refs", "objects", "commondir"])).mkdir()
        return f"look-alike {folder}"

    def deep_git(self) -> str:
        path = self.rng.choice(self.folders()) / "x" / "y" / "z"
        path.mkdir(parents=True)
        (path / self.rng.choice([".git", ".GIT"])).mkdir()
        return f"deep .git {path}"

    def batch(self) -> None:
        for _ in range(self.rng.randint(1, 6)):
            try:
                self.log.append(self.rng.choice(self.ops)())
            except (OSError, IndexError) as exc:  # a random change that cannot be made: none
                self.log.append(f"- {exc!r}")


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_after_random_changes_the_sweep_finds_what_a_full_scan_finds(
        tmp_path: Path, seed: int, listings: list[int]) -> None:
    ws, out = tmp_path / "ws", tmp_path / "out"
    ws.mkdir()
    out.mkdir()
    _big(ws, 60)
    (out / "seed").mkdir()
    _kept(ws)
    _same(ws)  # the first sweep: a full scan
    changes = Changes(ws, out, random.Random(seed))
    batches = 60
    for number in range(batches):
        if changes.rng.random() < 0.3:
            with Watcher(str(ws), ROOMY) as watcher:  # made during a run: the watcher's thread reads the events
                watcher.arm(lambda: None)
                changes.batch()
        else:
            changes.batch()
        got, want = sorted(scan_again(str(ws))), sorted(scan(str(ws)))
        assert got == want, f"seed {seed}, batch {number}:\n" + "\n".join(changes.log[-8:])
        if changes.rng.random() < 0.15:
            GitGuard(str(ws)).after()  # a sweep moving things aside: its renames are changes too
            changes.log.append("swept")
        if changes.rng.random() < 0.2:
            _same(ws)  # a sweep with nothing changed since
    # The sweeps above listed only what changed (else this test would prove nothing about that).
    assert len(listings) >= batches // 2, len(listings)


def test_a_small_change_in_a_big_tree_is_found_without_listing_it_all(
        tmp_path: Path, listings: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    _big(ws, 600)
    _kept(ws)
    _same(ws)
    (ws / "node_modules" / "p7" / "lib3" / ".git").write_text("gitdir: /tmp/evil\n")
    opened: list[str] = []
    open_folder = gitguard._open_folder
    monkeypatch.setattr(gitguard, "_open_folder",
                        lambda root, fd, rel: opened.append(rel) or open_folder(root, fd, rel))
    assert [item.path for item in scan_again(str(ws))] == ["node_modules/p7/lib3/.git"]
    assert opened == ["node_modules/p7/lib3"] and listings == [1]


def test_folders_too_deep_for_git_stay_out_until_a_rename_brings_them_within_reach(
        tmp_path: Path, listings: list[int]) -> None:
    ws, _ = _swept(tmp_path)
    levels = [os.open(ws, os.O_RDONLY | os.O_DIRECTORY)]
    try:
        for _ in range(24):  # 24 x 201 characters: past PATH_MAX, where git cannot run
            os.mkdir("d" * 200, dir_fd=levels[-1])
            levels.append(os.open("d" * 200, os.O_RDONLY | os.O_DIRECTORY, dir_fd=levels[-1]))
        os.mkdir(".git", dir_fd=levels[-1])
        assert _same(ws) == []
        for level in levels[1:10]:  # shorter names higher up: the .git comes within reach
            os.rename("d" * 200, "s", src_dir_fd=level, dst_dir_fd=level)
        assert [item.path.endswith("/.git") for item in _same(ws)] == [True]
    finally:
        for fd in levels:
            os.close(fd)
    assert len(listings) == 2


def test_a_folder_moved_into_a_folder_that_moved_stays_watched(tmp_path: Path, listings: list[int]) -> None:
    """The tree walks the moved folder before it reads that the other one left its old place: the
    kernel hands back the other's live watch, which must not go when the old name is dropped."""
    ws = tmp_path / "ws"
    (ws / "a").mkdir(parents=True)
    (ws / "src" / "c").mkdir(parents=True)
    _kept(ws)
    _same(ws)
    (ws / "a").rename(ws / "b")
    (ws / "src" / "c").rename(ws / "b" / "c")
    _same(ws)
    (ws / "b" / "c" / ".git").mkdir()  # only the watch of b/c can tell
    assert [item.path for item in _same(ws)] == ["b/c/.git"]
    assert len(listings) == 2


# -- where the tree cannot tell: a full scan ----------------------------------------------------
def test_dropped_events_mean_a_full_scan(tmp_path: Path, listings: list[int]) -> None:
    ws = tmp_path / "ws"
    (ws / "many").mkdir(parents=True)
    _big(ws, 30)
    _kept(ws)
    _same(ws)
    limit = int(Path("/proc/sys/fs/inotify/max_queued_events").read_text())
    for i in range(limit + 100):  # more events than the kernel queues: it drops the rest
        (ws / "many" / f"f{i}").touch()
    (ws / "node_modules" / "p0" / "lib1" / ".git").mkdir()  # its event is among the dropped
    assert [item.path for item in _same(ws)] == ["node_modules/p0/lib1/.git"]
    assert listings == []


def test_too_many_touched_names_mean_a_full_scan(tmp_path: Path, listings: list[int],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    ws, _ = _swept(tmp_path)
    monkeypatch.setattr(disk_usage, "TOUCHED_MAX", 3)
    for i in range(5):
        (ws / f"f{i}").touch()
    (ws / "node_modules" / "p0" / "lib1" / ".git").mkdir()
    assert [item.path for item in _same(ws)] == ["node_modules/p0/lib1/.git"]
    assert listings == []


def test_a_folder_no_longer_watched_is_listed_whole_and_then_always(tmp_path: Path, listings: list[int]) -> None:
    ws, tree = _swept(tmp_path)
    blind = ws / "node_modules" / "p0" / "lib2"
    wd = tree.dir_wd[str(blind)]
    disk_usage.remove_watch(tree.notify or -1, wd)  # as the kernel drops a watch: IN_IGNORED, nothing else
    (blind / ".git").mkdir()  # no event tells this
    assert [item.path for item in _same(ws)] == ["node_modules/p0/lib2/.git"]
    (blind / "deeper").mkdir()  # nor this: the folder is not watched any more
    (blind / "deeper" / ".GIT").mkdir()
    assert {item.path for item in _same(ws)} == {"node_modules/p0/lib2/.git", "node_modules/p0/lib2/deeper/.GIT"}


def test_a_tree_that_could_not_watch_a_folder_means_a_full_scan(tmp_path: Path, listings: list[int],
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    ws, _ = _swept(tmp_path)
    watch = UsageTree._watch

    def refusing(self: UsageTree, fd: int, path: str) -> None:
        if path.endswith("/blind"):
            self.unwatched = f"inotify cannot watch {path}: No space left on device"
            return
        watch(self, fd, path)

    monkeypatch.setattr(UsageTree, "_watch", refusing)
    (ws / "blind").mkdir()
    _same(ws)
    (ws / "blind" / ".git").mkdir()  # no watch: no event
    assert [item.path for item in _same(ws)] == ["blind/.git"]


def test_a_replaced_workspace_folder_means_a_full_scan(tmp_path: Path, listings: list[int]) -> None:
    ws, _ = _swept(tmp_path)
    ws.rename(tmp_path / "old")
    shutil.copytree(tmp_path / "old", ws)
    (ws / "node_modules" / "p0" / "lib1" / ".git").mkdir()
    assert [item.path for item in _same(ws)] == ["node_modules/p0/lib1/.git"]
    assert listings == []


def test_a_folder_given_by_descriptor_is_scanned_whole(tmp_path: Path, listings: list[int]) -> None:
    ws, _ = _swept(tmp_path)
    (ws / "node_modules" / "p0" / "lib1" / ".git").mkdir()
    fd = os.open(ws, os.O_PATH | os.O_DIRECTORY)
    try:
        assert [item.path for item in scan_again(fd)] == ["node_modules/p0/lib1/.git"]
    finally:
        os.close(fd)
    assert listings == []


def test_another_processs_sweep_in_between_is_seen(tmp_path: Path, listings: list[int]) -> None:
    ws, _ = _swept(tmp_path)
    (ws / "node_modules" / "p0" / "lib1" / ".git").mkdir()
    # Another Warden process (a CLI run, a daemon's child) sweeps the workspace and moves it aside.
    swept = subprocess.run([sys.executable, "-c", "import sys; from warden.adapters.gitguard import GitGuard; "
                            "print(GitGuard(sys.argv[1]).after().quarantined)", str(ws)],
                           capture_output=True, text=True, check=True)
    assert "warden-quarantined" in swept.stdout
    assert _same(ws) == [] and listings


def test_a_run_stopped_by_its_quota_leaves_a_tree_that_missed_nothing(
        tmp_path: Path, listings: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    """The watcher stops a run at the event that crosses the quota; the rest of the events it had
    read must still reach the kept tree, or the next sweep would trust a tree that missed them."""
    ws, _ = _swept(tmp_path)
    monkeypatch.setattr(Watcher, "_loop", lambda self, *args: None)  # this test reads the events itself
    files = sum(1 for _ in ws.rglob("*"))
    with Watcher(str(ws), Quota(max_bytes=1 << 40, max_files=files + 2, min_free=0)) as watcher:
        for i in range(5):
            (ws / f"f{i}").touch()
        (ws / "node_modules" / "p0" / "lib1" / ".git").mkdir()  # read in the same batch, after the breach
        assert watcher._tree is not None
        watcher._drain(watcher._tree)
        assert watcher.breach is not None
    assert [item.path for item in _same(ws)] == ["node_modules/p0/lib1/.git"]
    assert listings


@pytest.fixture(autouse=True)
def _tidy() -> Iterator[None]:
    yield
    with quota_adapter._KEPT_LOCK:
        trees = list(quota_adapter._KEPT.values())
        quota_adapter._KEPT.clear()
    for tree in trees:
        tree.close()
