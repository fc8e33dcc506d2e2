"""Watching a workspace folder for file changes (adapters/watcher.py is the real one)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from warden.core.watching import Batch, Notice

__all__ = ["ChangeFeed", "FileWatcher"]


class ChangeFeed(Protocol):
    """The debounced change batches of one watched folder, until it is closed."""

    @property
    def gone(self) -> bool:
        """The watched folder itself was deleted or moved away: no batch follows."""
        ...

    @property
    def notes(self) -> list[Notice]:
        """What could not be watched and why (limits), for the person or bot watching; only ever
        appended to, each naming the folder it is about (to filter by policy) or none."""
        ...

    def next(self, timeout: float | None) -> Batch | None:
        """The next batch (blocks); None after `timeout` seconds of nothing, once closed, or gone."""
        ...

    def close(self) -> None:
        """Stop watching; safe from any thread, also while another one waits in `next`."""
        ...


class FileWatcher(Protocol):
    """Starts change feeds over workspace folders."""

    def watch(self, root: str, *, debounce_s: float, max_wait_s: float, limit: int) -> ChangeFeed:
        """A feed of `root` (a folder, never followed through a link); paths relative to it.
        A burst ends after `debounce_s` of quiet or `max_wait_s` after its first change;
        `limit` bounds the paths one batch lists (core.watching.Coalescer)."""
        ...
