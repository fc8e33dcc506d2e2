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

__all__ = ["MAX_MATCHED", "replacement_diff", "unified_diff"]

# Lines, both sides together, of the part that differs that difflib may match line by line.
MAX_MATCHED = 4000

_HUNK = re.compile(r"^@@ -(\d+)(,\d+)? \+(\d+)(,\d+)? @@")


def unified_diff(a: Sequence[str], b: Sequence[str], fromfile: str = "", tofile: str = "", *,
                 n: int = 3, offset: int = 0) -> Iterator[str]:
    """The lines of a unified diff from `a` to `b` (lines with their endings, as difflib takes
    them), with `n` lines of context; nothing when they are equal. `offset`: the lines of both
    files before `a` and `b` (a window of them), added to the hunks' line numbers. A last line
    with no newline ends with one and is followed by `\\ No newline at end of file`, as diff
    and git write it: difflib's diff ran it into the next line (`-old+new` read as one line,
    in the text an MCP edit_file answers), and a change of the final newline alone showed
    nothing (`-x`, `+x`)."""
    for line in _unified_diff(a, b, fromfile, tofile, n=n, offset=offset):
        if line.endswith("\n"):
            yield line
        else:
            yield line + "\n"
            yield "\\ No newline at end of file\n"


def _unified_diff(a: Sequence[str], b: Sequence[str], fromfile: str, tofile: str, *,
                  n: int, offset: int) -> Iterator[str]:
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
    shift = start + offset
    a_end, b_end = len(a) - tail + min(n, tail), len(b) - tail + min(n, tail)
    if (len(a) - tail - head) + (len(b) - tail - head) <= MAX_MATCHED:
        for line in difflib.unified_diff(a[start:a_end], b[start:b_end], fromfile, tofile, n=n, lineterm="\n"):
            found = _HUNK.match(line)
            if found is None:
                yield line
                continue
            # Numbered within the window: shifted to where the window starts in the files.
            old_at, old_len, new_at, new_len = found.groups()
            yield (f"@@ -{int(old_at) + shift}{old_len or ''} +{int(new_at) + shift}{new_len or ''} @@"
                   f"{line[found.end():]}")
        return
    yield f"--- {fromfile}\n"
    yield f"+++ {tofile}\n"
    yield f"@@ -{_range(shift, a_end - start)} +{_range(shift, b_end - start)} @@\n"
    yield from (" " + line for line in a[start:head])
    yield from ("-" + line for line in a[head:len(a) - tail])
    yield from ("+" + line for line in b[head:len(b) - tail])
    yield from (" " + line for line in a[len(a) - tail:a_end])


def _range(start: int, length: int) -> str:
    """A hunk's range as difflib writes it (1-based; an empty one names the line before)."""
    if length == 1:
        return f"{start + 1}"
    return f"{start + 1 if length else start},{length}"


def replacement_diff(before: str, at: int, old: int, new: str, fromfile: str = "", tofile: str = "", *,
                     n: int = 3) -> Iterator[str]:
    """The diff of `before` with its `old` characters at `at` replaced by `new`, read from the
    lines around the change only: a whole file split into lines costs ~60 bytes a line (a file of
    60 MB of short lines, a few GB), where the change needs a few."""
    start = before.rfind("\n", 0, at) + 1  # the line the change begins in, and `n` above it
    for _ in range(n):
        if start == 0:
            break
        start = before.rfind("\n", 0, start - 1) + 1
    found = before.find("\n", at + old)  # past the line it ends in, and `n` below it
    end = len(before) if found < 0 else found + 1
    for _ in range(n):
        if end >= len(before):
            break
        found = before.find("\n", end)
        end = len(before) if found < 0 else found + 1
    window_b = before[start:at] + new + before[at + old:end]
    yield from unified_diff(_lines(before[start:end]), _lines(window_b), fromfile, tofile, n=n,
                            offset=before.count("\n", 0, start))


def _lines(text: str) -> list[str]:
    """`text` in lines, each with its `\\n` (the last one without, if it has none)."""
    parts = text.split("\n")
    lines = [part + "\n" for part in parts[:-1]]
    return [*lines, parts[-1]] if parts[-1] else lines
