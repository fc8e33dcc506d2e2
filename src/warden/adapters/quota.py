"""Watch a workspace grow while a command runs, and stop the command past its disk quota.

The standard library only. core/quota.py decides; adapters/disk_usage.py counts; this module
keeps the count beside a running command.

How a run is held to its workspace's budget (services/runs.py wires it):
- before it starts, one walk measures the workspace and puts an inotify watch on every folder;
- the runner's RLIMIT_FSIZE is the budget left (core.quota.Quota.file_size_cap), so no
  single file can pass it;
- a thread applies the events as they arrive (one lstat each) and checks the quota after each
  one; when the workspace grows past a limit it calls the run's stop function once and the
  whole process tree dies (status 137);
- where inotify cannot watch every folder (fs.inotify.max_user_instances/max_user_watches)
  the thread measures the whole tree every 0.2 s instead, and the run says so.

The overshoot is the write that crosses the limit plus what the command writes before the
kill lands, i.e. while this thread waits for a CPU (tests/services/test_quota.py measures it):
with 1 MiB writes, 76 KiB or one more write (1.1 MiB) in most runs here; new files, a few past
the limit. A saturated or stalled machine can keep the thread off a CPU for tens of ms, and
the command writes on meanwhile: a user-space watcher cannot promise a hard bound.

Also watched: the free space of the filesystem of Warden's home, every 0.25 s, when the
workspace lives on it and the command writes (an unlinked file still fills the disk).
"""

from __future__ import annotations

import contextlib
import os
import select
import threading
import time
from collections.abc import Callable

from warden.adapters import disk_usage
from warden.adapters.disk_usage import UsageTree
from warden.core.quota import FREE_KEY, Quota, Usage

__all__ = ["OVERSHOOT", "RESCAN_S", "Watcher"]

RESCAN_S = 0.2
_WATCHER_NICE = -10
FREE_CHECK_S = 0.25
# What a run may write past its limit before it dies, as tests/services/test_quota.py measures it.
OVERSHOOT = ("about one write (~1 MiB) and a few files past workspace.max_disk / max_files while "
             "Warden gets a CPU; more on a saturated machine")


class Watcher:
    """Measures one workspace, then watches it during a run and stops the run once when it
    grows past its quota (or the home's filesystem falls below `min_free` while it writes).

    Use as a context manager: `start` (the usage before the run) is known on entry; call
    `arm(stop)` once the command runs; on exit `breach` names the setting that stopped it.
    """

    def __init__(self, root: str, quota: Quota, *, home: str | None = None) -> None:
        self.root = root
        self.quota = quota
        self.home = home
        self.start = Usage(0, 0)
        self.breach: str | None = None
        self.at: Usage | None = None
        self.notes: list[str] = []
        self._tree: UsageTree | None = None
        self._stop: Callable[[], None] | None = None
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._wake_r = self._wake_w = -1
        self._wrote = False
        self._closed = False

    def __enter__(self) -> Watcher:
        self._tree = self._fresh_tree()
        self.start = self._tree.usage
        self._wake_r, self._wake_w = os.pipe2(os.O_CLOEXEC)
        self._thread = threading.Thread(target=self._loop, name="warden-quota", daemon=True)
        self._thread.start()
        return self

    def _fresh_tree(self) -> UsageTree:
        """The workspace measured and (where inotify can) watched; notify None means rescans."""
        try:
            notify: int | None = disk_usage.inotify()
        except OSError as exc:
            notify = None
            self.notes.append(f"inotify unavailable ({exc.strerror}); the quota is checked every {RESCAN_S} s")
        tree = UsageTree(self.root, notify)
        try:
            tree.scan()
        except BaseException:
            tree.close()
            raise
        if tree.unwatched is not None:
            self.notes.append(f"{tree.unwatched}; the quota is checked every {RESCAN_S} s")
            tree.close()
        return tree

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def usage(self) -> Usage:
        """What the workspace holds as far as the events read so far tell."""
        return self._tree.usage if self._tree is not None else self.start

    def arm(self, stop: Callable[[], None]) -> None:
        """`stop` kills the run; called at once if the workspace already passed its quota."""
        with self._lock:
            self._stop = stop
            fire = self.breach is not None
        if fire:
            stop()

    def close(self) -> None:
        """Stop watching (the run has ended): neither `stop` nor `breach` changes after this.

        The thread is joined and its watches removed here, in the caller's thread: a thread
        left to tidy up would contend for the GIL with the caller's next steps.
        """
        with self._lock:
            self._stop = None
            self._closed = True
        if self._thread is not None:
            with contextlib.suppress(BrokenPipeError):  # the thread ended already (after a breach)
                os.write(self._wake_w, b"x")
            self._thread.join()
            self._thread = None
        for fd in (self._wake_r, self._wake_w):
            if fd >= 0:
                os.close(fd)
        self._wake_r = self._wake_w = -1
        if self._tree is not None:
            self._tree.close()  # watches removed, the descriptor pooled: no waiting on the kernel

    # -- the thread ------------------------------------------------------------------------
    def _fire(self, key: str, now: Usage) -> None:
        with self._lock:
            if self.breach is not None or self._closed:
                return
            self.breach, self.at = key, now
            stop = self._stop
        if stop is not None:
            stop()

    def _loop(self) -> None:
        # The overshoot is what the command writes while this thread waits for a CPU: where
        # Warden may (root, CAP_SYS_NICE or RLIMIT_NICE), the thread runs ahead of everything else.
        with contextlib.suppress(OSError):
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), _WATCHER_NICE)
        try:
            self._watch()
        except Exception as exc:  # the run goes on unwatched rather than die with Warden's bug
            self.notes.append(f"the quota watcher stopped: {exc!r}")

    def _watch(self) -> None:
        tree = self._tree
        assert tree is not None
        poll = select.poll()
        poll.register(self._wake_r, select.POLLIN)
        if tree.notify is not None:
            poll.register(tree.notify, select.POLLIN)
        same_fs = False
        if self.home is not None:
            with contextlib.suppress(OSError):
                same_fs = os.stat(self.home).st_dev == tree.dev
        next_free = time.monotonic() + FREE_CHECK_S
        while self.breach is None:
            timeout = None
            if tree.notify is None:
                timeout = RESCAN_S * 1000
            elif same_fs:
                timeout = max(0.0, next_free - time.monotonic()) * 1000
            ready = {fd for fd, _ in poll.poll(timeout)}
            if self._wake_r in ready:
                return
            if tree.notify is None:
                self._check(disk_usage.measure(self.root))
            elif tree.notify in ready:
                try:
                    self._drain(tree)
                except disk_usage.Overflow:
                    poll.unregister(tree.notify)
                    tree.close()
                    tree = self._tree = self._fresh_tree()
                    if tree.notify is not None:
                        poll.register(tree.notify, select.POLLIN)
                    self._check(tree.usage)
            if same_fs and self.breach is None and time.monotonic() >= next_free:
                next_free = time.monotonic() + FREE_CHECK_S
                if self._wrote and self.quota.free_problem(disk_usage.free_bytes(self.home or "/"), "") is not None:
                    self._fire(FREE_KEY, tree.usage)

    def _check(self, now: Usage) -> None:
        if now != self.start:
            self._wrote = True
        key = self.quota.breach(self.start, now)
        if key is not None:
            self._fire(key, now)

    def _drain(self, tree: UsageTree) -> None:
        """Apply every queued event, checking the quota after each one."""
        assert tree.notify is not None
        dirty: set[str] = set()
        while self.breach is None:
            try:
                data = os.read(tree.notify, 1 << 16)
            except BlockingIOError:
                break
            for wd, mask, name in disk_usage.events(data):
                tree.handle(wd, mask, name, dirty)
                self._wrote = True
                key = self.quota.breach(self.start, tree.usage)
                if key is not None:
                    self._fire(key, tree.usage)
                    return
        for path in dirty:
            tree.restat(path)
        self._check(tree.usage)
