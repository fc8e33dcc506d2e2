"""Watch a workspace folder with inotify and hand out one debounced batch per burst of changes.

Why not watchfiles (Rust notify): its recursive inotify watcher follows symbolic links, and
watchfiles 1.3 offers no switch for it. A bot that runs `ln -s / link` in its workspace would make
a watcher running on the host (as the person) walk and watch the host's whole filesystem: events
from outside the workspace, and the user's inotify watches spent (fs.inotify.max_user_watches),
which the disk quota's watcher needs too. Measured: a link to a folder outside got that folder and
its subfolders watched. So this watcher walks itself, the way adapters/disk_usage.py does:

- every folder is opened beneath its parent with O_NOFOLLOW and watched through its descriptor
  (`/proc/self/fd/N`), so a link is never followed and a folder swapped for one leads nowhere;
- other filesystems mounted inside are not entered; ignored folders (core.watching) are never
  watched at all, so `npm install` in node_modules costs nothing;
- memory: one entry per watched folder, and a batch keeps at most `limit` paths (the kernel's
  queue is bounded by fs.inotify.max_queued_events; when it overflows the batch says so);
- a folder made during a burst is walked at once and what it already holds is reported added.

The feed has no thread of its own: `next` waits in the caller's thread (poll(2) on the inotify
descriptor and a wake pipe), and `close` from any other thread wakes it; whichever of them comes
last gives the descriptor back.
"""

from __future__ import annotations

import contextlib
import errno
import os
import select
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime

from warden.adapters import disk_usage
from warden.core.watching import Batch, ChangeKind, Coalescer, batch_of, ignored_name

__all__ = ["InotifyFeed", "InotifyWatcher"]

_IN_MODIFY = 0x2
_IN_CLOSE_WRITE = 0x8
_IN_MOVED_FROM = 0x40
_IN_MOVED_TO = 0x80
_IN_CREATE = 0x100
_IN_DELETE = 0x200
_IN_DELETE_SELF = 0x400
_IN_MOVE_SELF = 0x800
_IN_Q_OVERFLOW = 0x4000
_IN_IGNORED = 0x8000
_IN_ONLYDIR = 0x01000000
_IN_EXCL_UNLINK = 0x04000000
_IN_ISDIR = 0x40000000
_MASK = (_IN_MODIFY | _IN_CLOSE_WRITE | _IN_MOVED_FROM | _IN_MOVED_TO | _IN_CREATE | _IN_DELETE
         | _IN_DELETE_SELF | _IN_MOVE_SELF | _IN_ONLYDIR | _IN_EXCL_UNLINK)
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class InotifyFeed:
    """One watched folder's batches (core/ports/watch.py ChangeFeed)."""

    def __init__(self, root: str, *, debounce_s: float, max_wait_s: float, limit: int,
                 clock: Callable[[], float] = time.monotonic, stamp: Callable[[], str] = _now_iso) -> None:
        self.debounce_s, self.max_wait_s, self.limit = debounce_s, max_wait_s, limit
        self._clock, self._stamp = clock, stamp
        self.gone = False
        self.notes: list[str] = []  # folders left unwatched (out of inotify watches), with why
        self._wd_dir: dict[int, str] = {}
        self._dir_wd: dict[str, int] = {}
        self._lock = threading.Lock()
        self._busy = self._closing = self._released = False
        self._root_fd = os.open(root, _DIR_FLAGS)
        try:
            self._dev = os.fstat(self._root_fd).st_dev
            self._notify = disk_usage.inotify()
            self._wake_r, self._wake_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        except BaseException:
            os.close(self._root_fd)
            raise
        try:
            self._walk(os.dup(self._root_fd), "", None)
        except BaseException:
            self._release()
            raise

    # -- the walk --------------------------------------------------------------------------
    def _watch(self, fd: int, path: str) -> None:
        wd = disk_usage.add_watch(self._notify, fd, _MASK)
        if wd < 0:
            self.notes.append(f"{path or '/'} is not watched: {os.strerror(-wd)}")
            return
        old = self._wd_dir.get(wd)
        if old is not None and self._dir_wd.get(old) == wd:
            del self._dir_wd[old]  # the same folder, moved: it answers to its new path now
        self._wd_dir[wd] = path
        self._dir_wd[path] = wd

    def _walk(self, fd: int, path: str, found: Coalescer | None) -> None:
        """Watch folder `fd` (closed here), known as `path`, and every folder below it; with
        `found`, report all they hold as added (it was made before its watch existed).

        A listing is read as it comes, never held: a folder of a million files costs a million
        steps and no memory; only the paths of folders still to visit are kept, and each is
        opened from the root again, name by name, never through a link.
        """
        pending: list[str] = []
        current: int | None = fd
        current_path = path
        while current is not None or pending:
            if current is None:
                current_path = pending.pop()
                current = self._open_below_root(current_path)
                if current is None:
                    continue  # gone (or swapped for a link) meanwhile: its own events say so
            try:
                self._watch(current, current_path)
                with os.scandir(current) as it:
                    for entry in it:
                        if ignored_name(entry.name):
                            continue
                        child = f"{current_path}/{entry.name}"
                        if found is not None:
                            found.add("added", child)
                        try:
                            # d_type first: most entries are files, and they cost no stat here.
                            if not entry.is_dir(follow_symlinks=False):
                                continue  # a link is a file here, never followed
                            if entry.stat(follow_symlinks=False).st_dev != self._dev:
                                continue  # another filesystem mounted inside is not walked
                        except OSError:
                            continue
                        pending.append(child)
            except OSError:
                pass  # gone (or unreadable) meanwhile: its own events say what happened
            finally:
                os.close(current)
                current = None

    def _unwatch(self, path: str) -> None:
        """Forget `path` and the folders below it (moved away: their events are not ours)."""
        prefix = path + "/"
        for dir_path in [p for p in self._dir_wd if p == path or p.startswith(prefix)]:
            wd = self._dir_wd.pop(dir_path)
            self._wd_dir.pop(wd, None)
            disk_usage.remove_watch(self._notify, wd)

    def _open_below_root(self, path: str) -> int | None:
        """Folder `path` opened from the root, one name at a time, never through a link."""
        fd = os.dup(self._root_fd)
        try:
            for name in path.strip("/").split("/"):
                new = os.open(name, _DIR_FLAGS, dir_fd=fd)
                os.close(fd)
                fd = new
        except OSError:
            os.close(fd)
            return None
        return fd

    # -- events ----------------------------------------------------------------------------
    def _apply(self, data: bytes, batch: Coalescer) -> None:
        for wd, mask, name in disk_usage.events(data):
            if mask & _IN_Q_OVERFLOW:
                # The kernel dropped events: say so, and watch what was made meanwhile.
                batch.lost()
                self._walk(os.dup(self._root_fd), "", None)
                continue
            folder = self._wd_dir.get(wd)
            if folder is None:
                continue
            if mask & _IN_IGNORED:
                del self._wd_dir[wd]
                if self._dir_wd.get(folder) == wd:
                    del self._dir_wd[folder]
                if folder == "":
                    self.gone = True
                continue
            if mask & (_IN_DELETE_SELF | _IN_MOVE_SELF):
                if folder == "":
                    self.gone = True  # the workspace folder itself: destroyed, archived or moved
                continue
            if not name or ignored_name(name):
                continue
            path = f"{folder}/{name}"
            kind: ChangeKind
            if mask & (_IN_DELETE | _IN_MOVED_FROM):
                kind = "deleted"
                if mask & _IN_MOVED_FROM and mask & _IN_ISDIR:
                    # A folder moved keeps its watches: forget them, its new place (if within)
                    # is walked again. A deleted one's go by themselves (IN_IGNORED).
                    self._unwatch(path)
            elif mask & (_IN_CREATE | _IN_MOVED_TO):
                kind = "added"
            else:
                kind = "modified"
            batch.add(kind, path)
            if kind == "added" and mask & _IN_ISDIR:
                fd = self._open_below_root(path)
                if fd is not None:
                    self._walk(fd, path, batch)

    def _drain(self, batch: Coalescer) -> bool:
        """Apply every queued event; True when there were any."""
        got = False
        while True:
            try:
                data = os.read(self._notify, 1 << 16)
            except BlockingIOError:
                if got:
                    self._check_root()
                return got
            got = True
            self._apply(data, batch)

    def _check_root(self) -> None:
        """The workspace folder deleted is `gone` too: the descriptor held here keeps its inode,
        so the kernel's IN_DELETE_SELF waits for it; a removed folder has no links left."""
        if os.fstat(self._root_fd).st_nlink == 0:
            self.gone = True

    def next(self, timeout: float | None) -> Batch | None:
        with self._lock:
            if self._closing or self._released:
                return None
            self._busy = True
        try:
            return self._next(timeout)
        finally:
            with self._lock:
                self._busy = False
                last = self._closing
            if last:
                self._release()

    def _next(self, timeout: float | None) -> Batch | None:
        if self.gone:
            return None
        poll = select.poll()
        poll.register(self._notify, select.POLLIN)
        poll.register(self._wake_r, select.POLLIN)
        start = self._clock()
        deadline = None if timeout is None else start + timeout
        batch = Coalescer(self.limit)
        first: float | None = None  # when this burst's first change came
        while True:
            now = self._clock()
            if first is not None:
                wait: float | None = max(0.0, min(self.debounce_s, first + self.max_wait_s - now))
            elif deadline is not None:
                wait = max(0.0, deadline - now)
            else:
                wait = None
            ready = {fd for fd, _ in poll.poll(None if wait is None else wait * 1000)}
            if self._wake_r in ready:
                return None
            if self._notify in ready and self._drain(batch):
                if batch and first is None:
                    first = self._clock()
                if self.gone:
                    return batch_of(batch, self._stamp())
                if first is not None and self._clock() - first < self.max_wait_s:
                    continue  # more may come: the burst ends after a quiet debounce_s
            if first is not None:
                made = batch_of(batch, self._stamp())
                if made is not None:
                    return made
                batch, first = Coalescer(self.limit), None  # it all cancelled out: wait on
                continue
            if deadline is not None and self._clock() >= deadline:
                self._check_root()
                return None

    # -- the end ---------------------------------------------------------------------------
    def close(self) -> None:
        with self._lock:
            self._closing = True
            busy = self._busy
        if busy:
            with contextlib.suppress(OSError):
                os.write(self._wake_w, b"x")  # the waiting `next` returns and releases
            return
        self._release()

    def _release(self) -> None:
        with self._lock:
            if self._released:
                return
            self._released = True
        disk_usage.release(self._notify, list(self._wd_dir))
        for fd in (self._wake_r, self._wake_w, self._root_fd):
            os.close(fd)
        self._wd_dir.clear()
        self._dir_wd.clear()

    def __enter__(self) -> InotifyFeed:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class InotifyWatcher:
    """Starts inotify feeds (core/ports/watch.py FileWatcher)."""

    def watch(self, root: str, *, debounce_s: float, max_wait_s: float, limit: int) -> InotifyFeed:
        try:
            return InotifyFeed(root, debounce_s=debounce_s, max_wait_s=max_wait_s, limit=limit)
        except OSError as exc:
            if exc.errno in (errno.EMFILE, errno.ENOSPC):
                from warden.core.errors import Unavailable

                raise Unavailable(f"cannot watch {root}: {exc.strerror} (inotify instances or watches "
                                  "used up: raise fs.inotify.max_user_instances / max_user_watches)") from None
            raise
