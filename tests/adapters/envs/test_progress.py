"""The layer-build progress bar: one redrawn line on a terminal that never wraps (a wrapped line
cannot be redrawn in place: each redraw would land a row lower), counts said in good English."""

from __future__ import annotations

import io
import time
from typing import TextIO

from tests.support.ptys import redraws_on_a_terminal
from warden.adapters.envs.progress import Progress, counted


def test_counts_read_as_english() -> None:
    assert counted(0, "package", "packages", "installing") == "installing no packages"
    assert counted(1, "dependency", "dependencies", "resolving") == "resolving 1 dependency"
    assert counted(25, "package", "packages", "installing") == "installing 25 packages"


def test_on_a_narrow_terminal_every_redraw_fits_one_row() -> None:
    def draw(stream: TextIO) -> None:
        bar = Progress("building Python layer py3.11-1aac0b0269529af3 for template data-science", 4, stream)
        bar.step(counted(25, "package", "packages", "installing"))
        bar.finish()

    redraws = redraws_on_a_terminal(draw, columns=60)
    assert len(redraws) == 2
    for line in redraws:
        assert len(line.rstrip("\n")) < 60, line
    assert "installing 25 packages" in redraws[0] and "4/4 done in" in redraws[1]
    assert redraws[0].startswith("building Python")


def test_a_long_step_shows_each_package_as_it_lands() -> None:
    # The count grows while the block runs (as npm puts folders in place): the step's line
    # follows it, the bar moving within the step, and the last count is shown when it ends.
    landed = [0]
    stream = io.StringIO()
    bar = Progress("building Node layer N", 2, stream)
    bar.step(counted(6, "Node package", "Node packages", "installing"))
    with bar.watching(lambda: landed[0], 6, "in place", every=0.01):
        for n in range(1, 7):
            landed[0] = n
            time.sleep(0.05)
    lines = stream.getvalue().splitlines()
    counts = [line.rsplit(": ", 1)[1] for line in lines if "in place" in line]
    assert counts[-1] == "6/6 in place"
    assert any(c not in ("0/6 in place", "6/6 in place") for c in counts), counts  # it moved in between
    assert all(line.startswith("building Node layer N [") for line in lines)


def test_off_a_terminal_500_packages_make_about_ten_lines() -> None:
    # A log gets a line per tenth of the count (or after 5 s with a change), not one per package.
    stream = io.StringIO()
    bar = Progress("building Python layer L", 4, stream)
    bar.step(counted(500, "package", "packages", "installing"))
    tally = bar.count(500, "installed")
    for n in range(1, 501):
        tally.at(n, f"pkg{n}")
    tally.close()
    counts = [line.rsplit(": ", 1)[1] for line in stream.getvalue().splitlines() if "installed" in line]
    assert len(counts) == 11, counts  # the first at once, then 51, 101, … 451, and the last
    assert counts[0] == "1/500 installed (pkg1)" and counts[-1] == "500/500 installed (pkg500)"


def test_on_a_terminal_a_fast_count_is_redrawn_at_most_every_50_ms() -> None:
    stream = _Terminal()
    bar = Progress("building Python layer L", 4, stream)
    bar.step("installing 500 packages")
    tally = bar.count(500, "installed")
    for n in range(1, 501):
        tally.at(n, f"pkg{n}")
    tally.close()
    redraws = stream.getvalue().split("\r")
    assert 2 <= len(redraws) <= 6, len(redraws)  # all within a few ms: the first, the last
    assert redraws[-1].endswith("500/500 installed (pkg500)")


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_on_a_terminal_the_count_redraws_one_row() -> None:
    def draw(stream: TextIO) -> None:
        landed = [0]
        bar = Progress("building Node layer N", 2, stream)
        bar.step("installing 3 Node packages with npm")
        with bar.watching(lambda: landed[0], 3, "in place", every=0.01):
            for n in (1, 2, 3):
                landed[0] = n
                time.sleep(0.1)
        bar.finish()

    redraws = redraws_on_a_terminal(draw)
    counts = [r.rsplit(": ", 1)[1].strip() for r in redraws if "in place" in r]
    assert counts[-1] == "3/3 in place" and len(counts) >= 2 and counts == sorted(set(counts)), counts
    assert "\n" not in "".join(redraws[:-1])  # one row, redrawn
