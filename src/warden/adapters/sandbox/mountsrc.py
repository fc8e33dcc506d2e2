"""Mount sources opened by descriptor and judged by identity, never by their text.

An allowed path is a name, and a name can change between the moment a person allows it and
every later run: a bot with one allowed folder read-write can make a second allowed path below
it (not yet existing) a symlink to Warden's home, and bwrap, handed the name, would follow it and
mount the keys. So at each run every source outside the workspace is opened here from `/` one
component at a time with O_NOFOLLOW (a link anywhere refuses the path), then compared by
(device, inode) with Warden's state: the opened folder must not be, or hold, Warden's home or
its workspaces root, and must not lie inside Warden's state or another workspace (its ancestors
are walked up by descriptor through `..`). Warden's folders outside the home (the layer cache
other homes copy layers from) are judged the same way: by name alone, a link on the way to the
cache, or a bind mount of it, would give a bot the cache read-write. bwrap then mounts that very descriptor
(`--bind-fd`), so no later rename can change what is mounted. Bind mounts that alias a folder
under a second name are caught too: the inode is the same whatever the name.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

from warden.core.bwrap_argv import Bind
from warden.core.errors import Denied
from warden.core.paths import normalize

__all__ = ["HostMountJudge", "HostMountSources", "StateGuard", "judge_path", "open_beneath", "open_binds",
           "open_nofollow", "state_guard"]

_PATH = os.O_PATH | os.O_CLOEXEC
Identity = tuple[int, int]


def open_nofollow(path: str) -> int:
    """An O_PATH descriptor of absolute `path`, no component followed if a link (Denied)."""
    if not path.startswith("/"):
        raise Denied(f"{path} is not an absolute path", rule="sandbox.path_not_absolute")
    root = os.open("/", _PATH | os.O_DIRECTORY)
    try:
        return open_beneath(root, path)
    finally:
        os.close(root)


def open_beneath(dir_fd: int, rel: str) -> int:
    """An O_PATH descriptor of `rel` beneath the folder open as `dir_fd`, no link followed."""
    fd = os.dup(dir_fd)
    try:
        for part in [p for p in rel.split("/") if p]:
            if part in (".", ".."):
                raise Denied(f"{rel} is not a canonical path", rule="sandbox.path_not_canonical")
            nxt = os.open(part, _PATH | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = nxt
            if stat.S_ISLNK(os.fstat(fd).st_mode):
                raise Denied(f"{rel} goes through the symbolic link {part!r}; Warden mounts only "
                             "real paths (allow the link's target instead)", rule="sandbox.path_symlink")
        return fd
    except BaseException:
        os.close(fd)
        raise


def _identity(fd: int) -> Identity:
    info = os.fstat(fd)
    return (info.st_dev, info.st_ino)


def _stat_identity(path: str) -> Identity | None:
    try:
        info = os.stat(path)
    except OSError:
        return None
    return (info.st_dev, info.st_ino)


@dataclass(frozen=True)
class StateGuard:
    """The identities a mount source is judged against (built per run by `state_guard`)."""

    home: str
    # The folders a source must not be or hold: Warden's home, its workspaces root, the shared
    # folders (the layer cache) and all their ancestors up to `/`.
    holders: frozenset[Identity]
    # The folders a source must not lie in: every entry of Warden's home but the workspaces
    # root, every folder of the workspaces root but this run's own workspace, the shared folders.
    private: frozenset[Identity]
    own: Identity | None
    root: Identity
    shared: frozenset[Identity] = frozenset()
    # Warden's home and workspaces root themselves: no file directly in them may be mounted.
    tops: frozenset[Identity] = frozenset()

    def why(self, fd: int, path: str | None = None) -> str | None:
        """Why mounting the folder (or file) open as `fd`, found at `path`, would show Warden's
        state, or None."""
        current = _identity(fd)
        if current in self.holders:
            return f"it is or holds Warden's home {self.home} (keys, registry, every workspace) or its layer cache"
        info = os.fstat(fd)
        if not stat.S_ISDIR(info.st_mode):
            # A file has no `..` (ENOTDIR, which was an internal error of `sandbox add FILE` and of
            # every run with a file allowed): it is judged as itself, then from the folder holding it.
            # One with other hard links may be Warden's under another name: never mounted.
            if info.st_nlink > 1:
                return "it is a file with other hard links, which may be Warden's own under another name"
            if current in self.private or current in self.shared:
                return f"it lies in Warden's own state or another workspace under {self.home}"
            folder = self._folder_holding(fd, path)
            if _identity(folder) in self.tops:
                os.close(folder)
                return f"it lies in Warden's own state under {self.home}"
            return self._why_from(folder)
        return self._why_from(os.dup(fd))

    def _folder_holding(self, fd: int, path: str | None) -> int:
        """The folder holding the file open as `fd` at `path` (opened with no link followed), once
        it is checked that the name there is still that very file."""
        if path is None or normalize(path) == "/":
            raise Denied("a file's folder is needed to judge it", rule="sandbox.path_not_folder")
        folder = open_nofollow(os.path.dirname(normalize(path)))
        try:
            there = os.stat(os.path.basename(normalize(path)), dir_fd=folder, follow_symlinks=False)
        except OSError:
            there = None
        if there is None or (there.st_dev, there.st_ino) != _identity(fd):
            os.close(folder)
            raise Denied(f"{path} changed while it was judged", rule="sandbox.path_changed")
        return folder

    def _why_from(self, walker: int) -> str | None:
        """Walk up from the folder open as `walker` (closed here) to the root of its mount tree."""
        current = _identity(walker)
        try:
            for _ in range(4096):  # deeper than any real path; a loop guard only
                if current == self.own:
                    return None
                if current in self.shared:
                    return "it lies in Warden's layer cache, which other homes' layers are copied from"
                if current in self.private:
                    return f"it lies in Warden's own state or another workspace under {self.home}"
                if current == self.root:
                    return None
                parent = os.open("..", _PATH | os.O_DIRECTORY, dir_fd=walker)
                os.close(walker)
                walker = parent
                upper = _identity(walker)
                if upper == current:
                    return None  # the top of this mount tree
                current = upper
            return "its ancestors could not be walked"
        finally:
            os.close(walker)


def state_guard(home: str, workspaces_root: str, own_workspace: str | None,
                shared: Sequence[str] = ()) -> StateGuard:
    """The identities of Warden's state as they are now, for judging mount sources. `shared`:
    Warden's folders outside the home (the layer cache), not there yet or there."""
    holders: set[Identity] = set()
    for start in (home, workspaces_root, *shared):
        path = os.path.realpath(start)
        while True:
            ident = _stat_identity(path)
            if ident is not None:
                holders.add(ident)
            if path == "/":
                break
            path = os.path.dirname(path)
    own = _stat_identity(own_workspace) if own_workspace else None
    roots = _stat_identity(workspaces_root)
    private: set[Identity] = set()
    for folder in (home, workspaces_root):
        with contextlib.suppress(OSError), os.scandir(folder) as entries:
            for entry in entries:
                with contextlib.suppress(OSError):
                    info = entry.stat(follow_symlinks=False)
                    ident = (info.st_dev, info.st_ino)
                    if ident not in (roots, own):
                        private.add(ident)
    kept = frozenset(ident for folder in shared if (ident := _stat_identity(folder)) is not None)
    tops = frozenset(ident for folder in (home, workspaces_root) if (ident := _stat_identity(folder)) is not None)
    return StateGuard(home, frozenset(holders), frozenset(private), own, _stat_identity("/") or (0, 0), kept, tops)


@contextlib.contextmanager
def open_binds(binds: Iterable[Bind], guard_of: Callable[[], StateGuard], workspace: str
               ) -> Iterator[tuple[list[Bind], list[tuple[str, int]], list[str]]]:
    """Open each bind outside `workspace` by descriptor and judge it: yields (the binds to
    mount, their (path, fd) pairs, "PATH (why)" for those skipped); the fds close on exit.
    `guard_of` is called once, and only when a bind outside the workspace needs judging."""
    guard: StateGuard | None = None
    kept: list[Bind] = []
    fds: list[tuple[str, int]] = []
    skipped: list[str] = []
    prefix = workspace.rstrip("/") + "/"
    try:
        for bind in binds:
            if bind.path == workspace or bind.path.startswith(prefix):
                kept.append(bind)  # inside the workspace: the runner opens it beneath the workspace
                continue
            try:
                fd = open_nofollow(bind.path)
            except Denied as exc:
                skipped.append(f"{bind.path} ({exc.message})")
                continue
            except OSError as exc:
                if exc.errno not in (errno.ENOENT, errno.ENOTDIR):
                    skipped.append(f"{bind.path} ({exc.strerror})")
                continue  # a missing allowed path is simply not mounted
            guard = guard or guard_of()
            try:
                why = guard.why(fd, bind.path)
            except Denied as exc:
                why = exc.message
            except OSError as exc:
                why = exc.strerror or str(exc)
            if why is not None:
                os.close(fd)
                skipped.append(f"{bind.path} ({why})")
                continue
            kept.append(bind)
            fds.append((bind.path, fd))
        yield kept, fds, skipped
    finally:
        for _, fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)


def judge_path(path: str, guard: StateGuard) -> str | None:
    """For `sandbox add`: why `path` can never be mounted (a link on the way, Warden's state), or None."""
    try:
        fd = open_nofollow(path)
    except Denied as exc:
        return exc.message
    except OSError:
        return None  # not there yet: judged again, by descriptor, at every run
    try:
        return guard.why(fd, path)
    except Denied as exc:
        return exc.message
    finally:
        os.close(fd)


class HostMountSources:
    """Mount sources of this host, judged against Warden's state at `home` and `workspaces_root`
    (core.ports.MountSources)."""

    def __init__(self, home: str, workspaces_root: str, shared: Sequence[str] = ()) -> None:
        self._home = normalize(home)
        self._workspaces_root = normalize(workspaces_root)
        self._shared = tuple(shared)  # the layer cache

    def open_binds(self, binds: Sequence[Bind], workspace: str
                   ) -> contextlib.AbstractContextManager[tuple[list[Bind], list[tuple[str, int]], list[str]]]:
        if not binds:  # the common case: nothing to open or judge
            return contextlib.nullcontext(([], [], []))
        return open_binds(binds, lambda: state_guard(self._home, self._workspaces_root, workspace, self._shared),
                          workspace)

    @contextlib.contextmanager
    def open_beneath(self, dir_fd: int, rel: str) -> Iterator[int | None]:
        try:
            fd = open_beneath(dir_fd, rel)
        except (OSError, Denied):
            yield None
            return
        try:
            yield fd
        finally:
            os.close(fd)


class HostMountJudge:
    """The MountJudge port: is a folder, by inode, one of Warden's own (home, workspaces, the
    `shared` folders such as the layer cache)?"""

    def __init__(self, shared: Sequence[str] = ()) -> None:
        self._shared = tuple(shared)

    def judge(self, path: str, *, home: str, workspaces_root: str, own_workspace: str | None) -> str | None:
        return judge_path(path, state_guard(home, workspaces_root, own_workspace, self._shared))
