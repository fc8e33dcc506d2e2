"""Measure a workspace's disk use, and watch it grow while a command runs (inotify).

The standard library only (inotify through ctypes). core/quota.py decides; this module counts.

How a run is held to its workspace's budget:
- before it starts, one walk measures the workspace (every entry lstat'ed, no link followed,
  no other filesystem entered, folders opened beneath their parent with O_NOFOLLOW, hard
  links charged once) and puts an inotify watch on every folder;
- the runner's RLIMIT_FSIZE is the budget left (core.quota.Quota.file_size_cap), so no
  single file can pass it;
- a thread reads the events as they arrive and charges each created, moved-in or modified
  entry with one lstat (a new folder is walked and watched). When the workspace grows past a
  limit it calls the run's stop function once: the whole process tree dies (status 137).
  What the command writes between passing the limit and dying is the overshoot; it is
  measured by tests/services/test_quota.py.
- where inotify cannot watch every folder (fs.inotify.max_user_watches) the thread measures
  the whole tree every 0.2 s instead, and the run says so.

Also watched: the free space of the filesystem of Warden's home, every 0.25 s, when the
workspace lives on it and the command writes (an unlinked file still fills the disk).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import select
import stat
import struct
import threading
import time
from collections.abc import Callable
from functools import cache

from warden.core.paths import is_inside
from warden.core.quota import FREE_KEY, Quota, Usage, charge

__all__ = ["OVERSHOOT", "RESCAN_S", "Watcher", "free_bytes", "inotify_works", "measure", "project_quota"]

_IN_MODIFY = 0x2
_IN_MOVED_FROM = 0x40
_IN_MOVED_TO = 0x80
_IN_CREATE = 0x100
_IN_DELETE = 0x200
_IN_Q_OVERFLOW = 0x4000
_IN_IGNORED = 0x8000
_IN_ONLYDIR = 0x01000000
_MASK = _IN_CREATE | _IN_MODIFY | _IN_DELETE | _IN_MOVED_FROM | _IN_MOVED_TO | _IN_ONLYDIR
_EVENT = struct.Struct("iIII")
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_ROOT = os.geteuid() == 0  # root reads every folder whatever its mode
RESCAN_S = 0.2
_WATCHER_NICE = -10
FREE_CHECK_S = 0.25
# What a run may write past its limit before it dies, as tests/services/test_quota.py measures it.
OVERSHOOT = "~1 MiB and ~100 files past workspace.max_disk / max_files"


@cache
def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.inotify_init1.argtypes = [ctypes.c_int]
    libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
    libc.inotify_rm_watch.argtypes = [ctypes.c_int, ctypes.c_int]
    return libc


# Closing an inotify descriptor that ever held a watch waits for the kernel's fsnotify SRCU
# grace period (0-24 ms seen here, and more than that on later runs in the same process);
# removing its watches does not. So a run's descriptor is kept for the next one: watches
# removed, queue drained, back in this pool. A forked child starts with none.
_POOL: list[int] = []
_POOL_LOCK = threading.Lock()
_POOL_MAX = 8
os.register_at_fork(after_in_child=_POOL.clear)


def _inotify() -> int:
    with _POOL_LOCK:
        if _POOL:
            return _POOL.pop()
    fd = int(_libc().inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC))
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return fd


def _release(fd: int, wds: list[int]) -> None:
    """Remove the watches `wds` of `fd` and keep it for the next run (closed when the pool is full)."""
    libc = _libc()
    for wd in wds:
        libc.inotify_rm_watch(fd, wd)  # EINVAL when the folder went already: fine
    with contextlib.suppress(OSError):  # BlockingIOError once the queue is empty
        while os.read(fd, 1 << 16):
            pass
    with _POOL_LOCK:
        if len(_POOL) < _POOL_MAX:
            _POOL.append(fd)
            return
    os.close(fd)


def inotify_works() -> bool:
    """Whether this process can make an inotify instance (fs.inotify.max_user_instances)."""
    try:
        _release(_inotify(), [])
    except OSError:
        return False
    return True


class _Overflow(Exception):
    """The kernel dropped events (IN_Q_OVERFLOW): the tree must be measured again."""


def _open_dir(name: str, parent: int | None) -> int | None:
    """A folder opened for listing, beneath `parent`, never through a link; None if it is gone.

    A folder the bot made unreadable (chmod 000) would hide what it holds: Warden runs as its
    owner, so it gives the owner read and search back (through an O_PATH descriptor, no path).
    """
    try:
        fd = os.open(name, _DIR_FLAGS, dir_fd=parent)
    except PermissionError:
        try:
            path_fd = os.open(name, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent)
            try:
                mode = stat.S_IMODE(os.fstat(path_fd).st_mode)
                os.chmod(f"/proc/self/fd/{path_fd}", mode | stat.S_IRWXU)
            finally:
                os.close(path_fd)
            fd = os.open(name, _DIR_FLAGS, dir_fd=parent)
        except OSError:
            return None
    except OSError:
        return None
    if not _ROOT:  # listable but not searchable (r without x) hides sizes: give x back too
        mode = os.fstat(fd).st_mode
        if mode & (stat.S_IRUSR | stat.S_IXUSR) != (stat.S_IRUSR | stat.S_IXUSR):
            with contextlib.suppress(OSError):
                os.fchmod(fd, stat.S_IMODE(mode) | stat.S_IRWXU)
    return fd


class _Tree:
    """What every folder of a workspace holds, and the bytes charged per inode.

    `notify` is an inotify descriptor (every walked folder gets a watch) or None (measure only).
    """

    def __init__(self, root: str, notify: int | None) -> None:
        self.root = root
        self.notify = notify
        self.dev = 0
        self.bytes = 0
        self.wd_dir: dict[int, str] = {}
        self.dir_wd: dict[str, int] = {}
        self.entries: dict[str, dict[str, tuple[int, bool]]] = {}
        self.charges: dict[int, int] = {}
        self.links: dict[int, int] = {}
        self.unwatched: str | None = None  # why some folder has no watch (then: rescans)

    @property
    def usage(self) -> Usage:
        return Usage(self.bytes, len(self.charges) - 1)  # the workspace folder itself is no file

    def scan(self) -> None:
        fd = _open_dir(self.root, None)
        if fd is None:
            raise FileNotFoundError(errno.ENOENT, "workspace folder missing", self.root)
        st = os.fstat(fd)
        self.dev = st.st_dev
        self.charges[st.st_ino] = self.bytes = charge(st.st_blocks, st.st_size)
        self.links[st.st_ino] = 1
        self._walk(fd, self.root)

    # -- walking ---------------------------------------------------------------------------
    def _watch(self, fd: int, path: str) -> None:
        if self.notify is None:
            return
        wd = int(_libc().inotify_add_watch(self.notify, f"/proc/self/fd/{fd}".encode(), _MASK))
        if wd < 0:
            err = ctypes.get_errno()
            self.unwatched = f"inotify cannot watch {path}: {os.strerror(err)}"
            return
        self.wd_dir[wd] = path
        self.dir_wd[path] = wd

    def _walk(self, fd: int, path: str) -> None:
        """Watch and list `fd` (closed here) and every folder below it, depth first.

        One descriptor per level is held, the listing read whole first, so depth costs
        descriptors and no recursion.
        """
        stack: list[tuple[int, str, list[os.DirEntry[str]]]] = []
        current: tuple[int, str] | None = (fd, path)
        try:
            while current is not None or stack:
                if current is not None:
                    dir_fd, dir_path = current
                    current = None
                    self._watch(dir_fd, dir_path)
                    self.entries.setdefault(dir_path, {})
                    try:
                        with os.scandir(dir_fd) as it:
                            listing = list(it)
                    except OSError:
                        listing = []
                    stack.append((dir_fd, dir_path, listing))
                    continue
                dir_fd, dir_path, listing = stack[-1]
                if not listing:
                    os.close(dir_fd)
                    stack.pop()
                    continue
                entry = listing.pop()
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                if st.st_dev != self.dev:
                    continue  # a mount inside the workspace is another filesystem's business
                is_dir = stat.S_ISDIR(st.st_mode)
                self._put(dir_path, entry.name, st, is_dir)
                if is_dir and (child := _open_dir(entry.name, dir_fd)) is not None:
                    current = (child, f"{dir_path}/{entry.name}")
        finally:
            if current is not None:
                os.close(current[0])
            for dir_fd, _, _ in stack:
                os.close(dir_fd)

    # -- bookkeeping -----------------------------------------------------------------------
    def _put(self, path: str, name: str, st: os.stat_result, is_dir: bool) -> None:
        listing = self.entries.get(path)
        if listing is None:
            return
        if name in listing:
            self._drop(path, name)
        listing[name] = (st.st_ino, is_dir)
        cost = charge(st.st_blocks, st.st_size)
        old = self.charges.get(st.st_ino)
        self.charges[st.st_ino] = cost
        self.links[st.st_ino] = self.links.get(st.st_ino, 0) + 1
        self.bytes += cost - (old or 0)

    def _unlink(self, ino: int) -> None:
        left = self.links.get(ino, 1) - 1
        if left > 0:
            self.links[ino] = left
            return
        self.links.pop(ino, None)
        self.bytes -= self.charges.pop(ino, 0)

    def _drop(self, path: str, name: str) -> None:
        ino, is_dir = self.entries[path].pop(name)
        self._unlink(ino)
        if not is_dir:
            return
        stack = [f"{path}/{name}"]
        while stack:
            top = stack.pop()
            wd = self.dir_wd.pop(top, None)
            if wd is not None:
                self.wd_dir.pop(wd, None)
                if self.notify is not None:
                    _libc().inotify_rm_watch(self.notify, wd)  # EINVAL when already gone: fine
            for child, (child_ino, child_dir) in self.entries.pop(top, {}).items():
                self._unlink(child_ino)
                if child_dir:
                    stack.append(f"{top}/{child}")

    # -- events ----------------------------------------------------------------------------
    def handle(self, wd: int, mask: int, name: str, dirty: set[str]) -> None:
        """Apply one inotify event."""
        if mask & _IN_Q_OVERFLOW:
            raise _Overflow
        path = self.wd_dir.get(wd)
        if path is None:
            return
        if mask & _IN_IGNORED:
            del self.wd_dir[wd]
            if self.dir_wd.get(path) == wd:
                del self.dir_wd[path]
            return
        if not name:
            return
        listing = self.entries.get(path)
        if listing is None:
            return
        if mask & (_IN_DELETE | _IN_MOVED_FROM):
            if name in listing:
                self._drop(path, name)
            return
        full = f"{path}/{name}"
        try:
            st = os.lstat(full)
        except OSError:
            return  # gone again: its IN_DELETE follows
        if st.st_dev != self.dev:
            return
        known = listing.get(name)
        if mask & _IN_MODIFY and known is not None and known[0] == st.st_ino:
            cost = charge(st.st_blocks, st.st_size)
            self.bytes += cost - self.charges.get(st.st_ino, 0)
            self.charges[st.st_ino] = cost
            return
        is_dir = stat.S_ISDIR(st.st_mode)
        self._put(path, name, st, is_dir)
        dirty.add(path)  # a folder's own blocks grow with its entries
        if is_dir and (child := _open_dir(full, None)) is not None:
            self._walk(child, full)  # what was made in it before its watch existed counts too

    def restat(self, path: str) -> None:
        """Charge a folder's own blocks again (they grow as entries are added)."""
        try:
            st = os.lstat(path)
        except OSError:
            return
        old = self.charges.get(st.st_ino)
        if old is not None:
            cost = charge(st.st_blocks, st.st_size)
            self.charges[st.st_ino] = cost
            self.bytes += cost - old

    def close(self) -> None:
        if self.notify is not None:
            _release(self.notify, list(self.wd_dir))
            self.notify = None


def measure(root: str) -> Usage:
    """What the workspace folder `root` holds now: bytes charged and files (core.quota.charge)."""
    tree = _Tree(root, None)
    tree.scan()
    return tree.usage


def free_bytes(path: str) -> int:
    """Bytes an unprivileged writer may still use on the filesystem holding `path`."""
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


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
        self._tree: _Tree | None = None
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

    def _fresh_tree(self) -> _Tree:
        """The workspace measured and (where inotify can) watched; notify None means rescans."""
        try:
            notify: int | None = _inotify()
        except OSError as exc:
            notify = None
            self.notes.append(f"inotify unavailable ({exc.strerror}); the quota is checked every {RESCAN_S} s")
        tree = _Tree(self.root, notify)
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
                self._check(measure(self.root))
            elif tree.notify in ready:
                try:
                    self._drain(tree)
                except _Overflow:
                    poll.unregister(tree.notify)
                    tree.close()
                    tree = self._tree = self._fresh_tree()
                    if tree.notify is not None:
                        poll.register(tree.notify, select.POLLIN)
                    self._check(tree.usage)
            if same_fs and self.breach is None and time.monotonic() >= next_free:
                next_free = time.monotonic() + FREE_CHECK_S
                if self._wrote and self.quota.free_problem(free_bytes(self.home or "/"), "") is not None:
                    self._fire(FREE_KEY, tree.usage)

    def _check(self, now: Usage) -> None:
        if now != self.start:
            self._wrote = True
        key = self.quota.breach(self.start, now)
        if key is not None:
            self._fire(key, now)

    def _drain(self, tree: _Tree) -> None:
        """Apply every queued event, checking the quota after each one."""
        assert tree.notify is not None
        dirty: set[str] = set()
        while self.breach is None:
            try:
                data = os.read(tree.notify, 1 << 16)
            except BlockingIOError:
                break
            offset = 0
            while offset < len(data):
                wd, mask, _cookie, size = _EVENT.unpack_from(data, offset)
                start = offset + _EVENT.size
                name = data[start:start + size].split(b"\0", 1)[0].decode("utf-8", "surrogateescape")
                offset = start + size
                tree.handle(wd, mask, name, dirty)
                self._wrote = True
                key = self.quota.breach(self.start, tree.usage)
                if key is not None:
                    self._fire(key, tree.usage)
                    return
        for path in dirty:
            tree.restat(path)
        self._check(tree.usage)


# -- kernel project quotas (detection only) ------------------------------------------------
_FS_IOC_FSGETXATTR = 0x801C581F  # _IOR('X', 31, struct fsxattr), 28 bytes
_FS_IOC_FSSETXATTR = 0x401C5820  # _IOW('X', 32, struct fsxattr)
_FS_XFLAG_PROJINHERIT = 0x200
_FSXATTR = struct.Struct("IIIII8x")  # xflags, extsize, nextents, projid, cowextsize
_PROJECT_OPTIONS = {"prjquota", "prjjquota", "pquota", "pqnoenforce"}


def _mount_of(path: str) -> tuple[str, str, str, set[str]]:
    """(mount point, type, source, options) of the filesystem holding `path` (mountinfo)."""
    found = ("/", "?", "?", set[str]())
    with open("/proc/self/mountinfo") as fh:
        for line in fh:
            left, _, right = line.partition(" - ")
            fields, tail = left.split(), right.split()
            if len(fields) < 6 or len(tail) < 2:
                continue
            point = fields[4].replace("\\040", " ")
            if is_inside(path, point) and len(point) >= len(found[0]):
                options = set(fields[5].split(",")) | set((tail[2] if len(tail) > 2 else "").split(","))
                found = (point, tail[0], tail[1], options)
    return found


def probe_project_id(folder: str) -> None:
    """Give a fresh folder inside `folder` a project id, as a project quota would (raises OSError)."""
    import fcntl
    import tempfile

    probe = tempfile.mkdtemp(prefix=".warden-prjquota-", dir=folder)
    try:
        fd = os.open(probe, _DIR_FLAGS)
        try:
            buf = bytearray(_FSXATTR.size)
            fcntl.ioctl(fd, _FS_IOC_FSGETXATTR, buf)
            xflags, extsize, nextents, _projid, cow = _FSXATTR.unpack(buf)
            fcntl.ioctl(fd, _FS_IOC_FSSETXATTR, bytearray(_FSXATTR.pack(
                xflags | _FS_XFLAG_PROJINHERIT, extsize, nextents, 0x5741, cow)))
        finally:
            os.close(fd)
    finally:
        os.rmdir(probe)


def project_quota(path: str) -> tuple[bool, str]:
    """Whether the kernel could enforce a project quota under `path`, and what was seen."""
    real = os.path.realpath(path)
    while not os.path.isdir(real) and real != "/":
        real = os.path.dirname(real)
    point, kind, source, options = _mount_of(real)
    where = f"{kind} {source} on {point}"
    if not options & _PROJECT_OPTIONS:
        return False, f"{where} is mounted without prjquota"
    try:
        probe_project_id(real)
    except OSError as exc:
        return False, f"{where} has prjquota, but setting a project id failed ({exc.strerror})"
    return True, f"{where} is mounted with prjquota and project ids can be set"
