"""The disk quota of workspaces, as runs, file writes, installs and blobs apply it.

Limits come from the settings (`workspace.max_disk`, `workspace.max_files`,
`workspace.min_free`); core/quota.py decides; the `DiskUsage` port (adapters/disk.py)
measures a folder and watches a run.
Refusals carry the setting as their rule: a write past a limit is TooLarge (HTTP 413), a
nearly full disk under Warden's home is Unavailable.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from warden.core.errors import TooLarge, Unavailable
from warden.core.limits import Limits
from warden.core.ports import DiskUsage, QuotaWatch
from warden.core.quota import DISK_KEY, FILES_KEY, FREE_KEY, Quota, Usage
from warden.core.settings import Settings

__all__ = ["QuotaService"]


class QuotaService:
    """Applies the workspace quota to the folders `disk` measures."""

    def __init__(self, settings: Settings, home: Path, disk: DiskUsage,
                 kept: Callable[[str], int] | None = None) -> None:
        self._settings = settings
        self._home = home
        self._disk = disk
        # The bytes Warden's store keeps for the workspace at a folder (checkpoints, versions):
        # they count against workspace.max_disk like the workspace's own files.
        self._kept = kept or (lambda _path: 0)

    def limits(self) -> Quota:
        s = self._settings
        return Quota(s.get_size(DISK_KEY), s.get_int(FILES_KEY), s.get_size(FREE_KEY))

    def _existing_home(self) -> str:
        return self._disk.nearest_existing(str(self._home))

    def check_free(self) -> None:
        """Unavailable when the filesystem of Warden's home has less than `workspace.min_free` free."""
        self.room()

    def room(self) -> int:
        """The bytes Warden may still write on the filesystem of its home before it has less than
        `workspace.min_free` free (Unavailable when it has less already)."""
        where = self._existing_home()
        free, limits = self._disk.free_bytes(where), self.limits()
        problem = limits.free_problem(free, where)
        if problem is not None:
            raise Unavailable(problem, rule=FREE_KEY)
        return free - limits.min_free

    def usage(self, path: str) -> Usage:
        """What workspace folder `path` holds now (one walk), with what Warden keeps of it."""
        return self._disk.measure(path).plus(self._kept(path), 0)

    def check_write(self, workspace: str, usage: Usage, add_bytes: int, add_files: int, what: str) -> None:
        """TooLarge when writing `add_bytes` in `add_files` new files would pass a limit."""
        refused = self.limits().refusal(usage, add_bytes, add_files, what, workspace)
        if refused is not None:
            message, key = refused
            raise TooLarge(message, rule=key)

    def over(self, workspace: str, path: str) -> str | None:
        """Why workspace folder `path` is over its quota now, or None."""
        found = self.limits().over(self.usage(path), workspace)
        return None if found is None else found[0]

    def check_room(self, workspace: str, path: str) -> None:
        """TooLarge when the workspace is already at a limit (before an install, say)."""
        self.check_write(workspace, self.usage(path), 1, 1, "adding anything")

    def watch(self, path: str) -> QuotaWatch:
        """A watcher for one run in workspace folder `path` (enter it to measure and watch)."""
        limits = self.limits()
        kept = self._kept(path)
        if kept:
            # The watcher measures the folder itself; what the store keeps comes off the budget.
            limits = replace(limits, max_bytes=max(0, limits.max_bytes - kept))
        return self._disk.watch(path, limits, home=self._existing_home())

    def capped(self, limits: Limits, start: Usage) -> Limits:
        """`limits` with the file size capped at the bytes the workspace has left."""
        return replace(limits, file_size=self.limits().file_size_cap(start, limits.file_size))

    def stop_note(self, watcher: QuotaWatch, workspace: str, exit_code: int) -> str | None:
        """The line a run that broke the quota ends with, or None; `exit_code` tells whether
        the kill reached it (137) or the command had ended already."""
        if watcher.breach is None:
            return None
        return self.limits().stop_note(watcher.breach, watcher.at or watcher.start, workspace,
                                       stopped=exit_code == 128 + 9)
