"""Text a command or a bot chose, made safe to show on a terminal (pure).

A bot chooses file paths, names, messages and the stderr its commands print; Warden repeats
some of it in its own lines (a note after a run, a table, an audit listing). Shown as written,
such text could send escape sequences to the person's terminal or forge lines of its own
(CVE-2003-0063 and its many cousins), so control characters are shown escaped (`\\n`, `\\x1b`).
The CLI's output (interfaces/cli/output.py) and Warden's notes on a run both escape with this.
"""

from __future__ import annotations

__all__ = ["ESCAPES", "echoed", "json_printable", "printable"]

# C0 controls, DEL and C1 controls (a terminal reads \x9b as CSI), and the bidirectional
# overrides and isolates that make text display in another order than it reads
# (CVE-2021-42574, "Trojan Source"); and the private-use characters the CLI uses as colour
# marks (interfaces/cli/output.py), which text from outside must not carry in.
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
_CONTROLS = [*range(0x00, 0x20), 0x7F, *range(0x80, 0xA0)]
# The invisible ones too: zero-width spaces and joiners, the directional marks (LRM, RLM, ALM),
# the word joiner and invisible operators, a BOM, and the line and paragraph separators (which
# some terminals break a line at): a path that reads "done.md" could hold any of them, and an
# approval's reviewer saw two paths that looked the same.
# And the other characters a terminal shows as nothing, or as a blank: the soft hyphen, the
# combining grapheme joiner, the Hangul and Khmer fillers, the Mongolian vowel separator, the
# deprecated format controls, the supplementary variation selectors, the interlinear annotation marks and the
# tag characters (U+E0000-E007F, each an invisible copy of an ASCII one: "done.md" followed by
# a hidden sentence read as "done.md"). Found attacking (attack24). (U+FE0E and U+FE0F stay:
# emoji in a process's output carry them.)
_BIDI = [*range(0x202A, 0x202F), *range(0x2066, 0x2070), *range(0x200B, 0x2010), 0x2028, 0x2029,
         *range(0x2060, 0x2065), 0x061C, 0xFEFF,
         0x00AD, 0x034F, 0x115F, 0x1160, 0x17B4, 0x17B5, 0x180E, 0x3164, 0xFFA0,
         *range(0xFFF9, 0xFFFC), *range(0xE0000, 0xE0080), *range(0xE0100, 0xE01F0)]


def _escape(c: int) -> str:
    return f"\\u{c:04x}" if c <= 0xFFFF else f"\\U{c:08x}"


ESCAPES: dict[int, str] = {
    **{c: _NAMED.get(chr(c), f"\\x{c:02x}") for c in _CONTROLS},
    **{c: _escape(c) for c in _BIDI},
    **{c: f"\\u{c:04x}" for c in range(0xE000, 0xE010)},
}


def printable(value: str) -> str:
    """`value` with control characters shown escaped (`\\n`, `\\x1b`): one safe line for a terminal."""
    return value.translate(ESCAPES)


def echoed(text: str, longest: int = 100) -> str:
    """`text` cut after `longest` characters (marked `…`) and escaped: a part of Warden's own line
    that the sandbox chose (a program name from its stderr, a folder it named)."""
    return printable(text[:longest] + ("…" if len(text) > longest else ""))


# JSON for a terminal (the CLI's --json): json.dumps(ensure_ascii=False) escapes C0 controls only,
# so a bot's path holding U+009B (which a terminal may read as CSI) or a bidirectional override
# went out as it was. Such a character can stand only inside a JSON string, where `\\u009b`
# means the same: the document a program reads is unchanged.
def _json_escape(c: int) -> str:
    if c <= 0xFFFF:
        return f"\\u{c:04x}"
    c -= 0x10000  # JSON spells a character past U+FFFF as its UTF-16 surrogate pair
    return f"\\u{0xD800 + (c >> 10):04x}\\u{0xDC00 + (c & 0x3FF):04x}"


_JSON_ESCAPES: dict[int, str] = {c: _json_escape(c) for c in (0x7F, *range(0x80, 0xA0), *_BIDI)}


def json_printable(text: str) -> str:
    """JSON text (from json.dumps) with DEL, the C1 controls and the bidirectional overrides as
    `\\uXXXX` escapes: the same document, safe on a terminal."""
    return text.translate(_JSON_ESCAPES)
