"""Text a command or a bot chose, made safe to echo in Warden's own lines (pure).

Warden's notes on a run go to the person's terminal raw (`warden run --json` JSON-escapes the
command's output, not Warden's lines), so any part of them the sandbox chose (a program name
from its stderr, a folder it named) is escaped here: no escape sequence, no line of its own,
no screenful.
"""

from __future__ import annotations

import re

__all__ = ["echoed"]

# What a terminal takes for a command rather than text: C0 controls, DEL, C1 controls (\x9b is
# CSI) and the bidirectional overrides and isolates (the set the CLI's `printable` escapes).
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _escape(found: re.Match[str]) -> str:
    code = ord(found[0])
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def echoed(text: str, longest: int = 100) -> str:
    """`text` escaped (`\\x1b`) and cut after `longest` characters (marked `…`)."""
    cut = text[:longest] + ("…" if len(text) > longest else "")
    return _UNSAFE.sub(_escape, cut)
