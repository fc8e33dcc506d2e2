"""Which file changes count and how one burst's raw events fold into one change per path:
the light half of file watching, which every run's quota watcher uses for the run's audit
summary (so it is kept free of dataclasses: `warden run` imports it). core/watching.py makes the
batches watchers hand out from it.

Memory is bounded whatever a command does: a fold keeps at most `limit` distinct paths; past
that it only counts (`overflow`), so a bot creating a million files costs a counter, not a list.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

from warden.core.gitcontrol import QUARANTINE_SUFFIX

__all__ = ["BATCH_LIMIT", "DEBOUNCE_S", "IGNORED_NAMES", "MAX_BATCH_WAIT_S", "RUN_PATHS", "ChangeKind", "Coalescer",
           "ignored", "ignored_name", "run_summary", "shown_path"]

ChangeKind = Literal["added", "modified", "deleted"]

# Seed 002: changes are grouped over 100 ms of quiet. A steady stream of writes still gets a
# batch at least every MAX_BATCH_WAIT_S, so a watcher never waits on a busy bot for good.
DEBOUNCE_S = 0.1
MAX_BATCH_WAIT_S = 1.0
# Distinct paths one batch lists before it only counts them (overflow).
BATCH_LIMIT = 1000
# Paths a run's audit event names (its counts cover them all).
RUN_PATHS = 20

# Folders nobody wants a change feed of (Warden's state, environments, package trees, git's own
# store) at any depth, and what Warden's git guard moved aside (core/gitcontrol.py). They are
# never watched at all, so `npm install` costs the watcher nothing.
IGNORED_NAMES = frozenset({".warden", ".venv", "node_modules", ".git"})


def shown_path(path: str) -> str:
    """`path` as text: a name that is no UTF-8 (read with surrogateescape) gets U+FFFD where its
    bad bytes were, so it can be written as JSON, to a terminal or to the audit log."""
    return path.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def ignored_name(name: str) -> bool:
    """Whether a file or folder called `name` is left out of change feeds (with all it holds)."""
    return name in IGNORED_NAMES or QUARANTINE_SUFFIX in name


def ignored(path: str) -> bool:
    """Whether workspace-relative `path` lies in (or is) an ignored folder."""
    return any(ignored_name(part) for part in path.split("/") if part)


# How a path's earlier change and a later one fold into one (None: nothing happened in the end).
_FOLD: dict[tuple[ChangeKind, ChangeKind], ChangeKind | None] = {
    ("added", "modified"): "added",
    ("added", "deleted"): None,
    ("added", "added"): "added",
    ("modified", "deleted"): "deleted",
    ("modified", "added"): "modified",
    ("modified", "modified"): "modified",
    ("deleted", "added"): "modified",
    ("deleted", "modified"): "modified",
    ("deleted", "deleted"): "deleted",
}


class Coalescer:
    """Raw events of one burst folded into one change per path, keeping at most `limit` paths."""

    def __init__(self, limit: int = BATCH_LIMIT) -> None:
        self.limit = limit
        self._changes: dict[str, ChangeKind] = {}
        self._extra = 0  # events past the limit, counted only
        self.overflow = False

    def __bool__(self) -> bool:
        return bool(self._changes) or self._extra > 0 or self.overflow

    def add(self, kind: ChangeKind, path: str) -> None:
        before = self._changes.get(path)
        if before is not None:
            after = _FOLD[(before, kind)]
            if after is None:
                del self._changes[path]  # made and removed within the burst: nothing to report
            else:
                self._changes[path] = after
            return
        if len(self._changes) < self.limit:
            self._changes[path] = kind
        else:
            self.overflow = True
            self._extra += 1

    def lost(self, count: int = 1) -> None:
        """The kernel dropped events (its queue overflowed): say so, count them as one or more."""
        self.overflow = True
        self._extra += count

    def items(self) -> Iterable[tuple[str, ChangeKind]]:
        """(path, change) of each path kept, in the order it first changed."""
        return self._changes.items()

    def tally(self) -> dict[str, int]:
        """How many paths were added, modified and deleted."""
        counts = {"added": 0, "modified": 0, "deleted": 0}
        for kind in self._changes.values():
            counts[kind] += 1
        return counts

    def paths(self) -> Iterable[str]:
        return self._changes.keys()

    @property
    def extra(self) -> int:
        """Events past the limit (or dropped by the kernel), counted but not listed."""
        return self._extra


def run_summary(changes: Coalescer, *, paths: int = RUN_PATHS) -> dict[str, object] | None:
    """What a run changed in its workspace, for its audit event's `detail.changes`: counts per
    kind, the first `paths` paths, and `overflow` (with `more`) when the counts are not all."""
    if not changes:
        return None
    summary: dict[str, object] = {**changes.tally()}
    summary["paths"] = [shown_path(p) for p, _ in zip(changes.paths(), range(paths), strict=False)]
    if changes.overflow:
        summary["overflow"] = True
        summary["more"] = changes.extra
    return summary
