"""Which folders an inotify feed (adapters/watcher.py) watches, and how many all feeds may.

`WatchedFolders` indexes the watches by descriptor, by path and as a tree (parent → children),
so a folder moved away forgets its subtree in O(that subtree), never a scan of every watched
folder (a bot renaming a folder of thousands back and forth made that scan per rename).
`WatchBudget` bounds the watches of all feeds of one process together: fs.inotify.max_user_watches
is per user, and the quota's watcher of every run needs some too.
"""

from __future__ import annotations

import threading

__all__ = ["WatchBudget", "WatchedFolders"]


def _parent(path: str) -> str:
    return path.rpartition("/")[0]


class WatchBudget:
    """inotify watches that all feeds of one watcher may hold together (thread-safe)."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.used = 0
        self._lock = threading.Lock()

    def take(self, *, force: bool = False) -> bool:
        with self._lock:
            if self.used >= self.total and not force:
                return False
            self.used += 1
            return True

    def give(self, count: int = 1) -> None:
        with self._lock:
            self.used -= count


class WatchedFolders:
    """The watched folders, by watch descriptor, by path and as a tree (parent → children), so a
    subtree is forgotten in O(its size)."""

    def __init__(self) -> None:
        self.wd_path: dict[int, str] = {}
        self.path_wd: dict[str, int] = {}
        self._children: dict[str, set[str]] = {}

    def __len__(self) -> int:
        return len(self.wd_path)

    def get(self, wd: int) -> str | None:
        return self.wd_path.get(wd)

    def add(self, path: str, wd: int) -> bool:
        """Record watch `wd` as folder `path`; False when `wd` was held already (the same folder,
        maybe moved: it answers to its new path now)."""
        old = self.wd_path.get(wd)
        if old is not None and old != path and self.path_wd.get(old) == wd:
            del self.path_wd[old]
            self._unlink(old)
        self.wd_path[wd] = path
        self.path_wd[path] = wd
        if path:
            self._children.setdefault(_parent(path), set()).add(path)
        return old is None

    def drop(self, wd: int) -> str | None:
        """Forget watch `wd` (the kernel removed it); the path it had."""
        path = self.wd_path.pop(wd, None)
        if path is not None and self.path_wd.get(path) == wd:
            del self.path_wd[path]
            self._unlink(path)
        return path

    def pop_subtree(self, path: str) -> list[int]:
        """Forget `path` and every watched folder below it; their watch descriptors."""
        self._unlink(path)
        stack, out = [path], []
        while stack:
            here = stack.pop()
            wd = self.path_wd.pop(here, None)
            if wd is not None and self.wd_path.get(wd) == here:
                del self.wd_path[wd]
                out.append(wd)
            stack.extend(self._children.pop(here, ()))
        return out

    def clear(self) -> None:
        self.wd_path.clear()
        self.path_wd.clear()
        self._children.clear()

    def _unlink(self, path: str) -> None:
        siblings = self._children.get(_parent(path))
        if siblings is not None:
            siblings.discard(path)
            if not siblings:
                del self._children[_parent(path)]
