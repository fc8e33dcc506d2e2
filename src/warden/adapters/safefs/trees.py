"""Reading and rewriting a whole workspace tree by descriptor: what checkpoints save and restore.

A bot may have swapped any folder for a symlink, a file for a FIFO, or made a file unreadable
before Warden comes to save or restore its workspace. So the tree is walked by `walk_tree` (each
folder opened relative to its parent's descriptor, no link followed: a link to a folder is listed
but never entered; no recursion, however deep a bot nested its folders), every entry is opened
with `O_NOFOLLOW` relative to a held folder, and a rollback writes each file beside its target
and renames it over, component by component from the workspace's own descriptor, so a link
planted anywhere on the way fails (ELOOP) instead of leading outside. What counts as content is
core/checkpoints.py's decision.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import os
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from warden.adapters.safefs.temps import temp_name
from warden.core.checkpoints import Current, RollbackPlan, excluded_name
from warden.core.errors import Conflict, Denied, NotFound, Unavailable, WardenError

__all__ = ["DIR_FLAGS", "READ_FLAGS", "Dirs", "apply_plan", "current_entry", "folder_error", "no_space",
           "open_folder", "open_to_read", "scan_tree", "stamp_of", "stamps_hold", "syncfs", "unreadable_folder",
           "walk_tree"]

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


def open_folder(folder: str) -> int:
    """A descriptor of workspace folder `folder` (itself never a link)."""
    try:
        return os.open(folder, DIR_FLAGS)
    except OSError as exc:
        raise folder_error(exc, folder) from None


@functools.cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def syncfs(fd: int) -> None:
    """Make everything written on the filesystem holding `fd` durable (one call for thousands of
    objects, instead of an fsync each), so a manifest renamed after it never names lost bytes."""
    try:
        if _libc().syncfs(fd) == 0:
            return
    except (OSError, AttributeError):
        pass
    os.sync()


# Filesystems that never write a page back (tmpfs, ramfs, hugetlbfs): a page a process mapped
# and dirtied stays writable for good, and its later writes change no mtime or ctime.
_NO_WRITEBACK = frozenset({0x01021994, 0x858458F6, 0x958458F6})


def stamps_hold(fd: int) -> bool:
    """Whether a file's stamp on the filesystem holding `fd` changes with every write once
    `syncfs` ran (False: tmpfs and its kin, where a write through a mapping dirtied before
    stamps nothing, ever). Unknown: True, as before."""
    statfs = ctypes.create_string_buffer(256)  # struct statfs: f_type (a C long) first
    try:
        if _libc().fstatfs(fd, statfs) != 0:
            return True
    except (OSError, AttributeError):
        return True
    return ctypes.c_long.from_buffer(statfs).value not in _NO_WRITEBACK


def stamp_of(st: os.stat_result) -> tuple[int, int, int, int]:
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _kind(mode: int) -> str:
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "dir"
    return "symlink" if stat.S_ISLNK(mode) else "other"


def no_space(exc: OSError, where: str) -> WardenError:
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return Unavailable(f"no space left on the filesystem of {where}; free some space")
    return WardenError(f"{where}: {exc.strerror or exc}")


_OPEN_DIRS = 256  # folders a walk or a rollback holds open at most (the open-file limit is often 1024)


@dataclass
class _Frame:
    path: str
    fd: int | None  # None once closed to stay under _OPEN_DIRS; reopened by name when needed
    ident: tuple[int, int]
    pending: list[str]


def unreadable_folder(path: str) -> Conflict:
    """The refusal for a folder whose mode keeps Warden out (a bot's `chmod 644` or `000` on a
    folder, when Warden runs as the bot's own user or without CAP_DAC_OVERRIDE)."""
    shown = repr(path) if path else "the workspace's top folder"
    return Conflict(f"folder {shown} of the workspace cannot be read or searched (its mode forbids it; a "
                    "bot's process may have changed it): give it back its permissions (chmod u+rwx) and "
                    "try again", rule="deny: unreadable folder")


def walk_tree(root_fd: int, *, strict: bool = False) -> Iterator[tuple[str, list[str], list[str], int]]:
    """(path, folders, others, descriptor) for each folder beneath `root_fd`, top-down, like
    `os.fwalk(follow_symlinks=False)` but without recursion: a bot can nest folders deeper than
    Python's recursion limit (and than the open-file limit: only the deepest _OPEN_DIRS stay open).
    A symlink, even to a folder, is among the others and never entered; the caller may prune
    `folders` in place. A folder swapped while walked is skipped, never followed. A folder its
    mode forbids to list or to search is skipped too, or, with `strict` (a checkpoint must not
    leave part of a tree out unseen), refused with `unreadable_folder`."""
    frames: list[_Frame] = []
    first_open = 1  # frames[1:first_open] are closed, frames[first_open:] open (frames[0], the root, always)
    entered: tuple[str, int, tuple[int, int]] | None = ("", os.dup(root_fd), (0, 0))
    try:
        while True:
            if entered is not None:
                path, fd, ident = entered
                entered = None
                folders: list[str] = []
                others: list[str] = []
                try:
                    with os.scandir(fd) as listing:
                        for item in listing:
                            try:
                                is_dir = item.is_dir(follow_symlinks=False)
                            except PermissionError:
                                if strict:
                                    raise
                                is_dir = False
                            except OSError:
                                is_dir = False
                            (folders if is_dir else others).append(item.name)
                except OSError as exc:
                    os.close(fd)
                    if strict and isinstance(exc, PermissionError):
                        raise unreadable_folder(path) from None
                    continue  # unreadable or gone: nothing beneath it is seen
                folders.sort()
                others.sort()
                # Registered before the caller sees it: a caller that stops the walk at the yield
                # (TooLarge, a full disk) has this descriptor closed with the others.
                frame = _Frame(path, fd, ident, [])
                frames.append(frame)
                yield path, folders, others, fd
                frame.pending = list(reversed(folders))  # as the caller left them (it may prune)
                # The open frames past the root are always the innermost ones, frames[first_open:]:
                # past _OPEN_DIRS, the outermost of them is closed (constant work per folder).
                if len(frames) - first_open > _OPEN_DIRS:
                    oldest = frames[first_open]
                    os.close(oldest.fd)  # type: ignore[arg-type]
                    oldest.fd = None
                    first_open += 1
            if not frames:
                return
            top = frames[-1]
            if not top.pending:
                done = frames.pop()
                if frames and frames[-1].fd is None and done.fd is not None:
                    frames[-1].fd = _parent_of(done.fd, frames[-1].ident)
                if done.fd is not None:
                    os.close(done.fd)
                top_open = bool(frames) and frames[-1].fd is not None
                first_open = max(1, min(first_open, len(frames) - 1 if top_open else len(frames)))
                continue
            name = top.pending.pop()
            parent = _reopen(frames, root_fd)
            if parent is None:
                frames.pop()
                first_open = max(1, min(first_open, len(frames)))
                continue
            first_open = max(1, min(first_open, len(frames) - 1))
            child_path = f"{top.path}/{name}" if top.path else name
            try:
                child = os.open(name, DIR_FLAGS, dir_fd=parent)
            except PermissionError:
                if strict:
                    raise unreadable_folder(child_path) from None
                continue
            except OSError:
                continue  # removed, or swapped for a link, since it was listed
            st = os.fstat(child)
            entered = (child_path, child, (st.st_dev, st.st_ino))
    finally:
        for frame in frames:
            if frame.fd is not None:
                os.close(frame.fd)
        if entered is not None:
            os.close(entered[1])


def _parent_of(fd: int, ident: tuple[int, int]) -> int | None:
    """The folder holding folder `fd`, reached by its `..` (never a link) and kept only when it is
    still the folder walked (`ident`): going back up a deep chain costs one open a level, where
    reopening from the root by name costs the whole depth. A bot that moved the folder elsewhere
    meanwhile gets a `..` that is not `ident`: None, and the caller reopens it by name."""
    try:
        parent = os.open("..", DIR_FLAGS, dir_fd=fd)
    except OSError:
        return None
    st = os.fstat(parent)
    if (st.st_dev, st.st_ino) != ident:
        os.close(parent)
        return None
    return parent


def _reopen(frames: list[_Frame], root_fd: int) -> int | None:
    """The descriptor of the innermost frame, opened again from the nearest open ancestor when it
    was closed (None when the folder there is no longer the one walked)."""
    top = frames[-1]
    if top.fd is not None:
        return top.fd
    index = max(i for i, f in enumerate(frames) if f.fd is not None or i == 0)
    base = frames[index]
    current = base.fd if base.fd is not None else root_fd
    own = False
    try:
        for frame in frames[index + 1:]:
            name = frame.path.rsplit("/", 1)[-1]
            nxt = os.open(name, DIR_FLAGS, dir_fd=current)
            if own:
                os.close(current)
            current, own = nxt, True
            st = os.fstat(current)
            if (st.st_dev, st.st_ino) != frame.ident:
                os.close(current)
                return None
    except OSError:
        if own:
            os.close(current)
        return None
    top.fd = current
    return current


def scan_tree(folder: str, scope: str | None) -> dict[str, Current]:
    """What folder `folder` holds now within `scope` (content only, core/checkpoints.py), no link followed."""
    found: dict[str, Current] = {}
    root_fd = open_folder(folder)
    try:
        start_fd, prefix = root_fd, ""
        if scope is not None:
            opened = _scan_scope(root_fd, scope, found)
            if opened is None:
                return found
            start_fd, prefix = opened, scope
        try:
            for here, dirnames, filenames, dfd in walk_tree(start_fd, strict=True):
                rel = f"{prefix}/{here}" if prefix and here else (prefix or here)
                top = not rel
                dirnames[:] = [d for d in dirnames if not excluded_name(d, top=top)]
                for child in [*dirnames, *filenames]:
                    if excluded_name(child, top=top):
                        continue
                    try:
                        found[f"{rel}/{child}" if rel else child] = current_entry(dfd, child)
                    except FileNotFoundError:
                        continue
                    except PermissionError:
                        raise unreadable_folder(rel) from None
        finally:
            if start_fd != root_fd:
                os.close(start_fd)
    finally:
        os.close(root_fd)
    return found


def _scan_scope(root_fd: int, scope: str, found: dict[str, Current]) -> int | None:
    """Record the scope's parents and the scope itself; a descriptor of the scope when it is a
    real folder (to walk), else None."""
    parts = scope.split("/")
    current = os.dup(root_fd)
    try:
        for index, part in enumerate(parts):
            path = "/".join(parts[: index + 1])
            try:
                now = current_entry(current, part)
            except FileNotFoundError:
                return None
            except PermissionError:
                raise unreadable_folder("/".join(parts[:index])) from None
            found[path] = now
            if now.kind != "dir":
                return None
            try:
                nxt = os.open(part, DIR_FLAGS, dir_fd=current)
            except PermissionError:
                raise unreadable_folder(path) from None
            os.close(current)
            current = nxt
        fd, current = current, -1
        return fd
    finally:
        if current >= 0:
            os.close(current)


def apply_plan(folder: str, plan: RollbackPlan, object_path: Callable[[str], Path]) -> None:
    """Carry out `plan` beneath `folder`: each step relative to a held folder, no link followed, each
    file written beside its target and renamed over it (`object_path(digest)` holds its bytes)."""
    root_fd = open_folder(folder)
    dirs = Dirs(root_fd)
    opened: list[tuple[int, int]] = []  # folders made writable for the rollback: (fd, mode to put back)

    def in_folder(path: str, work: Callable[[int, str], object]) -> None:
        parent, leaf = dirs.parent(path)
        try:
            work(parent, leaf)
        except PermissionError:
            # A folder whose mode forbids writing (a bot's chmod 555; Warden runs as the same
            # user): opened up for the rollback, its mode put back at the end.
            mode = stat.S_IMODE(os.fstat(parent).st_mode)
            if mode & 0o700 == 0o700:
                raise
            opened.append((os.dup(parent), mode))
            os.fchmod(parent, mode | 0o700)
            work(parent, leaf)

    try:
        for path in plan.remove:
            in_folder(path, _remove)
        dirs.forget()
        for path in plan.mkdirs:
            in_folder(path, _make_dir)
        for entry in plan.writes:
            if entry.kind == "symlink":
                in_folder(entry.path, functools.partial(_put_link, entry.target))
            else:
                in_folder(entry.path, functools.partial(_put_file, object_path(entry.digest), entry.mode))
        for path, mode in plan.chmods:
            in_folder(path, functools.partial(_chmod_file, mode))
        for path, mode in plan.dir_modes:
            os.fchmod(dirs.open(path), mode)
        syncfs(root_fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise Conflict(f"workspace folder {folder} changed during the rollback (a link where a folder "
                           "was); run the rollback again") from None
        raise no_space(exc, f"workspace folder {folder}") from None
    finally:
        # The folders opened up for the rollback get their modes back, whether it ended or not.
        for fd, mode in opened:
            with contextlib.suppress(OSError):
                os.fchmod(fd, mode)
            os.close(fd)
        dirs.close()
        os.close(root_fd)


def folder_error(exc: OSError, folder: str) -> WardenError:
    # Named by the workspace (its folder's name): bots read these, and the host path would tell
    # them Warden's home and the person's.
    name = os.path.basename(folder.rstrip("/"))
    if exc.errno == errno.ENOENT:
        return NotFound(f"the folder of workspace {name} is missing; `warden health NAME --repair` re-creates it")
    if exc.errno in (errno.ELOOP, errno.ENOTDIR):
        return Denied(f"the folder of workspace {name} is not a real folder (a link?); Warden works only on "
                      "a real folder", rule="deny: symbolic link")
    return WardenError(f"the folder of workspace {name}: {exc.strerror or exc}")


def open_to_read(dfd: int, name: str) -> int | None:
    """`name` opened to read, no link followed. A file its mode makes unreadable (a bot's chmod
    000; Warden runs as the same user) is made readable for the moment of the open and its mode
    put back: left out, a whole rollback would remove it. None when it cannot be read at all."""
    try:
        return os.open(name, READ_FLAGS, dir_fd=dfd)
    except PermissionError:
        pass
    path_fd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dfd)
    try:
        st = os.fstat(path_fd)
        if not stat.S_ISREG(st.st_mode):
            return None
        proc = f"/proc/self/fd/{path_fd}"
        try:
            os.chmod(proc, stat.S_IMODE(st.st_mode) | 0o400)
        except OSError:
            return None  # another user's file: not Warden's to read
        try:
            # Not O_NOFOLLOW: /proc/self/fd/N is a magic link to this very inode, never a path.
            return os.open(proc, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            return None
        finally:
            os.chmod(proc, stat.S_IMODE(st.st_mode))
    finally:
        os.close(path_fd)


def current_entry(dfd: int, name: str) -> Current:
    st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
    kind = _kind(st.st_mode)
    if kind == "symlink":
        return Current("symlink", 0o777, target=os.readlink(name, dir_fd=dfd))
    return Current(kind, stat.S_IMODE(st.st_mode), stamp_of(st) if kind == "file" else (0, 0, 0, 0))


class Dirs:
    """Folders beneath a held root, each opened component by component with O_NOFOLLOW (a link
    anywhere on the way fails with ELOOP: nothing is written through it); kept open for the
    entries that follow (a rollback writes in path order)."""

    def __init__(self, root_fd: int) -> None:
        self.root_fd = root_fd
        self._open: dict[str, int] = {}

    def open(self, path: str) -> int:
        """Folder `path`, from the deepest folder already open on the way (a rollback goes in path
        order: mostly the parent), one component at a time: no recursion, and however deep the
        tree, only the _OPEN_DIRS folders used last stay open."""
        if not path:
            return self.root_fd
        fd = self._open.pop(path, None)
        if fd is not None:
            self._open[path] = fd  # used last: kept longest
            return fd
        rest: list[str] = []
        base = path
        current = self.root_fd
        while base:
            base, _, name = base.rpartition("/")
            rest.append(name)
            held = self._open.get(base) if base else None
            if held is not None:
                current = held
                break
        for name in reversed(rest):
            base = f"{base}/{name}" if base else name
            try:
                current = os.open(name, DIR_FLAGS, dir_fd=current)
            except NotADirectoryError:
                # O_DIRECTORY|O_NOFOLLOW on a link says ENOTDIR: name the real reason.
                raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), path) from None
            self._open[base] = current
            while len(self._open) > _OPEN_DIRS:  # the folder used longest ago goes, never `current`
                oldest = next(iter(self._open))
                os.close(self._open.pop(oldest))
        return current

    def parent(self, path: str) -> tuple[int, str]:
        parent_path, _, leaf = path.rpartition("/")
        return self.open(parent_path), leaf

    def forget(self) -> None:
        for fd in self._open.values():
            os.close(fd)
        self._open.clear()

    def close(self) -> None:
        self.forget()


def _remove(parent: int, leaf: str) -> None:
    try:
        st = os.stat(leaf, dir_fd=parent, follow_symlinks=False)
    except FileNotFoundError:
        return  # gone already (a rollback run again after a crash)
    if stat.S_ISDIR(st.st_mode):
        import shutil

        # rmtree with dir_fd walks by descriptors and never follows links; a tree nested deeper
        # than Python's recursion limit goes to GNU rm through the held folder, as SafeRoot does.
        try:
            shutil.rmtree(leaf, dir_fd=parent)
        except RecursionError:
            from warden.adapters.safefs.root import _remove_deep

            _remove_deep(parent, leaf)
    else:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(leaf, dir_fd=parent)


def _make_dir(parent: int, leaf: str) -> None:
    for _ in range(3):
        try:
            os.mkdir(leaf, 0o700, dir_fd=parent)  # its mode is set once it is filled
            return
        except FileExistsError:
            st = os.stat(leaf, dir_fd=parent, follow_symlinks=False)
            if stat.S_ISDIR(st.st_mode):
                return
            os.unlink(leaf, dir_fd=parent)  # a file or a link where the folder belongs
    raise OSError(errno.EAGAIN, f"cannot make folder {leaf!r}: it keeps changing")


def _put_file(source: Path, mode: int, parent: int, leaf: str) -> None:
    """Replace `leaf` with a copy of object `source`: a new file beside it, renamed over it."""
    tmp = temp_name(leaf)
    src = os.open(source, READ_FLAGS)
    try:
        out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                      dir_fd=parent)
        try:
            try:
                size = os.fstat(src).st_size
                copied = 0
                while copied < size:
                    try:
                        sent = os.copy_file_range(src, out, size - copied)
                    except OSError as exc:
                        # Warden's home on another filesystem than the workspace (EXDEV), or a
                        # filesystem without it: copied through this process instead.
                        if exc.errno not in (errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
                            raise
                        sent = os.sendfile(out, src, copied, size - copied)
                    if sent == 0:
                        break
                    copied += sent
                os.fchmod(out, mode & 0o7777 & ~0o6000)  # never set setuid/setgid on the host
            finally:
                os.close(out)
            # No fsync per file: the whole rollback is synced once at its end (syncfs); a crash
            # before it leaves files a second run of the same rollback rewrites.
            os.rename(tmp, leaf, src_dir_fd=parent, dst_dir_fd=parent)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=parent)
            raise
    finally:
        os.close(src)


def _put_link(target: str, parent: int, leaf: str) -> None:
    tmp = temp_name(leaf)
    os.symlink(target, tmp, dir_fd=parent)
    try:
        os.rename(tmp, leaf, src_dir_fd=parent, dst_dir_fd=parent)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=parent)
        raise


def _chmod_file(mode: int, parent: int, leaf: str) -> None:
    """Set a file's mode through an O_PATH descriptor (its mode may forbid opening it to read;
    O_NOFOLLOW: a link there is never changed through)."""
    fd = os.open(leaf, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent)
    try:
        if stat.S_ISREG(os.fstat(fd).st_mode):
            os.chmod(f"/proc/self/fd/{fd}", mode & 0o7777 & ~0o6000)
    finally:
        os.close(fd)
