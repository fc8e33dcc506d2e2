"""Safe file operations beneath a held directory descriptor.

Every path is opened relative to the workspace's directory descriptor with
`openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_SYMLINKS)` (ctypes; openat2(2),
Linux >= 5.6), or, where that system call is missing, by a walk that opens one component at
a time with `O_NOFOLLOW` relative to the descriptor of the one before. Either way the
kernel resolves the very path the policy decided on: no `..`, no symbolic link, no
`/proc/self/fd` magic link, so a link swapped in between the check and the use cannot
redirect the operation (CVE-2025-53109 in the MCP filesystem server was that redirect).

Why refuse all symbolic links, not only those that leave the workspace: a link from an `rw`
zone into an `ro` zone, or into `.warden/`, stays beneath the root but would let a write
land where the policy said no. Links are shown in listings as links, never followed, and
never reveal where they point.

A move opens both parent directories the same way and renames between the two descriptors
with renameat2(RENAME_NOREPLACE): nothing at the destination is ever replaced, neither name is
followed, and no path is resolved again between the checks and the rename.

Writes go to a temporary file in the same directory, are fsync'ed and renamed over the
target relative to the directory descriptor; a file with more than one hard link is not
written (the other names would see the change, or it could be an outside file linked in).
Reading a hard link is allowed: its bytes are part of the workspace a sandboxed command can
already read. FIFOs, sockets and devices are refused: opened with O_NONBLOCK (a FIFO with
no writer cannot hang us), then checked with fstat before any byte is read.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from types import TracebackType

from warden.adapters.safefs import openat2 as _openat2
from warden.adapters.safefs.rename import renameat_noreplace
from warden.adapters.safefs.temps import temp_name
from warden.core.errors import Conflict, Denied, InvalidInput, NotFound, TooLarge, Unavailable, WardenError

__all__ = ["OPENAT2_AVAILABLE", "Entry", "HostSafeRoots", "SafeRoot"]

_CLOEXEC = os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | _CLOEXEC
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | _CLOEXEC
OPENAT2_AVAILABLE = _openat2.AVAILABLE


@dataclass(frozen=True)
class Entry:
    """One directory entry or stat result; a link is a link, its target is never read."""

    name: str
    type: str  # file, dir, symlink, fifo, socket, device, other
    size: int
    mode: int
    mtime: float
    nlink: int

    def to_json(self) -> dict[str, object]:
        return {"name": self.name, "type": self.type, "size": self.size, "mode": f"{self.mode:04o}",
                "mtime": datetime.fromtimestamp(self.mtime, UTC).isoformat(timespec="seconds"),
                "nlink": self.nlink}


def _kind(mode: int) -> str:
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "dir"
    if stat.S_ISLNK(mode):
        return "symlink"
    if stat.S_ISFIFO(mode):
        return "fifo"
    if stat.S_ISSOCK(mode):
        return "socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "device"
    return "other"


def _entry(name: str, st: os.stat_result) -> Entry:
    kind = _kind(st.st_mode)
    # A link's size is the length of its target: part of where it points, so not shown.
    size = 0 if kind == "symlink" else st.st_size
    return Entry(name, kind, size, stat.S_IMODE(st.st_mode), st.st_mtime, st.st_nlink)


def _error(exc: OSError, path: str) -> WardenError:
    """Map a system error on workspace path `path` to Warden's error tree (one line, what to do)."""
    code = exc.errno
    if code == errno.ENOENT:
        return NotFound(f"no such file or directory: {path}")
    if code == errno.ENOTDIR:
        return NotFound(f"{path}: a part of the path is not a directory")
    if code in (errno.ELOOP, errno.EXDEV):
        return Denied(f"{path} goes through a symbolic link; Warden does not follow links "
                      "(use the path of the link's target)", rule="deny: symbolic link")
    if code == errno.EISDIR:
        return InvalidInput(f"{path} is a directory; give a file path")
    if code == errno.EEXIST:
        return Conflict(f"{path} already exists")
    if code == errno.ENOTEMPTY:
        return Conflict(f"{path} is a directory that is not empty; delete it recursively")
    if code in (errno.EACCES, errno.EPERM):
        return Denied(f"{path}: permission denied by the file system")
    if code == errno.ENXIO:
        return Denied(f"{path} is not a regular file (a socket); Warden reads only regular files")
    if code in (errno.ENOSPC, errno.EDQUOT):
        return Unavailable(f"no space left to write {path}; free some space")
    if code == errno.EFBIG:
        return TooLarge(f"{path}: file too large for the file system")
    if code == errno.ENAMETOOLONG:
        return InvalidInput(f"{path}: a name is too long; use shorter names")
    return WardenError(f"{path}: {exc.strerror or exc}")


def _parts(path: str) -> list[str]:
    parts = [p for p in path.split("/") if p]
    for part in parts:
        # Defence in depth: callers pass canonical paths; anything else is a bug, not a path.
        if part in (".", "..") or "\0" in part:
            raise InvalidInput(f"path {path!r} is not canonical; it holds {part!r}")
    return parts


def _remove_deep(dfd: int, name: str) -> None:
    """Remove a tree nested deeper than Python's recursion limit (shutil.rmtree recurses), with
    GNU rm, which walks iteratively and never follows links. The folder is named through the
    held descriptor (/proc/self/fd/N in rm's own process), so no path is resolved again."""
    import subprocess

    target = f"/proc/self/fd/{dfd}/{name}"
    done = subprocess.run(["rm", "-rf", "--one-file-system", "--", target], pass_fds=(dfd,),
                          stdin=subprocess.DEVNULL, capture_output=True, check=False)
    if done.returncode != 0:
        raise OSError(errno.EIO, done.stderr.decode(errors="replace").strip() or "rm failed")


class SafeRoot:
    """Operations on paths beneath one directory, held open for the life of this object."""

    def __init__(self, fd: int, *, max_bytes: int | None = None, use_openat2: bool | None = None) -> None:
        self._fd = fd
        self.max_bytes = max_bytes
        self.use_openat2 = OPENAT2_AVAILABLE if use_openat2 is None else use_openat2

    @classmethod
    def open(cls, root: str | os.PathLike[str], *, max_bytes: int | None = None,
             use_openat2: bool | None = None) -> SafeRoot:
        """Hold `root` (a directory; itself not a symbolic link)."""
        try:
            fd = os.open(root, _DIR_FLAGS | os.O_NOFOLLOW)
        except OSError as exc:
            # Named by the workspace (its folder's name), not the folder's host path: bots read
            # these, and the path would tell them Warden's home and the person's.
            name = os.path.basename(os.fspath(root).rstrip("/"))
            if exc.errno == errno.ENOENT:
                raise NotFound(f"the folder of workspace {name} is missing; "
                               "run `warden health NAME --repair` or recreate the workspace") from None
            if exc.errno in (errno.ELOOP, errno.ENOTDIR) and os.path.islink(root):
                raise Denied(f"the folder of workspace {name} is a symbolic link; "
                             "Warden works only on a real folder", rule="deny: symbolic link") from None
            raise _error(exc, os.fspath(root)) from None
        return cls(fd, max_bytes=max_bytes, use_openat2=use_openat2)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> SafeRoot:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    # -- resolution ------------------------------------------------------------------------
    def _openat2(self, parts: list[str], flags: int) -> int:
        try:
            return _openat2.openat2(self._fd, "/".join(parts) or ".", flags)
        except OSError as exc:
            if exc.errno == errno.ENOSYS:
                self.use_openat2 = False  # for good: this kernel will not grow it
                return self._walk(parts, flags)
            if exc.errno == errno.EAGAIN:
                # A concurrent rename made the kernel give up on a safe lookup: walk instead.
                return self._walk(parts, flags)
            raise

    def _walk(self, parts: list[str], flags: int, *, create_dirs: bool = False) -> int:
        """Open `parts` one component at a time, each with O_NOFOLLOW relative to the last."""
        if not parts:
            return os.open(".", _DIR_FLAGS, dir_fd=self._fd)
        current = self._fd  # borrowed: never closed here
        try:
            last = len(parts) - 1
            for index, name in enumerate(parts):
                if create_dirs:
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(name, 0o755, dir_fd=current)
                # O_NOFOLLOW at every step: a link anywhere fails with ELOOP, whatever it points to.
                step_flags = flags if index == last and not create_dirs else _DIR_FLAGS
                try:
                    nxt = os.open(name, step_flags | os.O_NOFOLLOW, dir_fd=current)
                except NotADirectoryError:
                    # O_DIRECTORY|O_NOFOLLOW on a link says ENOTDIR; name the real reason.
                    if stat.S_ISLNK(os.stat(name, dir_fd=current, follow_symlinks=False).st_mode):
                        raise OSError(errno.ELOOP, os.strerror(errno.ELOOP)) from None
                    raise
                if current != self._fd:
                    os.close(current)
                current = nxt
            return current
        except BaseException:
            if current != self._fd:
                os.close(current)
            raise

    def _open(self, parts: list[str], flags: int) -> int:
        if self.use_openat2:
            return self._openat2(parts, flags)
        return self._walk(parts, flags)

    def _dir(self, parts: list[str], *, create: bool = False) -> int:
        if create:
            try:
                return self._open(parts, _DIR_FLAGS)  # the common case: the directory exists
            except FileNotFoundError:
                return self._walk(parts, _DIR_FLAGS, create_dirs=True)
        return self._open(parts, _DIR_FLAGS)

    def open_dir(self, path: str) -> int:
        """A descriptor of directory `path` beneath the root, no link followed (the caller closes it)."""
        return self._dir(_parts(path))

    # -- reads -----------------------------------------------------------------------------
    def _open_regular(self, path: str, *, sized: bool) -> tuple[int, os.stat_result]:
        """A descriptor of regular file `path` beneath the root, no link followed, and its fstat;
        `sized`: one over `max_bytes` is refused as too large first. The caller closes it."""
        parts = _parts(path)
        if not parts:
            raise InvalidInput("/ is a directory; give a file path")
        try:
            fd = self._open(parts, _READ_FLAGS)
        except OSError as exc:
            raise _error(exc, path) from None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                kind = _kind(st.st_mode)
                if kind == "dir":
                    raise InvalidInput(f"{path} is a directory; list it instead")
                raise Denied(f"{path} is a {kind}, not a regular file; Warden reads only regular files",
                             rule=f"deny: not a regular file ({kind})")
            if sized:
                self._check_size(st.st_size, path)
        except BaseException as exc:
            os.close(fd)
            if isinstance(exc, OSError):
                raise _error(exc, path) from None
            raise
        return fd, st

    def read_bytes(self, path: str, *, room: Callable[[int], None] | None = None) -> bytes:
        """The content of regular file `path`, at most `max_bytes`; `room(size)`, when given, is
        told its size (fstat) before a byte is read, and may refuse with an error."""
        # A file over the limit is refused as too large (413) before any room is asked for: the
        # room's 503 would have a client retry a read that can never succeed.
        fd, st = self._open_regular(path, sized=room is not None)
        try:
            if room is not None:
                room(st.st_size)
            return self._read_all(fd, st, path)
        except OSError as exc:
            raise _error(exc, path) from None
        finally:
            os.close(fd)

    def open_file(self, path: str, *, room: Callable[[int], None] | None = None) -> tuple[int, int]:
        """(A descriptor of regular file `path`, its size), opened as read_bytes opens it, at most
        `max_bytes`; `room(size)` as read_bytes calls it. The caller reads and closes it."""
        fd, st = self._open_regular(path, sized=True)
        if room is not None:
            try:
                room(st.st_size)
            except BaseException:
                os.close(fd)
                raise
        return fd, st.st_size

    def read_pieces(self, path: str, take: Callable[[bytes, int], bool], *, piece: int = 1 << 20) -> int:
        """Regular file `path` handed to `take(piece, size)` a piece at a time (`size` its fstat),
        until it returns False or the file ends, at most `max_bytes` in all: one piece held at
        once, however large the file. The bytes read."""
        fd, st = self._open_regular(path, sized=True)
        try:
            left = self.max_bytes if self.max_bytes is not None else -1
            total = 0
            while left != 0:
                chunk = os.read(fd, piece if left < 0 else min(piece, left))
                if not chunk:
                    break
                total += len(chunk)
                left = left - len(chunk) if left > 0 else left
                if not take(chunk, st.st_size):
                    break
            return total
        except OSError as exc:
            raise _error(exc, path) from None
        finally:
            os.close(fd)

    def read_head(self, path: str, size: int) -> bytes:
        """The first `size` bytes of regular file `path` (all of it when smaller)."""
        parts = _parts(path)
        if not parts:
            raise InvalidInput("/ is a directory; give a file path")
        try:
            fd = self._open(parts, _READ_FLAGS)
        except OSError as exc:
            raise _error(exc, path) from None
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise Denied(f"{path} is not a regular file; Warden reads only regular files",
                             rule="deny: not a regular file")
            chunks: list[bytes] = []
            left = size
            while left > 0 and (chunk := os.read(fd, left)):
                chunks.append(chunk)
                left -= len(chunk)
            return b"".join(chunks)
        except OSError as exc:
            raise _error(exc, path) from None
        finally:
            os.close(fd)

    def read_text(self, path: str, encoding: str = "utf-8") -> str:
        """The content of `path` decoded as `encoding`."""
        data = self.read_bytes(path)
        try:
            return data.decode(encoding)
        except UnicodeDecodeError:
            raise InvalidInput(f"{path} is not valid {encoding} text; read it as bytes") from None

    def stat(self, path: str) -> Entry:
        """What `path` is (a link is reported as a link, never followed)."""
        parts = _parts(path)
        try:
            if not parts:
                return _entry("/", os.fstat(self._fd))
            dfd = self._dir(parts[:-1])
            try:
                return _entry(parts[-1], os.stat(parts[-1], dir_fd=dfd, follow_symlinks=False))
            finally:
                os.close(dfd)
        except OSError as exc:
            raise _error(exc, path) from None

    def exists(self, path: str) -> bool:
        """Whether `path` names an entry (a link counts; a link on the way is still refused)."""
        try:
            self.stat(path)
        except NotFound:
            return False
        return True

    def list(self, path: str) -> list[Entry]:
        """The entries of directory `path`, sorted by name, from lstat."""
        parts = _parts(path)
        try:
            fd = self._dir(parts)
        except OSError as exc:
            raise _error(exc, path) from None
        try:
            entries: list[Entry] = []
            with os.scandir(fd) as it:
                for item in it:
                    try:
                        entries.append(_entry(item.name, item.stat(follow_symlinks=False)))
                    except FileNotFoundError:
                        continue  # removed while listing
            entries.sort(key=lambda e: e.name)
            return entries
        except OSError as exc:
            raise _error(exc, path) from None
        finally:
            os.close(fd)

    # -- writes ----------------------------------------------------------------------------
    def write_bytes(self, path: str, data: bytes) -> int:
        """Replace `path` with `data` (temp file, fsync, rename); parents are created. Returns the size."""
        parts = _parts(path)
        if not parts:
            raise InvalidInput("/ is a directory; give a file path")
        if self.max_bytes is not None and len(data) > self.max_bytes:
            raise TooLarge(f"{len(data)} bytes for {path} is over the limit of {self.max_bytes} "
                           "(sandbox.max_file_size_mb)")
        name = parts[-1]
        try:
            dfd = self._dir(parts[:-1], create=True)
        except OSError as exc:
            raise _error(exc, path) from None
        try:
            perm = 0o644
            try:
                st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
            except FileNotFoundError:
                st = None
            if st is not None:
                if stat.S_ISDIR(st.st_mode):
                    raise InvalidInput(f"{path} is a directory; give a file path")
                if stat.S_ISLNK(st.st_mode):
                    raise Denied(f"{path} is a symbolic link; Warden does not write through links",
                                 rule="deny: symbolic link")
                if not stat.S_ISREG(st.st_mode):
                    raise Denied(f"{path} is a {_kind(st.st_mode)}, not a regular file",
                                 rule=f"deny: not a regular file ({_kind(st.st_mode)})")
                if st.st_nlink > 1:
                    raise Denied(f"{path} has {st.st_nlink} hard links; Warden does not write through "
                                 "a file with other names (copy it to a new file first)",
                                 rule="deny: hard-linked file")
                perm = stat.S_IMODE(st.st_mode) & 0o777  # never carry setuid/setgid over
            self._replace(dfd, name, data, perm)
            return len(data)
        except OSError as exc:
            raise _error(exc, path) from None
        finally:
            os.close(dfd)

    def _replace(self, dfd: int, name: str, data: bytes, perm: int, *, new: str | None = None) -> None:
        """`name` in `dfd` made to hold `data`, written beside it and renamed into place. `new`:
        the path as the caller gave it, for a file that must be new (Conflict if anything is
        there by the rename: nothing is ever replaced)."""
        tmp = temp_name(name)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | _CLOEXEC, 0o600, dir_fd=dfd)
        try:
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
                os.fchmod(fd, perm)
                # Durable before visible: the rename must not expose a file whose bytes are
                # still only in the page cache (a crash would leave an empty file).
                os.fsync(fd)
            finally:
                os.close(fd)
            if new is None:
                os.rename(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
            else:
                try:
                    renameat_noreplace(dfd, tmp, dfd, name)
                except FileExistsError:
                    raise Conflict(f"{new} already exists; Warden never replaces it with a move "
                                   "(delete it first, or pick another name)") from None
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dfd)
            raise

    def write_text(self, path: str, text: str, encoding: str = "utf-8") -> int:
        """Replace `path` with `text` encoded as `encoding`."""
        return self.write_bytes(path, text.encode(encoding))

    def mkdir(self, path: str) -> bool:
        """Create directory `path` and its missing parents; False when it already existed (fine too)."""
        parts = _parts(path)
        if not parts:
            return False  # the workspace root
        try:
            parent = self._dir(parts[:-1], create=True)
        except OSError as exc:
            raise _error(exc, path) from None
        try:
            # mkdir itself says whether this call made it, even when another writer races us.
            try:
                os.mkdir(parts[-1], 0o755, dir_fd=parent)
                created = True
            except FileExistsError:
                created = False
            # What is there must be a real directory: a link is refused as everywhere (ELOOP).
            os.close(self._open(parts, _DIR_FLAGS))
        except NotADirectoryError:
            raise Conflict(f"{path} exists and is not a directory; remove it first or pick another "
                           "name") from None
        except OSError as exc:
            raise _error(exc, path) from None
        finally:
            os.close(parent)
        return created

    def delete(self, path: str, *, recursive: bool = False) -> str:
        """Remove a file, a link (not its target) or a directory (empty, or any with `recursive`)."""
        parts = _parts(path)
        if not parts:
            raise InvalidInput("the root cannot be deleted")
        name = parts[-1]
        try:
            dfd = self._dir(parts[:-1])
        except OSError as exc:
            raise _error(exc, path) from None
        try:
            st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
            kind = _kind(st.st_mode)
            if kind == "dir":
                if recursive:
                    # rmtree with dir_fd walks by descriptors and never follows links
                    # (shutil.rmtree.avoids_symlink_attacks is True on Linux). Imported here:
                    # shutil pulls in bz2 and lzma, ~1.5 ms of every `warden run`.
                    import shutil

                    try:
                        shutil.rmtree(name, dir_fd=dfd)
                    except RecursionError:
                        _remove_deep(dfd, name)
                else:
                    os.rmdir(name, dir_fd=dfd)
            else:
                os.unlink(name, dir_fd=dfd)
            return kind
        except OSError as exc:
            raise _error(exc, path) from None
        finally:
            os.close(dfd)


    def move(self, source: str, destination: str, *, sha256: str | None = None) -> str:
        """Rename `source` to `destination` (missing parents of the destination are created);
        refused when something is at the destination. Returns the type of what moved.

        With `sha256` (a move a person approved) the file is not renamed but copied: its bytes are
        read once, checked against `sha256`, written to a new file at the destination, and the
        source removed. A rename would land the very inode a bot's process may still hold open
        for writing (opened before the move was asked), so it could rewrite the approved file at
        will; and the bytes checked are exactly the bytes placed (no swap between check and move)."""
        if sha256 is not None:
            return self._move_copy(source, destination, sha256)
        src, dst = _parts(source), _parts(destination)
        if not src or not dst:
            raise InvalidInput("the root cannot be moved, nor anything moved onto it")
        if dst[:len(src)] == src:
            raise InvalidInput(f"cannot move {source} into itself ({destination})")
        try:
            src_dfd = self._dir(src[:-1])
        except OSError as exc:
            raise _error(exc, source) from None
        try:
            st = os.stat(src[-1], dir_fd=src_dfd, follow_symlinks=False)
            kind = _kind(st.st_mode)
            if kind == "file" and st.st_nlink > 1:
                # Its other names may be in folders the bot may not write (an ro zone) or outside
                # the workspace's tree of writable files: the moved name would look like a file of
                # its own at the destination while it is not, as a write through it would show.
                raise Denied(f"{source} has {st.st_nlink} hard links; Warden does not move a file with "
                             "other names (copy it to a new file instead)", rule="deny: hard-linked file")
            try:
                dst_dfd = self._dir(dst[:-1], create=True)
            except OSError as exc:
                raise _error(exc, destination) from None
            try:
                renameat_noreplace(src_dfd, src[-1], dst_dfd, dst[-1])
            except OSError as exc:
                if exc.errno == errno.EEXIST:
                    raise Conflict(f"{destination} already exists; Warden never replaces it with a move "
                                   "(delete it first, or pick another name)") from None
                if exc.errno == errno.EINVAL:
                    raise InvalidInput(f"cannot move {source} to {destination} (a folder into itself?)") from None
                raise _error(exc, destination) from None
            finally:
                os.close(dst_dfd)
            return kind
        except OSError as exc:
            raise _error(exc, source) from None
        finally:
            os.close(src_dfd)


    def _move_copy(self, source: str, destination: str, sha256: str) -> str:
        src, dst = _parts(source), _parts(destination)
        if not src or not dst:
            raise InvalidInput("the root cannot be moved, nor anything moved onto it")
        try:
            src_dfd = self._dir(src[:-1])
        except OSError as exc:
            raise _error(exc, source) from None
        try:
            fd = os.open(src[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | _CLOEXEC,
                         dir_fd=src_dfd)
            try:
                st = os.fstat(fd)
                if not stat.S_ISREG(st.st_mode):
                    raise Conflict(f"{source} is no longer the file that was asked to be moved; nothing was moved",
                                   rule="approval.changed")
                if st.st_nlink > 1:
                    raise Denied(f"{source} has {st.st_nlink} hard links; Warden does not move a file with "
                                 "other names (copy it to a new file instead)", rule="deny: hard-linked file")
                data = self._read_all(fd, st, source)
            finally:
                os.close(fd)
            if hashlib.sha256(data).hexdigest() != sha256:
                raise Conflict(f"{source} is no longer the file that was asked to be moved; nothing was moved",
                               rule="approval.changed")
            try:
                dst_dfd = self._dir(dst[:-1], create=True)
            except OSError as exc:
                raise _error(exc, destination) from None
            try:
                if not self._holds(dst_dfd, dst[-1], sha256):
                    self._replace(dst_dfd, dst[-1], data, stat.S_IMODE(st.st_mode) & 0o777, new=destination)
            finally:
                os.close(dst_dfd)
            # The source goes only while it is the inode read: a file put there since stays.
            with contextlib.suppress(FileNotFoundError):
                now = os.stat(src[-1], dir_fd=src_dfd, follow_symlinks=False)
                if (now.st_dev, now.st_ino) == (st.st_dev, st.st_ino):
                    os.unlink(src[-1], dir_fd=src_dfd)
            return "file"
        except OSError as exc:
            raise _error(exc, source) from None
        finally:
            os.close(src_dfd)

    def _holds(self, dfd: int, name: str, sha256: str) -> bool:
        """Whether `name` in `dfd` is a regular file of one name holding bytes of digest `sha256`:
        a move killed after it placed its copy and before it removed the source, answered again,
        finishes (removes the source) rather than refuse its own copy as a file in the way. A link
        there is never its copy (nor followed): a bot's link to a file of its own with those bytes
        would have the source removed and the approved bytes left only where the bot may delete them."""
        try:
            fd = os.open(name, _READ_FLAGS | os.O_NOFOLLOW, dir_fd=dfd)
        except OSError:
            return False
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
                return False
            return hashlib.sha256(self._read_all(fd, st, name)).hexdigest() == sha256
        except (OSError, WardenError):
            return False
        finally:
            os.close(fd)

    def _check_size(self, size: int, path: str) -> None:
        if self.max_bytes is not None and size > self.max_bytes:
            raise TooLarge(f"{path} is {size} bytes, over the limit of {self.max_bytes} "
                           "(sandbox.max_file_size_mb)")

    def _read_all(self, fd: int, st: os.stat_result, path: str) -> bytes:
        """The bytes of open regular file `fd` (`st` its fstat), at most `max_bytes`, however
        it grows while read."""
        limit = self.max_bytes
        self._check_size(st.st_size, path)
        chunks: list[bytes] = []
        total = 0
        while True:
            chunk = os.read(fd, 1 << 20 if st.st_size > 65536 else max(st.st_size + 1, 4097))
            if not chunk:
                break
            total += len(chunk)
            if limit is not None and total > limit:
                raise TooLarge(f"{path} grew past the limit of {limit} bytes while being read")
            chunks.append(chunk)
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)


class HostSafeRoots:
    """The SafeRoots port: a workspace folder held open, nothing beneath it followed."""

    def open(self, root: str, *, max_bytes: int | None = None, use_openat2: bool | None = None) -> SafeRoot:
        return SafeRoot.open(root, max_bytes=max_bytes, use_openat2=use_openat2)
