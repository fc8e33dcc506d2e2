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
kill lands, i.e. while this thread waits for a CPU (tests/services/test_quota.py measures it).
With real-time priority for this thread (root, CAP_SYS_NICE, or rtprio 1 in limits.conf;
see `_hurry`): 30 x 1 MiB writes against a 5 MiB limit ended 72 KiB over in 36 of 40 runs
and 1.1 MiB (one more write) in 4; new files, a few past the limit. Without it a busy machine
can hold the thread off a CPU for a slice or more (72 KiB to 20 MiB seen): a user-space
watcher cannot promise a hard bound.

Also watched: the free space of the filesystem of Warden's home, every 0.25 s, when the
workspace lives on it and the command writes (an unlinked file still fills the disk).
"""

from __future__ import annotations

import contextlib
import os
import queue
import select
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator

from warden.adapters import disk_usage
from warden.adapters.disk_usage import UsageTree
from warden.core.changes import ChangeKind, Coalescer, ignored
from warden.core.quota import FREE_KEY, Quota, Usage

__all__ = ["OVERSHOOT", "RESCAN_S", "HostDisk", "Watcher", "kept_tree", "last_watched", "prepare", "ready_thread",
           "realtime_allowed"]

RESCAN_S = 0.2
FREE_CHECK_S = 0.25
# What a run may write past its limit before it dies, as tests/services/test_quota.py measures it.
OVERSHOOT = "about one write (~1 MiB) and a few files past workspace.max_disk / max_files"


# A workspace run in again by the same process (the API server, a Python program) keeps its
# watched tree between runs: the next run applies the events queued meanwhile instead of walking
# every file again. A first run in a process (a one-shot `warden run`) gives its tree back at
# once, so the process exits without waiting for the kernel to drop live watches.
_KEPT: OrderedDict[str, UsageTree] = OrderedDict()
_SEEN: set[str] = set()
_LAST_WATCHED: tuple[str, bool] | None = None  # the last run's workspace folder, and whether its tree could be kept
_KEPT_LOCK = threading.Lock()
_KEPT_MAX = 8
_KEPT_MAX_FILES = 200_000  # about 50 MB of bookkeeping held between runs
# Paths a run's change summary keeps to merge repeated events; past them it counts (overflow).
RUN_TRACKED = 10_000


def _forget_kept() -> None:
    global _LAST_WATCHED
    _KEPT.clear()
    _SEEN.clear()
    _LAST_WATCHED = None
    _THREADS.forget()


os.register_at_fork(after_in_child=_forget_kept)


def _take(root: str) -> UsageTree | None:
    with _KEPT_LOCK:
        return _KEPT.pop(root, None)


def _keep(tree: UsageTree) -> None:
    evicted = [tree]
    with _KEPT_LOCK:
        if tree.root in _SEEN and tree.root not in _KEPT and tree.usage.files <= _KEPT_MAX_FILES:
            _KEPT[tree.root] = tree
            evicted = []
            while len(_KEPT) > _KEPT_MAX or sum(t.usage.files for t in _KEPT.values()) > _KEPT_MAX_FILES:
                evicted.append(_KEPT.popitem(last=False)[1])
        _SEEN.add(tree.root)
    for old in evicted:
        old.close()


@contextlib.contextmanager
def kept_tree(root: str) -> Iterator[UsageTree | None]:
    """The watched tree a past run in this process kept for workspace folder `root`, caught up on
    every event queued since, lent for the block (no run can take it meanwhile) and kept again
    after; None when there is none, or when only a new walk could tell what it holds."""
    tree = _take(root)
    if tree is not None and not tree.catch_up():
        tree.close()
        tree = None
    try:
        yield tree
    finally:
        if tree is not None:
            _give_back(tree)


def _give_back(tree: UsageTree) -> None:
    with _KEPT_LOCK:
        if tree.root not in _KEPT:  # else a run kept a newer one meanwhile
            _KEPT[tree.root] = tree
            return
    tree.close()


def _hurry(tid: int) -> bool:
    """Give the watcher thread real-time priority where Warden may (root, CAP_SYS_NICE or an
    RLIMIT_RTPRIO of 1); True when it has it.

    The overshoot is what the command writes while this thread waits for a CPU. A normal
    thread woken by an event waits for the running task's slice (EEVDF, Linux 6.6+) and, with
    autogroup scheduling, competes as its whole session against the command's: measured here,
    30 x 1 MiB writes against a 5 MiB limit ended 72 KiB to 20 MiB over on a busy machine. At
    SCHED_FIFO 1 it preempts at once: never more than one 1 MiB write over in 40 runs. It only
    runs while there are events to apply, so it cannot starve the machine for long.
    """
    try:
        os.sched_setscheduler(tid, os.SCHED_FIFO, os.sched_param(1))
    except OSError:
        return False
    return True


class _Threads:
    """The threads that run watchers, each kept for the next watcher once its own has closed:
    starting a thread cost each run ~1 ms (its start waits for the new thread to be scheduled,
    on a busy 2-core machine), and one process runs many (the API server, a Python program).
    Daemon threads, as the one-per-run they replace: a process may exit with a run unfinished."""

    KEEP = 4  # idle threads kept; more concurrent runs than that start (and end) their own

    def __init__(self) -> None:
        self._idle: list[queue.SimpleQueue[tuple[Callable[[], None], threading.Event]]] = []
        self._lock = threading.Lock()

    def run(self, loop: Callable[[], None]) -> threading.Event:
        """`loop` run in a thread of its own; the event is set once it has returned."""
        done = threading.Event()
        with self._lock:
            inbox = self._idle.pop() if self._idle else None
        if inbox is None:
            inbox = queue.SimpleQueue()
            threading.Thread(target=self._serve, args=(inbox,), name="warden-quota", daemon=True).start()
        inbox.put((loop, done))
        return done

    def _serve(self, inbox: queue.SimpleQueue[tuple[Callable[[], None], threading.Event]]) -> None:
        # Once per thread, which keeps it for every loop it runs (`warden doctor` says when it
        # cannot): a run's loop then needs the GIL once, to reach its poll.
        _hurry(threading.get_native_id())
        while True:
            loop, done = inbox.get()
            returned = False
            try:
                loop()
                returned = True
            finally:
                with self._lock:  # a thread an exception ends is never handed another loop
                    kept = returned and len(self._idle) < self.KEEP
                    if kept:
                        self._idle.append(inbox)
                done.set()
            if not kept:
                return

    def forget(self) -> None:
        """In a forked child: the parent's threads are not there."""
        self._idle = []
        self._lock = threading.Lock()


_THREADS = _Threads()


def prepare(root: str) -> None:
    """Measure and watch workspace folder `root` now and keep its tree, as a past run in this
    process would have: the daemon's spare does, while it waits, for the workspace its home's
    last command ran in, so the run it serves there catches up on events instead of walking the
    workspace (and the git guard's sweeps list what changed: gitguard.scan_again). Nothing is
    kept where inotify cannot watch it all, or for a tree past what a process keeps."""
    try:
        tree = _scanned(root, disk_usage.inotify())
    except OSError:
        return
    if tree.unwatched is not None:
        tree.close()
        return
    with _KEPT_LOCK:
        _SEEN.add(root)
    _keep(tree)


def _scanned(root: str, notify: int | None) -> UsageTree:
    """Workspace folder `root` walked and measured, watched through `notify` where it can be."""
    tree = UsageTree(root, notify)
    try:
        tree.scan()
    except BaseException:
        tree.close()
        raise
    return tree


def _watched(root: str, keepable: bool) -> None:
    global _LAST_WATCHED
    _LAST_WATCHED = (root, keepable)


def last_watched() -> tuple[str, bool] | None:
    """The workspace folder this process last watched a run in, and whether its tree could be
    kept (all of it watched, not too large); None before any. The daemon's child reports it, and
    the next spare prepares it."""
    return _LAST_WATCHED


def ready_thread() -> None:
    """Start the thread this process's first watcher will use (the daemon's spare, while it
    waits for the run it will serve)."""
    _THREADS.run(lambda: None).wait()


def realtime_allowed() -> bool:
    """Whether the watcher thread will get real-time priority in this process."""
    result: list[bool] = []
    probe = threading.Thread(target=lambda: result.append(_hurry(threading.get_native_id())))
    probe.start()
    probe.join()
    return result == [True]


class Watcher:
    """Measures one workspace, then watches it during a run and stops the run once when it
    grows past its quota (or the home's filesystem falls below `min_free` while it writes).

    Use as a context manager: `start` (the usage before the run) is known on entry; call
    `arm(stop)` once the command runs (its thread watches from then on, with what was queued
    meanwhile); on exit `breach` names the setting that stopped it.
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
        self._done: threading.Event | None = None  # set once the watching thread's loop returned
        self._loop_args: tuple[select.poll, int | None] | None = None  # the loop's, until `arm` starts it
        self._wake_r = self._wake_w = -1
        self._wrote = False
        self._closed = False
        self._failed = False
        # Kept by the caller's loop (`take`), not a thread: its first inotify descriptor, the home's
        # free space at the start and when it is next looked at.
        self._taken = False
        self._taken_fd: int | None = None
        self._free_at_start: int | None = None
        self._next_free = 0.0
        # What the run changed, from the same events (core.changes): its audit event's summary.
        # None where inotify could not watch the workspace (the quota is then kept by rescans).
        self.changes: Coalescer | None = None

    def __enter__(self) -> Watcher:
        self._tree = self._fresh_tree()
        self.start = self._tree.usage
        if self._tree.notify is not None:
            self.changes = Coalescer(RUN_TRACKED)
            self._tree.on_change = self._changed
        self._wake_r, self._wake_w = os.pipe2(os.O_CLOEXEC)
        # What the thread polls and the free space it starts from, set up here, and the thread
        # handed its loop only once the command runs (`arm`): until then no `stop` could act on a
        # breach anyway, and what the command wrote meanwhile is queued by the kernel for the
        # loop's first poll. Started here, the thread's every step took the GIL from this one
        # as it started the command (a handoff each, on a 2-core VM ~0.05 ms on each of this
        # thread's system calls meanwhile); at `arm` this thread goes on to wait for the command.
        poll = select.poll()
        poll.register(self._wake_r, select.POLLIN)
        if self._tree.notify is not None:
            poll.register(self._tree.notify, select.POLLIN)
        free_at_start: int | None = None
        if self.home is not None:
            with contextlib.suppress(OSError):
                free_at_start = disk_usage.free_bytes(self.home)
        self._loop_args = (poll, free_at_start)
        return self

    def _fresh_tree(self) -> UsageTree:
        """The workspace measured and (where inotify can) watched; notify None means rescans."""
        kept = _take(self.root)
        if kept is not None:
            if kept.catch_up():
                return kept
            kept.close()
        try:
            notify: int | None = disk_usage.inotify()
        except OSError as exc:
            notify = None
            self.notes.append(f"inotify unavailable ({exc.strerror}); the quota is checked every {RESCAN_S} s")
        tree = _scanned(self.root, notify)
        if tree.unwatched is not None:
            self.notes.append(f"{tree.unwatched}; the quota is checked every {RESCAN_S} s")
            tree.close()
        return tree

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _changed(self, kind: ChangeKind, path: str) -> None:
        rel = path[len(self.root):]
        if self.changes is not None and not ignored(rel):
            self.changes.add(kind, rel)

    def _last_events(self, tree: UsageTree) -> None:
        """Apply what the kernel queued after the thread last looked: the command has ended, so
        every change it made is queued by now (inotify queues at the system call). One read that
        finds nothing, for a run that changed nothing."""
        if tree.notify is None or self._failed:
            return
        dirty: set[str] = set()
        try:
            while True:
                try:
                    data = os.read(tree.notify, 1 << 16)
                except BlockingIOError:
                    break
                for wd, mask, name in disk_usage.events(data):
                    tree.handle(wd, mask, name, dirty)
        except disk_usage.Overflow:
            self._failed = True  # the kept tree is stale: it is measured afresh next time
            if self.changes is not None:
                self.changes.lost()
        except OSError:
            self._failed = True
        if not tree.settle(dirty, final=True):
            self._failed = True  # a file's names not found: measured afresh next time

    @property
    def usage(self) -> Usage:
        """What the workspace holds as far as the events read so far tell."""
        return self._tree.usage if self._tree is not None else self.start

    def arm(self, stop: Callable[[], None]) -> None:
        """`stop` kills the run; called at once if the workspace already passed its quota."""
        with self._lock:
            again = self._taken and self._stop is not None
            self._stop = stop
            fire = self.breach is not None
            loop_args, self._loop_args = self._loop_args, None
        if again and self._done is None:
            # Armed again: the runner that kept the watch gave its command up (its live sandbox
            # ended as it started) and another runs it now, which waits on no watch: a thread does.
            self._taken = False
            poll = select.poll()
            poll.register(self._wake_r, select.POLLIN)
            if self._tree is not None and self._tree.notify is not None:
                poll.register(self._tree.notify, select.POLLIN)
            loop_args = (poll, self._free_at_start)
        if loop_args is not None:
            poll, free_at_start = loop_args
            self._done = _THREADS.run(lambda: self._loop(poll, free_at_start))
        if fire:
            stop()

    def close(self) -> None:
        """Stop watching (the run has ended): neither `stop` nor `breach` changes after this.

        The thread's loop is waited for and its watches removed here, in the caller's thread: a
        thread left to tidy up would contend for the GIL with the caller's next steps.
        """
        with self._lock:
            self._stop = None
            self._closed = True
        if self._done is not None:
            with contextlib.suppress(BrokenPipeError):  # the loop may have returned already (a breach)
                os.write(self._wake_w, b"x")
            self._done.wait()
            self._done = None
        for fd in (self._wake_r, self._wake_w):
            if fd >= 0:
                os.close(fd)
        self._wake_r = self._wake_w = -1
        if self._tree is not None:
            self._last_events(self._tree)
            self._ended_over(self._tree.usage)
            self._tree.on_change = None
            # Not kept with blind files: the next run would charge them all again at each look.
            kept = not self._failed and self._tree.notify is not None and not self._tree.blinded
            _watched(self._tree.root, kept and self._tree.usage.files <= _KEPT_MAX_FILES)
            if not kept:
                self._tree.close()  # watches removed, the descriptor pooled: no waiting on the kernel
            else:
                _keep(self._tree)
            self._tree = None

    def _ended_over(self, now: Usage) -> None:
        """The run ended past its quota before the thread saw it (its last events, or files charged
        again only at the end): nothing is left to stop, but the breach is told (`stop_note`
        says "as the command ended") rather than the workspace left over it unsaid."""
        key = self.quota.breach(self.start, now)
        with self._lock:
            if self.breach is None and key is not None:
                self.breach, self.at = key, now

    # -- the thread ------------------------------------------------------------------------
    def _fire(self, key: str, now: Usage) -> None:
        with self._lock:
            if self.breach is not None or self._closed:
                return
            self.breach, self.at = key, now
            stop = self._stop
        if stop is not None:
            stop()

    def _loop(self, poll: select.poll, free_at_start: int | None) -> None:
        try:
            self._watch(poll, free_at_start)
        except Exception as exc:  # the run goes on unwatched rather than die with Warden's bug
            self._failed = True
            self.notes.append(f"the quota watcher stopped: {exc!r}")

    def _watch(self, poll: select.poll, free_at_start: int | None) -> None:
        self._free_at_start = free_at_start
        self._next_free = time.monotonic() + FREE_CHECK_S
        while self.breach is None:
            tree = self._tree
            assert tree is not None
            due = self._due()
            ready = {fd for fd, _ in poll.poll(None if due is None else due * 1000)}
            if self._wake_r in ready:
                return
            self._look(tree.notify is not None and tree.notify in ready)
            if self._tree is not tree:  # measured afresh (the kernel's queue overflowed)
                if tree.notify is not None:
                    poll.unregister(tree.notify)
                if self._tree is not None and self._tree.notify is not None:
                    poll.register(self._tree.notify, select.POLLIN)

    def _due(self) -> float | None:
        """Seconds until the next look that no event asks for (None: none): a rescan without
        inotify, the home's free space, the files to charge again (UsageTree.settle)."""
        tree = self._tree
        assert tree is not None
        timeout = None
        if tree.notify is None:
            timeout = RESCAN_S
        elif self.home is not None:
            # The home's free space is watched whatever the workspace's filesystem: a run can also
            # fill it through an allowed read-write folder, which the tree above does not see.
            timeout = max(0.0, self._next_free - time.monotonic())
        looking = tree.next_look() if tree.notify is not None else None
        if looking is not None:  # files to charge again, put off so far (UsageTree.settle)
            timeout = looking if timeout is None else min(timeout, looking)
        return timeout

    def _look(self, readable: bool) -> None:
        """One look: what the kernel queued (`readable`: there is some), else the files due to be
        charged again, and the home's free space when due; the run stopped on a breach."""
        tree = self._tree
        assert tree is not None
        looking = tree.next_look() if tree.notify is not None else None
        if tree.notify is None:
            self._check(disk_usage.measure(self.root))
        elif not readable and looking is not None:
            tree.settle(set())
            self._check(tree.usage)
        elif readable:
            try:
                self._drain(tree)
            except disk_usage.Overflow:
                tree.close()
                tree = self._tree = self._fresh_tree()
                if self.changes is not None:
                    self.changes.lost()  # what the kernel dropped is counted, not listed
                    tree.on_change = self._changed
                self._check(tree.usage)
        if self.home is not None and self.breach is None and time.monotonic() >= self._next_free:
            self._next_free = time.monotonic() + FREE_CHECK_S
            free = disk_usage.free_bytes(self.home or "/")
            # Below min_free, and this run wrote (in the workspace, or the disk shrank by
            # more than 1 MiB since it started): stopped, before the registry's disk is full.
            shrank = self._free_at_start is not None and free < self._free_at_start - (1 << 20)
            if (self._wrote or shrank) and self.quota.free_problem(free, "") is not None:
                self._fire(FREE_KEY, tree.usage)

    # -- kept by the runner's own loop (core.runs.RunWatch) ------------------------------------
    def take(self) -> bool:
        """The watch kept from the caller's loop (as it waits on the command) rather than from a
        thread: a quick command then costs no handoff to a thread and back (on a busy 2-core
        machine ~1.5 ms of an exec of `true` in a live sandbox). Only with inotify, before `arm`."""
        with self._lock:
            if self._loop_args is None or self._tree is None or self._tree.notify is None or self._closed:
                return False
            _, self._free_at_start = self._loop_args
            self._loop_args = None  # `arm` starts no thread
            self._taken_fd = self._tree.notify
            self._next_free = time.monotonic() + FREE_CHECK_S
            self._taken = True
        return True

    def fileno(self) -> int:
        """What the caller waits on: the inotify descriptor the watch started with (a queue that
        overflows hands the watch to a thread, which goes on with a fresh one)."""
        if self._taken_fd is None:
            raise ValueError("the watch was not taken")
        return self._taken_fd

    def due(self) -> float | None:
        if not self._taken or self.breach is not None or self._closed or self._tree is None:
            return None
        return self._due()

    def look(self) -> None:
        if not self._taken or self.breach is not None or self._closed or self._tree is None:
            return
        tree = self._tree
        try:
            self._look(True)  # a read that finds nothing costs one system call
        except Exception as exc:  # the run goes on unwatched rather than die with Warden's bug
            self._failed = True
            self._taken = False
            self.notes.append(f"the quota watcher stopped: {exc!r}")
            return
        if self._tree is not tree and self.breach is None:
            # Measured afresh: its descriptor is not the one the caller waits on. A thread of its
            # own watches the rest of the run, as for a command that does not wait itself.
            self._taken = False
            poll = select.poll()
            poll.register(self._wake_r, select.POLLIN)
            if self._tree is not None and self._tree.notify is not None:
                poll.register(self._tree.notify, select.POLLIN)
            self._done = _THREADS.run(lambda: self._loop(poll, self._free_at_start))

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
                if self.breach is None and (key := self.quota.breach(self.start, tree.usage)) is not None:
                    # The run is stopped at once; the rest of what was read is still applied, or the
                    # kept tree would miss those changes for good (the git guard's sweep trusts it).
                    self._fire(key, tree.usage)
        tree.settle(dirty)
        self._check(tree.usage)


class HostDisk:
    """Measures with one walk (adapters/disk_usage), watches a run with inotify (adapters/quota)."""

    def nearest_existing(self, path: str) -> str:
        # On the text of the path (os.path), not pathlib: asked twice at every run. As
        # Path(path).parent steps: no `..` folded, a relative path's last parent is ".".
        found = path.rstrip("/") or ("/" if path else ".")
        while not os.path.exists(found):
            parent = os.path.dirname(found) or "."
            if parent == found:
                break
            found = parent
        return found

    def free_bytes(self, path: str) -> int:
        return disk_usage.free_bytes(path)

    def measure(self, root: str) -> Usage:
        return disk_usage.measure(os.path.realpath(root))

    def watch(self, root: str, quota: Quota, *, home: str) -> Watcher:
        return Watcher(os.path.realpath(root), quota, home=home)
