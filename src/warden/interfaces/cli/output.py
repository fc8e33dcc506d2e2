"""What a command hands back to the CLI: data for --json and text for a person.

Text for a person is made safe for a terminal here, once for every command: strings from the
data (a bot chooses file paths, names and messages that reach the audit log) are shown with
their control characters escaped (`\\n`, `\\x1b`), so they can neither forge lines in a table
nor send escape sequences to the operator's terminal (CVE-2003-0063 and its many cousins).
The JSON output is left alone: json.dumps escapes what JSON needs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Output", "human_size", "printable", "table"]

# C0 controls, DEL and C1 controls (a terminal reads \x9b as CSI), and the bidirectional
# overrides and isolates that make text display in another order than it reads
# (CVE-2021-42574, "Trojan Source").
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
_CONTROLS = [*range(0x00, 0x20), 0x7F, *range(0x80, 0xA0)]
_BIDI = [*range(0x202A, 0x202F), *range(0x2066, 0x206A)]
_ESCAPES: dict[int, str] = {
    **{c: _NAMED.get(chr(c), f"\\x{c:02x}") for c in _CONTROLS},
    **{c: f"\\u{c:04x}" for c in _BIDI},
}
# For whole texts a command built: its own line breaks stay, anything else is escaped.
_ESCAPES_BUT_LINES = {c: v for c, v in _ESCAPES.items() if c != ord("\n")}


def printable(value: str) -> str:
    """`value` with control characters shown escaped (`\\n`, `\\x1b`): one safe line for a terminal."""
    return value.translate(_ESCAPES)


def _printable_data(value: Any) -> Any:
    """A copy of command data with every string (keys too) made printable, for a render function."""
    if isinstance(value, str):
        return printable(value)
    if isinstance(value, Mapping):
        return {_printable_data(k): _printable_data(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_printable_data(v) for v in value]
    return value


@dataclass
class Output:
    """`data` goes into the JSON envelope; `text` (or `render(data)`) is shown to a person.

    `render` gets the data with its strings already made printable; a `text` built from data
    keeps its line breaks, so a command interpolating outside strings into `text` should pass
    them through `printable` (or use `render`).
    """

    data: Any = None
    text: str | None = None
    render: Callable[[Any], str] | None = None
    exit_code: int = 0
    # Set when the command already wrote its human output (streamed runs).
    streamed: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    def human(self) -> str:
        if self.text is not None:
            return self.text.translate(_ESCAPES_BUT_LINES)
        if self.render is not None:
            return self.render(_printable_data(self.data)).translate(_ESCAPES_BUT_LINES)
        return ""


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A plain aligned text table (the seed's `sandbox list` layout); one line per row, always."""
    cells = [[printable(str(h)) for h in headers]] + [
        ["" if c is None else printable(str(c)) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells]
    return "\n".join(lines)


def human_size(n: int) -> str:
    """Bytes as a person reads them: 512B, 4.0K, 1.5M, 2.0G."""
    value = float(n)
    for unit in ("B", "K", "M", "G"):
        if value < 1024 or unit == "G":
            return f"{value:.0f}{unit}" if unit == "B" else f"{value:.1f}{unit}"
        value /= 1024
    return f"{n}B"
