"""Writing into a workspace a bot can write to, without ever following its symlinks.

Warden writes venv files and node_modules links on the host, often as root, into folders a
bot controls (repair, resume). A bot could have replaced `.venv/bin` with a symlink to
`/etc`; a plain `open(".venv/bin/activate", "w")` would then write through it. Here every
step is relative to a held directory descriptor with O_NOFOLLOW: a symlink (or a file)
where a folder belongs is removed and replaced, and files are created with O_NOFOLLOW.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator

__all__ = ["DirHandle", "open_tree"]

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class DirHandle:
    """An open directory; children are reached relative to it."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def subdir(self, name: str, *, create: bool = True, mode: int = 0o755) -> DirHandle:
        """Open child folder `name`, replacing a symlink or file there; create it if missing."""
        for _ in range(3):
            try:
                return DirHandle(os.open(name, _DIR_FLAGS, dir_fd=self.fd))
            except FileNotFoundError:
                if not create:
                    raise
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, mode, dir_fd=self.fd)
            except OSError as exc:
                if exc.errno not in (errno.ELOOP, errno.ENOTDIR) or not create:
                    raise
                os.unlink(name, dir_fd=self.fd)
        raise OSError(errno.EAGAIN, f"cannot open folder {name!r}: it keeps changing")

    def path(self, *names: str, create: bool = True) -> DirHandle:
        """Walk several levels (`path("lib", "python3.12")`); each handle but the last is closed."""
        handle: DirHandle = self
        for name in names:
            child = handle.subdir(name, create=create)
            if handle is not self:
                handle.close()
            handle = child
        if handle is self:
            return DirHandle(os.dup(self.fd))
        return handle

    def write(self, name: str, data: bytes | str, mode: int = 0o644, *, exclusive: bool = False) -> None:
        """Create or replace file `name` (a symlink there is removed, never followed)."""
        payload = data.encode() if isinstance(data, str) else data
        flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | (os.O_EXCL if exclusive else os.O_TRUNC)
        for _ in range(3):
            try:
                fd = os.open(name, flags, mode, dir_fd=self.fd)
            except OSError as exc:
                if exc.errno == errno.EEXIST and exclusive:
                    return
                if exc.errno != errno.ELOOP:
                    raise
                os.unlink(name, dir_fd=self.fd)
                continue
            try:
                st = os.fstat(fd)
                if st.st_nlink > 1:
                    # A hard link to a file elsewhere: writing would change that file too.
                    os.close(fd)
                    os.unlink(name, dir_fd=self.fd)
                    continue
                os.write(fd, payload)
                os.fchmod(fd, mode)
            finally:
                with contextlib.suppress(OSError):
                    os.close(fd)
            return
        raise OSError(errno.EAGAIN, f"cannot write {name!r}: it keeps changing")

    def symlink(self, target: str, name: str) -> None:
        """Make `name` a symlink to `target`, replacing whatever link or file is there."""
        try:
            os.symlink(target, name, dir_fd=self.fd)
            return
        except FileExistsError:
            pass
        st = os.lstat(name, dir_fd=self.fd)
        if stat.S_ISLNK(st.st_mode) and os.readlink(name, dir_fd=self.fd) == target:
            return
        if stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError(errno.EISDIR, f"{name!r} is a folder; remove it to relink")
        os.unlink(name, dir_fd=self.fd)
        os.symlink(target, name, dir_fd=self.fd)

    def exists(self, name: str) -> bool:
        try:
            os.lstat(name, dir_fd=self.fd)
        except FileNotFoundError:
            return False
        return True

    def unlink(self, name: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name, dir_fd=self.fd)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> DirHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@contextlib.contextmanager
def open_tree(root: str | os.PathLike[str]) -> Iterator[DirHandle]:
    """Hold `root` (a folder Warden made; it must not itself be a symlink)."""
    handle = DirHandle(os.open(root, _DIR_FLAGS))
    try:
        yield handle
    finally:
        handle.close()
