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
- a folder made during a burst is walked and what it already holds is reported added.

What a bot can make the host do is bounded, whatever it does in its workspace (a bot renaming a
folder of 5,000 folders back and forth 500 times in 0.1 s once cost the server a core for
100 s, and a stream 90 s past its timeout):

- a feed watches at most `max_folders` folders, and all feeds of one watcher together at most
  `max_total` (fs.inotify.max_user_watches is per user: the quota's watcher of every run needs
  some too); past them the feed is `partial` and says so in `notes`;
- `next` works in slices of SLICE_S: between two it looks at the caller's deadline and at
  `close`, so a stream ends on time and a closed feed stops within a slice, however many events
  wait; a batch ends at the latest at `max_wait_s` (or the caller's deadline) with what it has;
- folders to walk are queued (each path once), not walked per event, and walking may take at most
  WALK_SHARE of the time on average (a bucket of WALK_BURST_S): renaming a folder back and forth
  costs about one walk, not one per rename (bench/watch.py --storm);
- when the kernel dropped events or too many folders wait, the queue is replaced by one walk from
  the root ("rescan"), at most one every RESCAN_GAP_S, and the batch says `overflow`;
- a folder moved away forgets its watches through an index of the watched tree (adapters/
  watched_folders.py): O(that subtree).

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
from warden.adapters.watched_folders import WatchBudget, WatchedFolders
from warden.core.watching import Batch, ChangeKind, Coalescer, Notice, batch_of, ignored_name

__all__ = ["MAX_FOLDERS", "MAX_TOTAL", "InotifyFeed", "InotifyWatcher"]

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

MAX_FOLDERS = 10_000  # watch.max_folders: folders one feed watches
MAX_TOTAL = 40_000  # api.max_watched_folders: folders all feeds of one process watch together
SLICE_S = 0.05  # work done between two looks at the deadline and at `close`
WALK_SHARE = 0.25  # of the time, on average, that walks may take
WALK_BURST_S = 1.0  # walking a feed may do at once before WALK_SHARE applies
RESCAN_GAP_S = 1.0  # at least this long between two walks from the root
_MAX_NOTES = 20  # notes kept; past them one more says there are more


def _now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class InotifyFeed:
    """One watched folder's batches (core/ports/watch.py ChangeFeed)."""

    def __init__(self, root: str, *, debounce_s: float, max_wait_s: float, limit: int,
                 max_folders: int = MAX_FOLDERS, budget: WatchBudget | None = None,
                 clock: Callable[[], float] = time.monotonic, stamp: Callable[[], str] = _now_iso) -> None:
        self.debounce_s, self.max_wait_s, self.limit = debounce_s, max_wait_s, limit
        self.max_folders = max_folders
        self._budget = budget if budget is not None else WatchBudget(max_folders)
        self._clock, self._stamp = clock, stamp
        self.gone = False
        self.partial = False  # some folders are not watched (limits): their changes are missed
        self.notes: list[Notice] = []  # what is not watched, and why
        self._more_noted = False
        self._folders = WatchedFolders()
        # Folders still to walk (a stack; each path once), and whether to report what they hold.
        self._todo: list[tuple[str, bool]] = []
        self._queued: set[str] = set()
        self._rescan = False  # events were lost or too many folders wait: walk from the root
        self._rescan_at: float | None = None
        self._tokens = WALK_BURST_S  # walking time left (a bucket refilled at WALK_SHARE)
        self._filled_at = clock()
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
            self._queue("", report=False)
            self._walk_queued(None, None)
        except BaseException:
            self._release()
            raise

    @property
    def watched(self) -> int:
        """How many folders this feed watches now."""
        return len(self._folders)

    # -- the walk --------------------------------------------------------------------------
    def _unwatched(self, path: str, why: str) -> None:
        self.partial = True
        if any(note.path == path for note in self.notes):
            return
        if len(self.notes) < _MAX_NOTES:
            self.notes.append(Notice(f"{path or '/'} is not watched: {why}", path))
        elif not self._more_noted:
            self._more_noted = True
            self.notes.append(Notice(f"more folders are not watched ({why}): changes in them are missed"))

    def _watch(self, fd: int, path: str) -> bool:
        """Watch folder `fd` as `path`; False when it is not watched (a limit)."""
        known = path in self._folders.path_wd  # watched already (walked again): no new place
        if not known:
            if len(self._folders) >= self.max_folders:
                self._unwatched(path, f"this watch holds {self.max_folders} folders already (watch.max_folders)")
                return False
            if not self._budget.take():
                self._unwatched(path, f"this process watches {self._budget.total} folders already "
                                      "(api.max_watched_folders)")
                return False
        wd = disk_usage.add_watch(self._notify, fd, _MASK)
        if wd < 0:
            if not known:
                self._budget.give()
            self._unwatched(path, os.strerror(-wd))
            return False
        new = self._folders.add(path, wd)
        if known and new:
            self._budget.take(force=True)  # another folder at a known path: the old one's watch goes soon
        elif not known and not new:
            self._budget.give()  # a watch held already (the same folder, moved): it cost nothing new
        return True

    def _queue(self, path: str, *, report: bool) -> None:
        if path not in self._queued:
            self._queued.add(path)
            self._todo.append((path, report))

    def _walk_queued(self, found: Coalescer | None, until: float | None) -> None:
        """Walk queued folders until none is left, `until` passes or the feed is closed.

        A listing is read as it comes, never held: a folder of a million files costs a million
        steps and no memory; only the paths of folders still to visit are kept, and each is
        opened from the root again, name by name, never through a link.
        """
        while self._todo and not self._closing:
            path, report = self._todo.pop()
            self._queued.discard(path)
            self._visit(path, found if report else None)
            if until is not None and self._clock() >= until:
                return

    def _visit(self, path: str, found: Coalescer | None) -> None:
        """Watch folder `path` and queue the folders it holds; with `found`, report all it holds
        as added (it was made before its watch existed)."""
        fd = self._open_below_root(path)
        if fd is None:
            return  # gone (or swapped for a link) meanwhile: its own events say so
        try:
            if not self._watch(fd, path):
                return  # a limit: what it holds is not walked either
            with os.scandir(fd) as it:
                for entry in it:
                    if self._closing:
                        return
                    if ignored_name(entry.name):
                        continue
                    child = f"{path}/{entry.name}"
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
                    self._queue(child, report=found is not None)
        except OSError:
            pass  # gone (or unreadable) meanwhile: its own events say what happened
        finally:
            os.close(fd)

    def _unwatch(self, path: str) -> None:
        """Forget `path` and the folders below it (moved away: their events are not ours)."""
        wds = self._folders.pop_subtree(path)
        for wd in wds:
            disk_usage.remove_watch(self._notify, wd)
        self._budget.give(len(wds))
        if wds and self.partial:
            self._rescan = True  # room again: folders left unwatched may be watched now

    def _open_below_root(self, path: str) -> int | None:
        """Folder `path` opened from the root, one name at a time, never through a link."""
        fd = os.dup(self._root_fd)
        if not path:
            return fd
        try:
            for name in path.strip("/").split("/"):
                new = os.open(name, _DIR_FLAGS, dir_fd=fd)
                os.close(fd)
                fd = new
        except OSError:
            os.close(fd)
            return None
        return fd

    def _need_rescan(self, batch: Coalescer) -> None:
        """Events were lost (or too many folders wait): one walk from the root finds what is
        there, reported as `overflow` (what it holds cannot be told apart from what was)."""
        batch.lost()
        self._rescan = True
        self._todo.clear()
        self._queued.clear()

    # -- events ----------------------------------------------------------------------------
    def _apply(self, data: bytes, batch: Coalescer) -> None:
        for wd, mask, name in disk_usage.events(data):
            if mask & _IN_Q_OVERFLOW:
                self._need_rescan(batch)  # the kernel dropped events: say so, look again
                continue
            folder = self._folders.get(wd)
            if folder is None:
                continue
            if mask & _IN_IGNORED:
                if self._folders.drop(wd) is not None:
                    self._budget.give()
                    if self.partial:
                        self._rescan = True  # room again: folders left unwatched may be watched now
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
            if kind == "added" and mask & _IN_ISDIR and not self._rescan:
                self._queue(path, report=True)
                if len(self._todo) > self.max_folders:
                    self._need_rescan(batch)

    def _drain(self, batch: Coalescer, until: float) -> bool:
        """Apply queued events until none is left or `until` passes; True when there were any."""
        got = False
        while not self._closing:
            try:
                data = os.read(self._notify, 1 << 16)
            except BlockingIOError:
                break
            got = True
            self._apply(data, batch)
            if self._clock() >= until:
                break
        if got:
            self._check_root()
        return got

    def _walk_wait(self, now: float) -> float | None:
        """0 when queued walking may go on now; how long until it may; None when none is queued."""
        self._tokens = min(WALK_BURST_S, self._tokens + (now - self._filled_at) * WALK_SHARE)
        self._filled_at = now
        if self._rescan:
            if self._rescan_at is not None and now - self._rescan_at < RESCAN_GAP_S:
                return self._rescan_at + RESCAN_GAP_S - now
        elif not self._todo:
            return None
        return 0.0 if self._tokens > 0 else -self._tokens / WALK_SHARE + 0.001

    def _walk_some(self, batch: Coalescer, until: float) -> bool:
        """Walk queued folders for at most a slice, if the walking budget allows; True if it did."""
        now = self._clock()
        if self._walk_wait(now) != 0.0:
            return False
        if self._rescan:
            self._rescan, self._rescan_at = False, now
            self._todo.clear()
            self._queued.clear()
            self._queue("", report=False)
        self._walk_queued(batch, until)
        self._tokens -= self._clock() - now
        return True

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
        deadline = None if timeout is None else self._clock() + timeout
        batch = Coalescer(self.limit)
        first: float | None = None  # when this burst's first change came
        last = 0.0  # when it last changed (or a walk went on)
        while True:
            now = self._clock()
            waits = [self._walk_wait(now)]
            if first is not None:
                waits += [last + self.debounce_s - now, first + self.max_wait_s - now]
            if deadline is not None:
                waits.append(deadline - now)
            known = [w for w in waits if w is not None]
            wait = max(0.0, min(known)) if known else None
            ready = {fd for fd, _ in poll.poll(None if wait is None else wait * 1000)}
            if self._wake_r in ready or self._closing:
                return None
            until = self._clock() + SLICE_S
            active = self._notify in ready and self._drain(batch, until)
            active = self._walk_some(batch, until) or active
            now = self._clock()
            if active:
                last = now
                if batch and first is None:
                    first = now
            if self.gone:
                return batch_of(batch, self._stamp())
            timed_out = deadline is not None and now >= deadline
            if first is not None and (timed_out or now - last >= self.debounce_s or now - first >= self.max_wait_s):
                made = batch_of(batch, self._stamp())
                if made is not None or timed_out:
                    return made
                batch, first = Coalescer(self.limit), None  # it all cancelled out: wait on
                continue
            if first is None and timed_out:
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
        wds = list(self._folders.wd_path)
        disk_usage.release(self._notify, wds)
        self._budget.give(len(wds))
        for fd in (self._wake_r, self._wake_w, self._root_fd):
            os.close(fd)
        self._folders.clear()
        self._todo.clear()
        self._queued.clear()

    def __enter__(self) -> InotifyFeed:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class InotifyWatcher:
    """Starts inotify feeds (core/ports/watch.py FileWatcher): each watches at most `max_folders`
    folders, all of them together at most `max_total`."""

    def __init__(self, *, max_folders: int = MAX_FOLDERS, max_total: int = MAX_TOTAL) -> None:
        self.max_folders = max_folders
        self.budget = WatchBudget(max_total)

    def watch(self, root: str, *, debounce_s: float, max_wait_s: float, limit: int) -> InotifyFeed:
        try:
            return InotifyFeed(root, debounce_s=debounce_s, max_wait_s=max_wait_s, limit=limit,
                               max_folders=self.max_folders, budget=self.budget)
        except OSError as exc:
            if exc.errno in (errno.EMFILE, errno.ENOSPC):
                from warden.core.errors import Unavailable

                # The workspace by its folder's name: bots read this (events), and the host path
                # would tell them Warden's home and the person's.
                name = os.path.basename(root.rstrip("/"))
                raise Unavailable(f"cannot watch workspace {name}: {exc.strerror} (inotify instances or watches "
                                  "used up: raise fs.inotify.max_user_instances / max_user_watches)") from None
            raise
