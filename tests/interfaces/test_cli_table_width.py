"""Tables fit the terminal they are shown on; through a pipe each row stays one line."""

from __future__ import annotations

import os
import pty
import subprocess
import sys

from tests.conftest import Cli
from warden.interfaces.cli.output import table


def _on_a_terminal(environ: dict[str, str], *args: str) -> str:
    """What `warden ARGS` prints with stdout on a pseudo-terminal."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "warden", *args], stdout=follower,
                            stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, env=environ)
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: the child closed its end
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    proc.wait(timeout=60)
    return b"".join(chunks).decode().replace("\r\n", "\n")


def test_doctor_fits_an_80_column_terminal(cli: Cli, environ: dict[str, str]) -> None:
    piped = cli("doctor").stdout
    assert max(len(line) for line in piped.splitlines()) > 80  # the case worth testing
    shown = _on_a_terminal({**environ, "COLUMNS": "80"}, "doctor")
    lines = shown.splitlines()
    assert lines[0].split() == ["Check", "Status", "Detail", "Fix"]
    assert max(len(line) for line in lines[:-1]) <= 80, shown  # the verdict below is prose
    # Nothing is lost: every character of the piped table is still there (a word wider than its
    # column, such as a normal user's cgroup path, is broken across lines). Digits aside: a figure
    # of the machine (free disk, live processes) may move between the two runs of doctor.
    table_chars = lambda text: sorted(c for c in "".join(text.split("\n\n")[0].split()) if not c.isdigit())  # noqa: E731
    assert table_chars(shown) == table_chars(piped)


def test_piped_rows_stay_one_line_each() -> None:
    rows = [["a", "x" * 300], ["b", "y"]]
    assert table(["K", "V"], rows).splitlines() == table(["K", "V"], rows, width=0).splitlines()
    assert len(table(["K", "V"], rows, width=0).splitlines()) == 3


def test_wrapped_cells_keep_their_column() -> None:
    text = table(["Name", "Note"], [["short", "one two three four five six"]], width=20)
    assert text.splitlines() == ["Name   Note", "short  one two three", "       four five six"]


def test_piped_doctor_is_not_padded_to_its_widest_cell(cli: Cli) -> None:
    """Piped, doctor padded every Detail to its longest one (a normal user's cgroup line, hundreds
    of characters): each row ran to the same great width, most of it blanks before its Fix."""
    piped = cli("doctor").stdout.split("\n\n")[0].splitlines()
    assert piped[0].split() == ["Check", "Status", "Detail", "Fix"]
    assert all("   " + " " * 32 not in line for line in piped), "\n".join(piped)
    assert piped[0].endswith("Status  Detail  Fix")  # past a wide column the next follows two spaces on


def test_a_piped_column_wider_than_the_pad_is_not_padded() -> None:
    rows = [["a", "x" * 300, "1"], ["bb", "y", "2"]]
    assert table(["K", "V", "W"], rows, width=0).splitlines() == ["K   V  W", "a   " + "x" * 300 + "  1", "bb  y  2"]
    narrow = [["a", "short", "1"], ["bb", "y", "2"]]  # columns within the pad stay aligned
    assert table(["K", "V", "W"], narrow, width=0).splitlines() == ["K   V      W", "a   short  1", "bb  y      2"]
