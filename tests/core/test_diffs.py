"""core/diffs: unified diffs of bot-chosen texts, correct and linear in their size."""

from __future__ import annotations

import difflib
import random
import re
import time

import pytest

from warden.core import diffs
from warden.core.diffs import unified_diff

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def _apply(a: list[str], diff: list[str]) -> list[str]:
    """`a` with `diff` applied, each removed and context line checked against `a`."""
    out: list[str] = []
    at = 0
    index = 2 if diff else 0
    while index < len(diff):
        found = _HUNK.match(diff[index])
        assert found is not None, diff[index]
        start, length = int(found.group(1)), int(found.group(2) or 1)
        begin = start - 1 if length else start
        out += a[at:begin]
        at = begin
        index += 1
        while index < len(diff) and not diff[index].startswith("@@"):
            kind, line = diff[index][0], diff[index][1:]
            if index + 1 < len(diff) and diff[index + 1] == "\\ No newline at end of file\n":
                line = line.removesuffix("\n")  # the line before it has none
                index += 1
            if kind in " -":
                assert a[at] == line
                at += 1
            if kind in " +":
                out.append(line)
            index += 1
    return out + a[at:]


def _edited(seed: int) -> tuple[list[str], list[str]]:
    rng = random.Random(seed)
    a = [rng.choice("abcde") + "\n" for _ in range(rng.randint(0, 30))]
    b = list(a)
    for _ in range(rng.randint(0, 3)):
        at = rng.randint(0, len(b))
        kind = rng.choice("idr")
        if kind == "i":
            b.insert(at, rng.choice("abxyz") + "\n")
        elif b:
            at = min(at, len(b) - 1)
            if kind == "d":
                del b[at]
            else:
                b[at] = rng.choice("xyz") + "\n"
    return a, b


@pytest.mark.parametrize("matched", [diffs.MAX_MATCHED, 0])
def test_every_diff_turns_the_old_lines_into_the_new(monkeypatch: pytest.MonkeyPatch, matched: int) -> None:
    """Matched by difflib where the part that differs is small, shown whole past MAX_MATCHED."""
    monkeypatch.setattr(diffs, "MAX_MATCHED", matched)
    for seed in range(2000):
        a, b = _edited(seed)
        diff = list(unified_diff(a, b, "a/f", "b/f"))
        assert _apply(a, diff) == b, (a, b, diff)
        assert (diff == []) == (a == b)


def test_one_changed_line_reads_as_difflib_writes_it() -> None:
    a = [f"{i}\n" for i in range(20)]
    b = [*a[:9], "nine\n", *a[10:]]
    assert list(unified_diff(a, b, "a/f", "b/f")) == list(difflib.unified_diff(a, b, "a/f", "b/f"))


def test_a_file_crafted_against_difflib_is_diffed_at_once() -> None:
    """difflib took 12 s on these 100,000 lines with one changed, and minutes on a megabyte."""
    a = ["a\n" if i % 2 else f"{i % 150}\n" for i in range(100_000)]
    b = [*a[:50_000], "changed\n", *a[50_001:]]
    began = time.monotonic()
    diff = list(unified_diff(a, b, "a/f", "b/f"))
    assert time.monotonic() - began < 2
    assert _apply(a, diff) == b and len(diff) == 3 + 7 + 1


def test_a_replacements_diff_is_that_of_the_whole_files() -> None:
    """Read from the lines around the change only, numbered as in the whole file (where an
    added line among equal ones goes may differ from a whole diff's: both are right)."""
    rng = random.Random(7)
    for _ in range(2000):
        before = "".join(rng.choice(["a", "b", "xy", "", "\n", "\n", "\r\n"]) for _ in range(rng.randint(0, 60)))
        at = rng.randint(0, len(before))
        old = rng.randint(0, len(before) - at)
        new = "".join(rng.choice(["a", "q", "\n"]) for _ in range(rng.randint(0, 4)))
        after = before[:at] + new + before[at + old:]
        a, b = diffs._lines(before), diffs._lines(after)
        diff = list(diffs.replacement_diff(before, at, old, new, "a/f", "b/f"))
        # Applied to the whole file's lines by its hunks' numbers: the window is placed right.
        assert _apply(a, diff) == b, (before, at, old, new, diff)
        assert (diff == []) == (a == b)


def test_a_last_line_with_no_newline_is_marked_not_run_into_the_next() -> None:
    """difflib wrote `-l4` with no newline, so the text of the diff read `-l4+new` (an MCP
    edit_file's answer), and a final newline added showed as `-x` then `+x`."""
    text = "".join(diffs.replacement_diff("l1\nl2\nl4", 6, 2, "new\nl4\n", "a/f", "b/f"))
    assert text == "--- a/f\n+++ b/f\n@@ -1,3 +1,4 @@\n l1\n l2\n-l4\n\\ No newline at end of file\n+new\n+l4\n"
    added = list(unified_diff(["x"], ["x\n"], "a/f", "b/f"))
    assert added[2:] == ["@@ -1 +1 @@\n", "-x\n", "\\ No newline at end of file\n", "+x\n"]
