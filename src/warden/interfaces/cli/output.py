"""What a command hands back to the CLI: data for --json and text for a person."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Output", "human_size", "table"]


@dataclass
class Output:
    """`data` goes into the JSON envelope; `text` (or `render(data)`) is shown to a person."""

    data: Any = None
    text: str | None = None
    render: Callable[[Any], str] | None = None
    exit_code: int = 0
    # Set when the command already wrote its human output (streamed runs).
    streamed: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    def human(self) -> str:
        if self.text is not None:
            return self.text
        if self.render is not None:
            return self.render(self.data)
        return ""


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A plain aligned text table (the seed's `sandbox list` layout)."""
    cells = [[str(h) for h in headers]] + [["" if c is None else str(c) for c in r] for r in rows]
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
