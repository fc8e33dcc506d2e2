"""Unified diffs of texts a bot chose, in time linear in their size.

difflib's SequenceMatcher is quadratic or worse on some inputs: a file of 50,000 short lines
alternating `a` with a few dozen others took 3 s to diff against itself with one line changed,
100,000 lines 12 s, and a 1 MiB file minutes, each in a server thread holding the GIL. An MCP
`edit_file` answers with such a diff, so one bot's few dozen calls on such a file held every
thread of `warden serve` and slowed every other bot's requests by tens of seconds; a person's
`warden approvals --show` of a bot's pending write hung the same way. Here the lines both texts
share at their start and end are set aside first (an edit changes one place), and what differs
between them is handed to difflib only when it is small; else it is shown whole, removed then
added, which is a correct diff too.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterator, Sequence

__all__ = ["MAX_MATCHED", "unified_diff"]

# Lines, both sides together, of the part that differs that difflib may match line by line.
MAX_MATCHED = 4000

_HUNK = re.compile(r"^@@ -(\d+)(,\d+)? \+(\d+)(,\d+)? @@")


def unified_diff(a: Sequence[str], b: Sequence[str], fromfile: str = "", tofile: str = "", *,
                 n: int = 3) -> Iterator[str]:
    """The lines of a unified diff from `a` to `b` (lines with their endings, as difflib takes
    them), with `n` lines of context; nothing when they are equal."""
    shortest = min(len(a), len(b))
    head = 0
    while head < shortest and a[head] == b[head]:
        head += 1
    tail = 0
    while tail < shortest - head and a[len(a) - 1 - tail] == b[len(b) - 1 - tail]:
        tail += 1
    if head == len(a) == len(b):
        return
    start = max(0, head - n)
    a_end, b_end = len(a) - tail + min(n, tail), len(b) - tail + min(n, tail)
    if (len(a) - tail - head) + (len(b) - tail - head) <= MAX_MATCHED:
        for line in difflib.unified_diff(a[start:a_end], b[start:b_end], fromfile, tofile, n=n, lineterm="\n"):
            found = _HUNK.match(line)
            if found is None:
                yield line
                continue
            # Numbered within the window: shifted to where the window starts in the files.
            old_at, old_len, new_at, new_len = found.groups()
            yield (f"@@ -{int(old_at) + start}{old_len or ''} +{int(new_at) + start}{new_len or ''} @@"
                   f"{line[found.end():]}")
        return
    yield f"--- {fromfile}\n"
    yield f"+++ {tofile}\n"
    yield f"@@ -{_range(start, a_end - start)} +{_range(start, b_end - start)} @@\n"
    yield from (" " + line for line in a[start:head])
    yield from ("-" + line for line in a[head:len(a) - tail])
    yield from ("+" + line for line in b[head:len(b) - tail])
    yield from (" " + line for line in a[len(a) - tail:a_end])


def _range(start: int, length: int) -> str:
    """A hunk's range as difflib writes it (1-based; an empty one names the line before)."""
    if length == 1:
        return f"{start + 1}"
    return f"{start + 1 if length else start},{length}"
