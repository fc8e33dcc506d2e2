"""renameat2(2) with RENAME_NOREPLACE through ctypes: rename between two held directories,
refusing to replace what is at the destination, atomically (Linux >= 3.15, glibc >= 2.28).

Python's `os.rename` takes directory descriptors but no flags, and a check for the
destination followed by a plain rename leaves a window in which another writer (a bot's own
command in its sandbox) could put something there that the rename then silently replaces.
"""

from __future__ import annotations

import ctypes
import errno
import os
from collections.abc import Callable

__all__ = ["RENAME_EXCHANGE", "RENAME_NOREPLACE", "exchange", "renameat_noreplace"]

RENAME_NOREPLACE = 1  # include/uapi/linux/fs.h
RENAME_EXCHANGE = 2


def _load() -> Callable[[int, bytes, int, bytes, int], int] | None:
    try:
        call = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):  # a libc without the wrapper (musl before 1.2.2, old glibc)
        return None
    call.restype = ctypes.c_int
    call.argtypes = (ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint)
    return lambda a, b, c, d, e: int(call(a, b, c, d, e))


# Module-level so a test can replace it with one that answers EINVAL (a filesystem without the flag).
CALL = _load()


def renameat_noreplace(src_dir: int, src: str, dst_dir: int, dst: str) -> None:
    """Rename entry `src` of `src_dir` to `dst` of `dst_dir`; EEXIST when `dst` is there.

    Neither name is followed if it is a symbolic link (rename never follows its last component).
    Where the libc or the filesystem lacks the flag (ENOSYS, EINVAL), a non-directory is moved
    with link + unlink, which also refuses an existing destination atomically (EEXIST); a
    directory then is not moved (the OSError goes on)."""
    call = CALL
    code = errno.ENOSYS
    if call is not None:
        while True:
            if call(src_dir, os.fsencode(src), dst_dir, os.fsencode(dst), RENAME_NOREPLACE) == 0:
                return
            code = ctypes.get_errno()
            if code != errno.EINTR:
                break
        if code not in (errno.ENOSYS, errno.EINVAL):
            raise OSError(code, os.strerror(code))
    import stat

    if stat.S_ISDIR(os.stat(src, dir_fd=src_dir, follow_symlinks=False).st_mode):
        raise OSError(code, os.strerror(code))
    os.link(src, dst, src_dir_fd=src_dir, dst_dir_fd=dst_dir, follow_symlinks=False)
    os.unlink(src, dir_fd=src_dir)


def exchange(a: str, b: str) -> None:
    """Swap paths `a` and `b` (both must exist) in one step: no reader ever finds either missing.
    OSError (ENOSYS, EINVAL) where the libc or the filesystem cannot; the caller then does without."""
    call = CALL
    if call is None:
        raise OSError(errno.ENOSYS, os.strerror(errno.ENOSYS))
    while call(-100, os.fsencode(a), -100, os.fsencode(b), RENAME_EXCHANGE) != 0:  # AT_FDCWD
        code = ctypes.get_errno()
        if code != errno.EINTR:
            raise OSError(code, os.strerror(code))
