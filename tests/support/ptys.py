"""What a program drew on a real terminal: a pseudo-terminal's slave given as the stream, the
master read to its end, the text split at each carriage return (one redraw of a row each)."""

from __future__ import annotations

import contextlib
import fcntl
import os
import pty
import select
import struct
import termios
from collections.abc import Callable
from typing import TextIO


def redraws_on_a_terminal(draw: Callable[[TextIO], None], *, columns: int | None = None) -> list[str]:
    """Call `draw` with a stream that is a terminal (`columns` wide); the rows it drew, in order
    (each without its erase-line sequence)."""
    leader, follower = pty.openpty()
    try:
        os.set_blocking(leader, False)
        if columns is not None:
            fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
        with open(follower, "w", closefd=False) as stream:
            draw(stream)
            stream.flush()
        written = _drain(leader).decode()
    finally:
        os.close(leader)
        os.close(follower)
    return [part.replace("\x1b[K", "") for part in written.replace("\r\n", "\n").split("\r") if part]


def _drain(fd: int) -> bytes:
    """All the pty holds: one read may give only the first of its chunks (seen under load)."""
    chunks = []
    while select.select([fd], [], [], 0.5)[0]:
        with contextlib.suppress(BlockingIOError):
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                break
            if not chunk:
                break
            chunks.append(chunk)
    return b"".join(chunks)
