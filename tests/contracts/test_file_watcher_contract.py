"""The FileWatcher port (core/ports/watch.py) held to the same checks in the fake
(tests/support/fakes.FakeWatcher) and on this host (adapters/watcher.InotifyWatcher): a burst is
one batch in the order paths first changed, ignored folders say nothing, `limit` bounds a batch,
`close` from another thread wakes a waiting `next`, and a feed whose folder goes is `gone`.

A change is `touch`/`remove` here: real files on the host, `FakeWatcher.change` on the fake.
"""

from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path

import pytest

from tests.support.fakes import FakeWatcher
from warden.adapters.watcher import InotifyWatcher


class Host(InotifyWatcher):
    def touch(self, root: str, path: str) -> None:
        target = Path(root + path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text("x")

    def rm(self, root: str, path: str) -> None:
        Path(root + path).unlink()

    def drop(self, root: str) -> None:
        shutil.rmtree(root)


class Fake(FakeWatcher):
    def touch(self, root: str, path: str) -> None:
        self.change(root, "added", path)

    def rm(self, root: str, path: str) -> None:
        self.change(root, "deleted", path)

    def drop(self, root: str) -> None:
        self.remove(root)


@pytest.fixture(params=["fake", "host"])
def watcher(request: pytest.FixtureRequest) -> Host | Fake:
    return Fake() if request.param == "fake" else Host()


@pytest.fixture
def root(tmp_path: Path) -> str:
    (tmp_path / "ws" / ".git").mkdir(parents=True)
    return str(tmp_path / "ws")


def _open(watcher: Host | Fake, root: str, limit: int = 1000):  # type: ignore[no-untyped-def]
    return watcher.watch(root, debounce_s=0.1, max_wait_s=1.0, limit=limit)


def test_a_burst_is_one_batch_in_order(watcher: Host | Fake, root: str) -> None:
    with _open(watcher, root) as feed:
        for name in ("/b", "/a", "/c"):
            watcher.touch(root, name)
        batch = feed.next(5)
        assert batch is not None and [(c.change, c.path) for c in batch.changes] == [
            ("added", "/b"), ("added", "/a"), ("added", "/c")]
        assert feed.next(0.3) is None
        watcher.rm(root, "/a")
        batch = feed.next(5)
        assert batch is not None and [(c.change, c.path) for c in batch.changes] == [("deleted", "/a")]


def test_ignored_folders_say_nothing(watcher: Host | Fake, root: str) -> None:
    with _open(watcher, root) as feed:
        watcher.touch(root, "/.git/HEAD")
        assert feed.next(0.3) is None


def test_the_limit_bounds_a_batch(watcher: Host | Fake, root: str) -> None:
    with _open(watcher, root, limit=5) as feed:
        for i in range(50):
            watcher.touch(root, f"/f{i}")
        batch = feed.next(5)
        assert batch is not None and batch.overflow and len(batch.changes) == 5 and batch.count >= 50


def test_close_wakes_a_waiting_next(watcher: Host | Fake, root: str) -> None:
    feed = _open(watcher, root)
    got: list[object] = []
    waiter = threading.Thread(target=lambda: got.append(feed.next(None)))
    waiter.start()
    time.sleep(0.05)
    feed.close()
    waiter.join(5)
    assert got == [None]


def test_a_feed_whose_folder_goes_is_gone(watcher: Host | Fake, root: str) -> None:
    with _open(watcher, root) as feed:
        watcher.drop(root)
        deadline = time.monotonic() + 5
        while not feed.gone and time.monotonic() < deadline:
            feed.next(0.2)
        assert feed.gone and feed.next(None) is None
    with pytest.raises(FileNotFoundError):
        _open(watcher, root)
