"""What a workspace holds on disk, counted once and then kept up to date from inotify events.

The standard library only (inotify through ctypes). A walk lstat's every entry, follows no
link, enters no other filesystem, opens folders beneath their parent with O_NOFOLLOW and
charges hard links once (core.quota.charge: blocks, or the length when larger). With an
inotify descriptor, every folder walked also gets a watch, and `UsageTree.handle` applies one
event with at most one lstat (a new folder is walked and watched), so the count stays what a
fresh walk would say. adapters/quota.py runs it during a run.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import stat
import struct
import threading
import time
from collections.abc import Callable, Iterator
from functools import cache

from warden.core.changes import ChangeKind
from warden.core.quota import Usage, charge

__all__ = ["Overflow", "UsageTree", "add_watch", "events", "free_bytes", "inotify", "inotify_works", "measure",
           "release", "remove_watch"]

_IN_MODIFY = 0x2
_IN_MOVED_FROM = 0x40
_IN_MOVED_TO = 0x80
_IN_CREATE = 0x100
_IN_DELETE = 0x200
_IN_Q_OVERFLOW = 0x4000
_IN_IGNORED = 0x8000
_IN_ISDIR = 0x40000000
_IN_ONLYDIR = 0x01000000
_MASK = _IN_CREATE | _IN_MODIFY | _IN_DELETE | _IN_MOVED_FROM | _IN_MOVED_TO | _IN_ONLYDIR
_NAMING = _IN_CREATE | _IN_DELETE | _IN_MOVED_FROM | _IN_MOVED_TO  # an entry made, removed or moved
# Past this many entries touched between two looks, a consumer is told to look at everything again.
TOUCHED_MAX = 20_000
# Names gone before their event was read that a tree remembers; past them, every file is charged again.
_UNSEEN_MAX = 4096
# Past this many files, charging every file again waits for the run's end (it costs an lstat each,
# in the watcher's real-time thread).
_RECHARGE_LIVE_MAX = 50_000
_EVENT = struct.Struct("iIII")
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_ROOT = os.geteuid() == 0  # root reads every folder whatever its mode


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


def inotify() -> int:
    """An inotify descriptor (non-blocking), from the pool when one is free."""
    with _POOL_LOCK:
        if _POOL:
            return _POOL.pop()
    fd = int(_libc().inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC))
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return fd


def release(fd: int, wds: list[int]) -> None:
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


def add_watch(fd: int, folder_fd: int, mask: int) -> int:
    """Watch the folder open as `folder_fd` (through its descriptor: no path, no link followed);
    its watch descriptor, or minus the errno."""
    wd = int(_libc().inotify_add_watch(fd, f"/proc/self/fd/{folder_fd}".encode(), mask))
    return wd if wd >= 0 else -ctypes.get_errno()


def remove_watch(fd: int, wd: int) -> None:
    """Remove one watch (EINVAL when the folder went already: fine)."""
    _libc().inotify_rm_watch(fd, wd)


def inotify_works() -> bool:
    """Whether this process can make an inotify instance (fs.inotify.max_user_instances)."""
    try:
        release(inotify(), [])
    except OSError:
        return False
    return True


def events(data: bytes) -> Iterator[tuple[int, int, str]]:
    """(watch descriptor, mask, name) of each `struct inotify_event` in `data` (inotify(7))."""
    offset = 0
    while offset < len(data):
        wd, mask, _cookie, size = _EVENT.unpack_from(data, offset)
        start = offset + _EVENT.size
        yield wd, mask, data[start:start + size].split(b"\0", 1)[0].decode("utf-8", "surrogateescape")
        offset = start + size


class Overflow(Exception):
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


def _holds(path: str, ino: int) -> bool:
    """Whether `path` names inode `ino` now. An exchange (renameat2 RENAME_EXCHANGE) of a and b
    comes as: a moved from, b moved to, b moved from, a moved to; by the time the third is read
    b was already put as it is now, and must not be dropped again."""
    try:
        return os.lstat(path).st_ino == ino
    except OSError:
        return False


class UsageTree:
    """What every folder of a workspace holds, and the bytes charged per inode.

    `notify` is an inotify descriptor (every walked folder gets a watch) or None (measure only).
    """

    def __init__(self, root: str, notify: int | None) -> None:
        self.root = root
        self.notify = notify
        self.root_ino = 0
        self.dev = 0
        self.bytes = 0
        self.wd_dir: dict[int, str] = {}
        self.dir_wd: dict[str, int] = {}
        self.entries: dict[str, dict[str, tuple[int, bool]]] = {}
        self.charges: dict[int, int] = {}
        self.links: dict[int, int] = {}
        self.unwatched: str | None = None  # why some folder has no watch (then: rescans)
        # Told each change an event shows, as (kind, host path): a run's change summary
        # (adapters/quota.py). None between runs, so catching up on others' changes is not told.
        self.on_change: Callable[[ChangeKind, str], None] | None = None
        self._telling: Callable[[ChangeKind, str], None] | None = None  # set while a new folder is walked
        # (folder path, name) of every entry made, removed or moved, as the events tell, since a
        # consumer (the git guard's sweep) last set it to an empty set; None: not collected, or
        # more than TOUCHED_MAX (then the consumer cannot know what changed and looks at all).
        self.touched: set[tuple[str, str]] | None = None
        # Files that lost a name while keeping another (hard links): a write through a name read
        # too late to say which file it was (gone, or another file's now) reached one of them,
        # and no event will come for the names they still have. Charged again by those names.
        self.suspects: set[int] = set()
        self._suspects_looked = 0.0  # when `settle` last looked for their names (monotonic)
        # Names made (or moved to) and gone again before their event was read: the file such a name
        # held is unknown. Removed, such a name may have been a hard link made to write a file of
        # the workspace through, unseen: then (`unresolved`) every file is charged again by `settle`.
        self._unseen: set[str] = set()
        self.unresolved = False
        # Names whose removal was read, of a file that lived on (a hard link: its inode) or of one
        # never seen (None). A descriptor opened by such a name writes on, and its events keep that
        # name: they say which file grew (or, None, that any may have), where nothing else will.
        self._lost: dict[str, int | None] = {}
        self._alias: dict[int, str] = {}  # a lost name's file: another name it had when last looked for
        # Files that lost a name in a folder since removed (or moved): a descriptor opened by that
        # name writes on, and its events went to the folder's watch, gone with it. No event will
        # ever say they grew: charged again by every timed look and at the end, while they live.
        # `_blind_all`: such a name's file was never seen, or a folder was made and removed unseen
        # (any file may have had a name in it): every file is, by each timed look and at the end.
        self.blind: set[int] = set()
        self._blind_all = False

    @property
    def usage(self) -> Usage:
        return Usage(self.bytes, len(self.charges) - 1)  # the workspace folder itself is no file

    def scan(self) -> None:
        fd = _open_dir(self.root, None)
        if fd is None:
            raise FileNotFoundError(errno.ENOENT, "workspace folder missing", self.root)
        st = os.fstat(fd)
        self.dev, self.root_ino = st.st_dev, st.st_ino
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
        old = self.wd_dir.get(wd)
        if old is not None and old != path and self.dir_wd.get(old) == wd:
            # The kernel gave the watch this folder already had under the name it had before it
            # moved (the event saying so is still queued): the watch is the new name's now, or
            # dropping the old name would remove it and this folder would go unwatched, unnoticed.
            del self.dir_wd[old]
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
        if self._telling is not None:
            self._telling("added", f"{path}/{name}")
        cost = charge(st.st_blocks, st.st_size)
        old = self.charges.get(st.st_ino)
        self.charges[st.st_ino] = cost
        self.links[st.st_ino] = self.links.get(st.st_ino, 0) + 1
        self.bytes += cost - (old or 0)

    def _unlink(self, ino: int, is_dir: bool) -> None:
        left = self.links.get(ino, 1) - 1
        if left > 0:
            self.links[ino] = left
            if not is_dir:  # a folder has one name: a second is its walk under a new one, read early
                self.suspects.add(ino)
            return
        self.suspects.discard(ino)
        self.blind.discard(ino)
        self._alias.pop(ino, None)
        self.links.pop(ino, None)
        self.bytes -= self.charges.pop(ino, 0)

    def _drop(self, path: str, name: str) -> None:
        ino, is_dir = self.entries[path].pop(name)
        self._unlink(ino, is_dir)
        if not is_dir:
            return
        stack = [f"{path}/{name}"]
        while stack:
            top = stack.pop()
            self._blinded(top)
            wd = self.dir_wd.pop(top, None)
            if wd is not None:
                self.wd_dir.pop(wd, None)
                if self.notify is not None:
                    _libc().inotify_rm_watch(self.notify, wd)  # EINVAL when already gone: fine
            for child, (child_ino, child_dir) in self.entries.pop(top, {}).items():
                self._unlink(child_ino, child_dir)
                if child_dir:
                    stack.append(f"{top}/{child}")

    def _blinded(self, folder: str) -> None:
        """The folder `folder` is no longer watched: the files that lost a name in it are blind."""
        if not self._lost:
            return
        prefix = f"{folder}/"
        for full in [full for full in self._lost if full.startswith(prefix)]:
            ino = self._lost.pop(full)
            if ino is None:
                self._blind_all = True
            elif ino in self.links:
                self.blind.add(ino)

    # -- events ----------------------------------------------------------------------------
    def handle(self, wd: int, mask: int, name: str, dirty: set[str]) -> None:
        """Apply one inotify event."""
        if mask & _IN_Q_OVERFLOW:
            raise Overflow
        path = self.wd_dir.get(wd)
        if path is None:
            return
        if mask & _NAMING and name and self.touched is not None:
            self.touched.add((path, name))
            if len(self.touched) > TOUCHED_MAX:
                self.touched = None
        if mask & _IN_IGNORED:
            if self.touched is not None and path != self.root:
                # The folder is no longer watched (gone, or the kernel dropped its watch): what
                # it holds now is for its parent's next look to find, so its name counts as touched.
                parent, _, name = path.rpartition("/")
                self.touched.add((parent, name))
            del self.wd_dir[wd]
            if self.dir_wd.get(path) == wd:
                del self.dir_wd[path]
            return
        if not name:
            return
        listing = self.entries.get(path)
        if listing is None:
            return
        told = self.on_change
        full = f"{path}/{name}"
        if mask & (_IN_DELETE | _IN_MOVED_FROM):
            if name in listing and not (mask & _IN_MOVED_FROM and _holds(full, listing[name][0])):
                ino, is_dir = listing[name]
                self._drop(path, name)
                if not is_dir and ino in self.links:
                    self._lose(full, ino)
            elif full in self._unseen:
                self._unseen.discard(full)
                if mask & _IN_DELETE:
                    self.unresolved = True
                    self._lose(full, None)
                    if mask & _IN_ISDIR:  # never watched: writes by a name it held are never told
                        self._blind_all = True
            if told is not None:
                told("deleted", full)
            return
        if not mask & _NAMING and full in self._lost:
            self._written_lost(full)
        try:
            st = os.lstat(full)
        except OSError:
            if told is not None:
                told("added", full)  # gone again: its IN_DELETE follows and the two cancel out
            if not mask & _NAMING and name not in listing and full not in self._lost:
                # A write through a name this tree never held (made, linked to a file of the
                # workspace, opened and removed before its folder was walked) or no longer
                # remembers: any file may have grown. (A removed temporary file's writes come so too.)
                self.unresolved = True
            if name not in listing:
                if len(self._unseen) < _UNSEEN_MAX:
                    self._unseen.add(full)
                else:
                    self.unresolved = True
            return
        if st.st_dev != self.dev:
            return
        known = listing.get(name)
        if mask & _IN_MODIFY and known is not None and known[0] == st.st_ino:
            cost = charge(st.st_blocks, st.st_size)
            self.bytes += cost - self.charges.get(st.st_ino, 0)
            self.charges[st.st_ino] = cost
            if told is not None:
                told("modified", full)
            return
        is_dir = stat.S_ISDIR(st.st_mode)
        self._put(path, name, st, is_dir)
        if told is not None:
            told("added" if known is None else "modified", full)
        dirty.add(path)  # a folder's own blocks grow with its entries
        if is_dir and (child := _open_dir(full, None)) is not None:
            # What was made in it before its watch existed counts too (and is told as added).
            self._telling = told
            try:
                self._walk(child, full)
            finally:
                self._telling = None

    def _lose(self, full: str, ino: int | None) -> None:
        """Remember that `full` named file `ino` (None: a file never seen) and names it no more."""
        if len(self._lost) < _UNSEEN_MAX or full in self._lost:
            self._lost[full] = ino  # (past them, a write by a name forgotten makes every file looked at)

    def _written_lost(self, full: str) -> None:
        """A write through a name the tree saw removed: the file it named, if still here, is
        charged again now by another of its names (found once, then one lstat a write), else by
        `settle` (at most once a second); an unknown one makes every file be charged again.
        Left to `settle` alone, a writer had that second to grow any number of files unseen."""
        ino = self._lost[full]
        if ino is None:
            self.unresolved = True
            return
        if ino not in self.links:
            del self._lost[full]  # its last name went too: what it holds is counted nowhere
            return
        known = self._alias.get(ino)
        if known is not None and self._recharge(known, ino):
            return
        if len(self.charges) <= _RECHARGE_LIVE_MAX:  # a look through the listings, no system call
            for path, listing in self.entries.items():
                for name, (other, _) in listing.items():
                    if other == ino and self._recharge(f"{path}/{name}", ino):
                        self._alias[ino] = f"{path}/{name}"
                        return
        self.suspects.add(ino)

    def _recharge(self, full: str, ino: int) -> bool:
        """Charge file `ino` again by its name `full`; False when that name holds another now."""
        try:
            st = os.lstat(full)
        except OSError:
            return False
        if st.st_ino != ino or ino not in self.charges:
            return False
        cost = charge(st.st_blocks, st.st_size)
        self.bytes += cost - self.charges[ino]
        self.charges[ino] = cost
        return True

    def catch_up(self) -> bool:
        """Apply the events queued since the tree was last looked at; False when only a new
        walk can tell (events were dropped, or the workspace folder itself was replaced)."""
        if self.notify is None or self.root not in self.dir_wd:
            return False
        try:
            if os.lstat(self.root).st_ino != self.root_ino:
                return False
            dirty: set[str] = set()
            while True:
                try:
                    data = os.read(self.notify, 1 << 16)
                except BlockingIOError:
                    break
                for wd, mask, name in events(data):
                    self.handle(wd, mask, name, dirty)
        except (Overflow, OSError):
            return False
        if self.root not in self.dir_wd:  # deleted meanwhile (a new one may have its inode number)
            return False
        # A tree with blind files would charge every one of them again at each catch-up for as
        # long as they live: measured afresh once instead.
        return self.settle(dirty, final=True) and not self.blinded

    @property
    def blinded(self) -> bool:
        """Whether some file may grow with no event to say so (`blind`, `_blind_all`)."""
        return bool(self.blind) or self._blind_all

    def settle(self, dirty: set[str], *, final: bool = False, every: float = 1.0) -> bool:
        """After a batch of events: charge again the folders that grew (`dirty`), and the files
        that lost a name while keeping another (`suspects`; `blind` ones at every look) or, after
        a name gone unseen was removed (`unresolved`; at every look, `_blind_all`), every file.
        Those take a look through every listing: at most once in `every` seconds, and not past
        _RECHARGE_LIVE_MAX files, unless `final` (the run's end, a catch-up). False when a
        suspect's names could not be found (measure afresh)."""
        for path in dirty:
            self.restat(path)
        if not self.suspects and not self.unresolved and not self.blind and not self._blind_all:
            return True
        now = time.monotonic()
        if not final and (now - self._suspects_looked < every or len(self.charges) > _RECHARGE_LIVE_MAX):
            return True
        self._suspects_looked = now
        every_file, self.unresolved = self.unresolved or self._blind_all, False
        if every_file:
            self._unseen.clear()
        for path, listing in self.entries.items():
            for name, (ino, is_dir) in listing.items():
                if is_dir or not (every_file or ino in self.suspects or ino in self.blind):
                    continue
                if self._recharge(f"{path}/{name}", ino):
                    self.suspects.discard(ino)
            if not self.suspects and not self.blind and not every_file:
                return True
        return not (final and self.suspects)

    def next_look(self, every: float = 1.0) -> float | None:
        """Seconds until `settle` would charge again the files it has put off; None: none are,
        or too many files to do it during a run."""
        put_off = self.suspects or self.unresolved or self.blind or self._blind_all
        if not put_off or len(self.charges) > _RECHARGE_LIVE_MAX:
            return None
        return max(0.0, self._suspects_looked + every - time.monotonic())

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
            release(self.notify, list(self.wd_dir))
            self.notify = None


def measure(root: str) -> Usage:
    """What the workspace folder `root` holds now: bytes charged and files (core.quota.charge)."""
    tree = UsageTree(root, None)
    tree.scan()
    return tree.usage


def free_bytes(path: str) -> int:
    """Bytes an unprivileged writer may still use on the filesystem holding `path`."""
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize
