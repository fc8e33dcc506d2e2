"""What a command hands back to the CLI: data for --json and text for a person.

Text for a person is made safe for a terminal here, once for every command: strings from the
data (a bot chooses file paths, names and messages that reach the audit log) are shown with
their control characters escaped (`\\n`, `\\x1b`), so they can neither forge lines in a table
nor send escape sequences to the operator's terminal (CVE-2003-0063 and its many cousins).
The JSON output is left alone: json.dumps escapes what JSON needs.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from warden.core.echo import ESCAPES as _ESCAPES
from warden.core.echo import printable

__all__ = ["Output", "colour", "human_size", "margined", "printable", "styled", "table", "terminal_columns",
           "uses_colour"]

_GAP = 2  # spaces between columns
_NARROWEST = 8  # a squeezed column keeps at least this many characters a line
# Through a pipe a column is padded only up to this: one long cell (doctor's cgroup detail) padded
# every row of its column to hundreds of blanks, so each line ran far wider than what it said.
_PIPED_PAD = 32

# Colour travels through a command's text as private-use characters that `human()` turns into
# SGR sequences once the text has been made safe; data holding them is escaped like a control
# (core/echo.py's ESCAPES). (A mark that slipped past `printable` could only ever set one of
# these six harmless styles.)
_STYLE_MARKS = {"\ue000": "\x1b[0m", "\ue001": "\x1b[1m", "\ue002": "\x1b[31m", "\ue003": "\x1b[32m",
                "\ue004": "\x1b[33m", "\ue005": "\x1b[1;31m"}
_MARK_OF = {"0": "\ue000", "1": "\ue001", "31": "\ue002", "32": "\ue003", "33": "\ue004", "1;31": "\ue005"}
# For whole texts a command built: its own line breaks stay, anything else is escaped.
_ESCAPES_BUT_LINES = {c: v for c, v in _ESCAPES.items() if c != ord("\n")}
_ESCAPES_BUT_LINES_AND_MARKS = {c: v for c, v in _ESCAPES_BUT_LINES.items() if chr(c) not in _STYLE_MARKS}


def margined(text: str) -> list[str]:
    """Text someone else wrote (a bot's commit message), for a reviewer: every line escaped,
    behind a margin that no line of it can fake."""
    return [f"  | {printable(line)}" for line in text.split("\n")]


def _printable_data(value: Any) -> Any:
    """A copy of command data with every string (keys too) made printable, for a render function."""
    if isinstance(value, str):
        return printable(value)
    if isinstance(value, Mapping):
        return {_printable_data(k): _printable_data(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_printable_data(v) for v in value]
    return value


class Output:
    """`data` goes into the JSON envelope; `text` (or `render(data)`) is shown to a person.

    `render` gets the data with its strings already made printable; a `text` built from data
    keeps its line breaks, so a command interpolating outside strings into `text` should pass
    them through `printable` (or use `render`).
    """

    # A plain class, not a dataclass: `dataclasses` imports inspect, ast and dis, ~10 ms of
    # every `warden` start-up that needs none of them (`--help`).
    __slots__ = ("data", "exit_code", "extra", "render", "streamed", "text")

    def __init__(self, data: Any = None, text: str | None = None, render: Callable[[Any], str] | None = None,
                 exit_code: int = 0, streamed: bool = False, extra: dict[str, Any] | None = None) -> None:
        self.data, self.text, self.render = data, text, render
        self.exit_code = exit_code
        self.streamed = streamed  # the command already wrote its human output (streamed runs)
        self.extra: dict[str, Any] = {} if extra is None else extra

    def __repr__(self) -> str:
        return f"Output(data={self.data!r}, exit_code={self.exit_code})"

    def human(self) -> str:
        if self.text is not None:
            return self.text.translate(_ESCAPES_BUT_LINES)
        if self.render is not None:
            # Rendered text keeps the colour marks `table` put in (data's own are escaped by now).
            return styled(self.render(_printable_data(self.data)).translate(_ESCAPES_BUT_LINES_AND_MARKS))
        return ""


def terminal_columns(environ: Mapping[str, str] | None = None) -> int | None:
    """The width of the terminal stdout writes to, as shutil.get_terminal_size() reads it
    ($COLUMNS first), without importing shutil; None when stdout is no terminal."""
    columns = (os.environ if environ is None else environ).get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    try:
        return os.get_terminal_size(sys.__stdout__.fileno()).columns or None  # type: ignore[union-attr]
    except (AttributeError, ValueError, OSError):
        return None


# Status words a table cell may hold alone, and their colour (SGR): seen at a glance in `doctor`.
_STATUS_COLOURS = {"ok": "32", "allow": "32", "ready": "32", "warn": "33", "suspended": "33", "archived": "33",
                   "fail": "31", "failed": "31", "broken": "31", "deny": "31", "denied": "31"}


def uses_colour(stream: Any, environ: Mapping[str, str] | None = None) -> bool:
    """Colour only for a person at a terminal: never through a pipe or into a file, never with
    NO_COLOR set (no-color.org: to anything), never on a TERM=dumb terminal."""
    env = os.environ if environ is None else environ
    if env.get("NO_COLOR") or env.get("TERM") == "dumb":
        return False
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def colour(text: str, sgr: str) -> str:
    """`text` marked for an SGR style (`1` bold, `31` red, `32` green, `33` yellow, `1;31`);
    `styled` (which Output.human applies) makes the marks escape sequences."""
    return f"{_MARK_OF[sgr]}{text}{_MARK_OF['0']}"


def styled(text: str) -> str:
    """`text` with its colour marks as the terminal's escape sequences."""
    for mark, sequence in _STYLE_MARKS.items():
        text = text.replace(mark, sequence)
    return text


def _styled(cells: list[list[str]], widths: list[int]) -> list[str]:
    """The table's lines with a bold header and coloured status words (lengths count the text only)."""
    lines = []
    for n, row in enumerate(cells):
        parts = []
        for cell, width in zip(row, widths, strict=True):
            pad = " " * (width - len(cell))
            style = "1" if n == 0 else _STATUS_COLOURS.get(cell)
            parts.append((colour(cell, style) if style and cell else cell) + pad)
        lines.append("  ".join(parts).rstrip())
    return lines


def _table_width() -> int:
    """How wide a table may be: the terminal's width on a terminal; 0 (no limit) through a pipe."""
    try:
        on_terminal = sys.stdout.isatty()
    except (AttributeError, ValueError):
        on_terminal = False
    return (terminal_columns() or 80) if on_terminal else 0


def table(headers: Sequence[str], rows: Sequence[Sequence[object]], *, width: int | None = None) -> str:
    """A plain aligned text table (headers, then columns two spaces apart, as `sandbox list` shows).

    Through a pipe (or with `width=0`) each row is one line, however long, and a column wider than
    _PIPED_PAD is not padded (the cells after it follow two spaces on). Within `width` columns (by
    default the terminal's, when stdout is one) the widest cells wrap onto more lines, each in its
    own column.
    """
    cells = [[printable(str(h)) for h in headers]] + [
        ["" if c is None else printable(str(c)) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    limit = _table_width() if width is None else width
    if limit and sum(widths) + _GAP * (len(widths) - 1) > limit:
        return _wrapped(cells, _fit(widths, limit - _GAP * (len(widths) - 1)))
    if width is None and uses_colour(sys.stdout):
        return "\n".join(_styled(cells, widths))
    if not limit:
        widths = [w if w <= _PIPED_PAD else 0 for w in widths]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells]
    return "\n".join(lines)


def _fit(widths: list[int], room: int) -> list[int]:
    """Column widths that share `room`: narrow columns keep theirs, the wide ones split the rest."""
    wide = set(range(len(widths)))
    while True:
        share = (room - sum(w for i, w in enumerate(widths) if i not in wide)) // max(len(wide), 1)
        narrow = {i for i in wide if widths[i] <= share}
        if not narrow:
            break
        wide -= narrow
    return [max(share, _NARROWEST) if i in wide else w for i, w in enumerate(widths)]


def _wrapped(cells: list[list[str]], widths: list[int]) -> str:
    import textwrap

    lines: list[str] = []
    for row in cells:
        parts = [textwrap.wrap(c, w, break_on_hyphens=False) or [""] for c, w in zip(row, widths, strict=True)]
        for n in range(max(len(p) for p in parts)):
            line = "  ".join((p[n] if n < len(p) else "").ljust(w) for p, w in zip(parts, widths, strict=True))
            lines.append(line.rstrip())
    return "\n".join(lines)


def human_size(n: int) -> str:
    """Bytes as a person reads them: 512B, 4.0K, 1.5M, 2.0G."""
    value = float(n)
    for unit in ("B", "K", "M", "G"):
        if value < 1024 or unit == "G":
            return f"{value:.0f}{unit}" if unit == "B" else f"{value:.1f}{unit}"
        value /= 1024
    return f"{n}B"
