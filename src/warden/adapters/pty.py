"""Pseudo-terminals for interactive commands: Warden keeps the master, the sandbox gets the slave.

A fresh pair per session, so the sandbox never holds a terminal anybody else reads from
(adapters/sandbox/terminal.py says why that matters). The slave is opened with O_NOCTTY (glibc's
openpty does), so it never becomes the controlling terminal of Warden itself, even when Warden
leads a session with none (`warden serve` under a service manager).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import struct
import termios
import threading

__all__ = ["Pty", "terminal_size"]


class Pty:
    """One pseudo-terminal pair. `give_away()` closes Warden's copy of the slave once the sandbox
    holds it, so reading the master ends (EIO) when the sandbox is gone."""

    def __init__(self, cols: int, rows: int) -> None:
        self.master, self.slave = os.openpty()
        self._lock = threading.Lock()  # the slave is given away from the run's thread
        os.set_blocking(self.master, False)
        self.resize(cols, rows)

    def resize(self, cols: int, rows: int) -> None:
        """Set the terminal's size (TIOCSWINSZ); the kernel sends SIGWINCH to its foreground job."""
        fcntl.ioctl(self.master, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))

    def read(self) -> bytes | None:
        """What the command wrote (b"" when nothing is waiting); None once it is gone for good."""
        try:
            return os.read(self.master, 65536) or None
        except BlockingIOError:
            return b""
        except OSError:  # EIO: no slave is open any more
            return None

    def write(self, data: bytes) -> int:
        """Write what fits of `data` to the command's input; how much did (0 when it is full)."""
        try:
            return os.write(self.master, data)
        except BlockingIOError:
            return 0
        except OSError:  # EIO: the command is gone, and its input with it
            return len(data)

    def give_away(self) -> None:
        with self._lock:
            slave, self.slave = self.slave, -1
        if slave >= 0:
            with contextlib.suppress(OSError):
                os.close(slave)

    def close(self) -> None:
        self.give_away()
        if self.master >= 0:
            with contextlib.suppress(OSError):
                os.close(self.master)
            self.master = -1

    def __enter__(self) -> Pty:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def terminal_size(fd: int) -> tuple[int, int] | None:
    """The (columns, rows) of the terminal open as `fd`, or None when it is not one."""
    try:
        rows, cols, _, _ = struct.unpack("HHHH", fcntl.ioctl(fd, termios.TIOCGWINSZ, b"\0" * 8))
    except OSError:
        return None
    return (cols, rows) if cols and rows else None
