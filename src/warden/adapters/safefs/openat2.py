"""openat2(2) through ctypes: open a path strictly beneath a directory descriptor (Linux >= 5.6).

Python has no binding for openat2, so it is called as a raw system call. The resolve flags
make the kernel itself refuse `..` escapes and absolute links (RESOLVE_BENEATH), any
symbolic link (RESOLVE_NO_SYMLINKS) and `/proc/self/fd`-style magic links
(RESOLVE_NO_MAGICLINKS), atomically with the open.
"""

from __future__ import annotations

import ctypes
import errno
import os
from collections.abc import Callable

__all__ = ["AVAILABLE", "RESOLVE", "SYSCALL", "openat2", "supported"]

# include/uapi/linux/openat2.h
RESOLVE_NO_XDEV = 0x01
RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_NO_SYMLINKS = 0x04
RESOLVE_BENEATH = 0x08
RESOLVE = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_SYMLINKS
# openat2 has number 437 on every architecture that uses the generic syscall table.
_NUMBERS = {"x86_64": 437, "aarch64": 437, "arm64": 437, "riscv64": 437, "ppc64le": 437, "s390x": 437}


class OpenHow(ctypes.Structure):
    """struct open_how."""

    _fields_ = (("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64))


Syscall = Callable[[int, bytes, OpenHow], int]


def _load() -> Syscall | None:
    number = _NUMBERS.get(os.uname().machine)  # platform.machine(), without importing platform
    if number is None:
        return None
    try:
        call = ctypes.CDLL(None, use_errno=True).syscall
    except (OSError, AttributeError):
        return None
    call.restype = ctypes.c_long
    call.argtypes = (ctypes.c_long, ctypes.c_int, ctypes.c_char_p, ctypes.POINTER(OpenHow), ctypes.c_size_t)

    def syscall(dirfd: int, path: bytes, how: OpenHow) -> int:
        return int(call(number, dirfd, path, ctypes.byref(how), ctypes.sizeof(how)))

    return syscall


# Module-level so a test can replace it with one that answers ENOSYS.
SYSCALL = _load()


def openat2(dirfd: int, path: str, flags: int) -> int:
    """A descriptor for `path` beneath `dirfd`, or OSError (ENOSYS where the kernel lacks openat2)."""
    call = SYSCALL
    if call is None:
        raise OSError(errno.ENOSYS, os.strerror(errno.ENOSYS))
    how = OpenHow(flags, 0, RESOLVE)
    target = os.fsencode(path)
    while True:
        fd = call(dirfd, target, how)
        if fd >= 0:
            return fd
        code = ctypes.get_errno()
        if code != errno.EINTR:
            raise OSError(code, os.strerror(code))


def supported() -> bool:
    """Whether this kernel answers openat2 (probed with a harmless open of "/")."""
    fd = os.open("/", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.close(openat2(fd, ".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC))
        return True
    except OSError as exc:
        # ENOSYS: old kernel; EPERM: a seccomp filter (some container runtimes) refuses it.
        return exc.errno not in (errno.ENOSYS, errno.EPERM)
    finally:
        os.close(fd)


AVAILABLE = supported()
