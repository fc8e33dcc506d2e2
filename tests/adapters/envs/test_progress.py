"""The layer-build progress bar: one redrawn line on a terminal that never wraps (a wrapped line
cannot be redrawn in place: each redraw would land a row lower), counts said in good English."""

from __future__ import annotations

import io
import os
import pty

from warden.adapters.envs.progress import Progress, counted


def test_counts_read_as_english() -> None:
    assert counted(0, "package", "packages", "installing") == "installing no packages"
    assert counted(1, "dependency", "dependencies", "resolving") == "resolving 1 dependency"
    assert counted(25, "package", "packages", "installing") == "installing 25 packages"


def test_on_a_narrow_terminal_every_redraw_fits_one_row() -> None:
    leader, follower = pty.openpty()
    try:
        os.set_blocking(leader, False)
        import fcntl
        import struct
        import termios

        fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 60, 0, 0))  # 60 columns
        stream = open(follower, "w", closefd=False)  # noqa: SIM115 - the pty's own end, closed below
        bar = Progress("building Python layer py3.11-1aac0b0269529af3 for template data-science", 4, stream)
        bar.step(counted(25, "package", "packages", "installing"))
        bar.finish()
        stream.flush()
        written = _drain(leader).decode()
    finally:
        os.close(leader)
        os.close(follower)
    redraws = [part.replace("\x1b[K", "") for part in written.replace("\r\n", "\n").split("\r") if part]
    assert len(redraws) == 2
    for line in redraws:
        assert len(line.rstrip("\n")) < 60, line
    assert "installing 25 packages" in redraws[0] and "4/4 done in" in redraws[1]
    assert redraws[0].startswith("building Python")


def _drain(fd: int) -> bytes:
    """All the pty holds: one read may give only the first of its chunks (seen under load)."""
    import select

    chunks = []
    while select.select([fd], [], [], 0.5)[0]:
        try:
            chunk = os.read(fd, 65536)
        except (BlockingIOError, OSError):
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks)


def test_through_a_pipe_each_step_is_a_whole_line() -> None:
    out = io.StringIO()
    bar = Progress("building a layer with a title far longer than any terminal " * 3, 2, out)
    bar.step("one")
    bar.finish()
    lines = out.getvalue().splitlines()
    assert len(lines) == 2 and lines[0].endswith("0/2 one") and "\r" not in out.getvalue()
