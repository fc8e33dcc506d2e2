"""A live sandbox's supervisor made to look as one ending by itself does (an idle stop) between
its last look and its exit: every Unix socket it holds shut (its listener refuses, its kept
connections read as closed), and itself stopped, alive. Takes root (pidfd_getfd of a
non-dumpable process)."""

from __future__ import annotations

import ctypes
import os
import signal
import socket

_PIDFD_GETFD = 438  # the same number on every architecture (Linux 5.6)


def hang_up(pid: int) -> int:
    """Shut every Unix socket of `pid` and stop it (SIGSTOP); how many were shut."""
    libc = ctypes.CDLL(None, use_errno=True)
    pidfd = os.pidfd_open(pid)
    shut = 0
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                if not os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:["):
                    continue
            except FileNotFoundError:
                continue
            got = libc.syscall(_PIDFD_GETFD, pidfd, int(fd), 0)
            if got < 0:
                raise OSError(ctypes.get_errno(), f"pidfd_getfd of {pid}'s {fd}")
            sock = socket.socket(fileno=got)
            try:
                if sock.family == socket.AF_UNIX:
                    sock.shutdown(socket.SHUT_RDWR)
                    shut += 1
            finally:
                sock.close()
        os.kill(pid, signal.SIGSTOP)
    finally:
        os.close(pidfd)
    return shut
