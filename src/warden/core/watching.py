"""File changes in a workspace as watchers see them: one `Batch` per debounced burst.

Pure: the inotify watcher (adapters/watcher.py) feeds raw `(kind, path)` events into a
`Coalescer` (core/changes.py, with the ignore rules), a debounced burst comes out as one `Batch`.
Paths are workspace-relative (`/src/a.py`), never host paths.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from warden.core.changes import (
    BATCH_LIMIT,
    DEBOUNCE_S,
    IGNORED_NAMES,
    MAX_BATCH_WAIT_S,
    RUN_PATHS,
    ChangeKind,
    Coalescer,
    ignored,
    ignored_name,
    run_summary,
    shown_path,
)

__all__ = ["BATCH_LIMIT", "DEBOUNCE_S", "IGNORED_NAMES", "MAX_BATCH_WAIT_S", "RUN_PATHS", "Batch", "Change",
           "ChangeKind", "Coalescer", "Notice", "batch_of", "ignored", "ignored_name", "merged", "run_summary",
           "shown_path"]


@dataclass(frozen=True)
class Notice:
    """Something a watcher should know (a folder left unwatched: its changes are missed).

    `path` (workspace-relative) is the folder it names, so a holder that may not see that folder
    is never told of it (services.watching filters notices as it filters changes); None when the
    message names no path.
    """

    message: str
    path: str | None = None

    def to_json(self) -> dict[str, str]:
        return {"message": shown_path(self.message)}

    def __str__(self) -> str:
        return self.message


@dataclass(frozen=True)
class Change:
    """One path that changed during a batch; `path` is workspace-relative."""

    change: ChangeKind
    path: str

    def to_json(self) -> dict[str, str]:
        return {"change": self.change, "path": shown_path(self.path)}


@dataclass(frozen=True)
class Batch:
    """The changes of one debounced burst, in the order their paths first changed.

    `count` is how many changes the burst held: `len(changes)` unless `overflow`, when only the
    first BATCH_LIMIT are listed and `count` also counts every later event (an upper bound: past
    the limit repeated changes of one path are no longer merged).
    """

    changes: tuple[Change, ...]
    at: str  # ISO 8601, UTC: when the burst ended
    count: int
    overflow: bool = False

    def to_json(self) -> dict[str, object]:
        data: dict[str, object] = {"changes": [c.to_json() for c in self.changes], "at": self.at,
                                   "count": self.count}
        if self.overflow:
            data["overflow"] = True
        return data

    def lines(self) -> list[str]:
        """The human form: one line per change, then one for what overflow left out."""
        out = [f"{c.change} {shown_path(c.path)}" for c in self.changes]
        if self.overflow:
            out.append(f"… and more: {self.count} changes in all (only the first {len(self.changes)} listed)")
        return out

    def visible(self, shown: Callable[[str], bool]) -> Batch | None:
        """Only the changes whose path `shown` accepts (a grant's zones); None when none is.

        An overflowed batch's unlisted changes cannot be judged, so it keeps its flag and count
        only if something listed was shown.
        """
        kept = tuple(c for c in self.changes if shown(c.path))
        if not kept:
            return None
        if len(kept) == len(self.changes):
            return self
        return Batch(kept, self.at, len(kept) if not self.overflow else self.count - (len(self.changes) - len(kept)),
                     self.overflow)


def batch_of(folded: Coalescer, at: str) -> Batch | None:
    """A burst's folded changes as one batch ended `at`, or None when they cancelled out."""
    if not folded:
        return None
    changes = tuple(Change(kind, path) for path, kind in folded.items())
    return Batch(changes, at, len(changes) + folded.extra, folded.overflow)


def merged(first: Batch, then: Batch, limit: int) -> Batch:
    """Two batches as one (for a reader that fell behind), listing at most `limit` changes.

    Changes are not folded across the two (a path may be listed twice); `count` adds up.
    """
    room = max(0, limit - len(first.changes))
    return Batch(first.changes + then.changes[:room], then.at, first.count + then.count,
                 first.overflow or then.overflow or len(then.changes) > room)
