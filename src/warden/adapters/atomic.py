"""Atomic file writes (temp file in the same directory, fsync, rename, fsync the directory), and
the lock file that makes one process at a time the writer of something."""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

__all__ = ["exclusive", "naming", "write_atomic"]


@contextlib.contextmanager
def naming(path: Path | str) -> Iterator[None]:
    """An OSError of the block that names no file (a write's or a flush's) raised again with
    `path` as its file: "no space left on the device" then says which."""
    try:
        yield
    except OSError as exc:
        if exc.filename is None and exc.errno is not None:
            raise OSError(exc.errno, exc.strerror, str(path)) from exc
        raise


def write_atomic(path: Path, data: bytes, *, mode: int = 0o644) -> None:
    """Replace `path` with `data` so that a reader sees the old or the new file, never a torn one."""
    directory = path.parent
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / f".{path.name}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | os.O_NOFOLLOW, mode)
    try:
        with naming(path), os.fdopen(fd, "wb", closefd=True) as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise
    dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


@contextlib.contextmanager
def exclusive(lock_file: Path | str, *, mode: int = 0o600, shared: bool = False) -> Iterator[None]:
    """Hold an exclusive flock on `lock_file` (made if missing, never through a link) for the
    block (`shared`: one that many holders share, and that waits for an exclusive one). It is
    let go when the block ends, and when its holder ends however (kill -9 too). flock is per
    open file: a holder that takes it again waits on itself."""
    fd = os.open(lock_file, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, mode)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)
